// The alert page's Acknowledge and Silence buttons: writes through the JSON API, sent with
// X-Requested-With so the sign-in cookie may vouch for them (see app/service/csrf.py).
(function () {
  "use strict";
  const box = document.getElementById("alert-actions");
  if (!box) return;
  const path = "/v1/alerts/" + encodeURIComponent(box.dataset.alert);
  const status = box.querySelector(".action-status");

  async function send(method, url, body) {
    const response = await fetch(url, {
      method: method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Requested-With": "losswatch" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(answer.error ? answer.error.message : "HTTP " + response.status);
    return answer;
  }

  function show(alert) {
    box.querySelector(".acknowledge").disabled = alert.acknowledged;
    box.querySelector(".silence").textContent = alert.silenced ? "Unsilence" : "Silence";
    box.dataset.silenced = String(alert.silenced);
    status.textContent = [alert.acknowledged ? "acknowledged" : "", alert.silenced ? "silenced: no webhooks" : ""].filter(Boolean).join(", ");
  }

  function act(method, url, body) {
    send(method, url, body).then(show).catch((e) => { status.textContent = e.message; });
  }

  box.querySelector(".acknowledge").addEventListener("click", () => act("POST", path + "/acknowledge"));
  box.querySelector(".silence").addEventListener("click", () => act("PUT", path + "/silence", { silenced: box.dataset.silenced !== "true" }));
})();
