// The UI's writes, through the JSON API: acknowledge an alert, silence an alert or a run
// for a while, list the active silences and expire them.  Text from the API is set as
// text, never as HTML.
(function () {
  "use strict";
  if (window.losswatchActions) return;  // one listener, however many blocks include this
  window.losswatchActions = true;
  const BY = "web UI";

  async function send(method, url, body) {
    const options = { method: method, credentials: "same-origin", headers: {} };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    const response = await fetch(url, options);
    const answer = await response.json().catch(() => null);
    if (!response.ok) {
      throw new Error(answer && answer.error ? answer.error.message : "HTTP " + response.status);
    }
    return answer;
  }

  function say(box, text, failed) {
    const out = box.querySelector(".action-status");
    out.textContent = text;
    out.classList.toggle("error", Boolean(failed));
  }

  function describe(matchers) {
    return Object.entries(matchers).map(([k, v]) => k + "=" + v).join(" ");
  }

  async function listSilences(panel) {
    const body = panel.querySelector("table.silences tbody");
    const silences = await send("GET", "/v1/silences");
    body.replaceChildren();
    for (const s of silences) {
      const row = document.createElement("tr");
      const until = new Date(s.ends_at * 1000).toISOString().slice(0, 16).replace("T", " ");
      for (const text of [describe(s.matchers), until, s.created_by, s.comment]) {
        const cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      }
      const cell = document.createElement("td");
      const expire = document.createElement("button");
      expire.type = "button";
      expire.textContent = "Expire";
      expire.dataset.action = "expire";
      expire.dataset.silence = String(s.id);
      cell.appendChild(expire);
      row.appendChild(cell);
      body.appendChild(row);
    }
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-action]");
    if (!button) return;
    const box = button.closest(".actions");
    button.disabled = true;
    try {
      if (button.dataset.action === "acknowledge") {
        await send("POST", "/v1/alerts/" + encodeURIComponent(button.dataset.alert) + "/acknowledge");
        say(box, "Acknowledged.");
        button.remove();
      } else if (button.dataset.action === "silence") {
        const duration = box.querySelector(".silence-duration").value;
        const matchers = JSON.parse(button.dataset.matchers);
        const made = await send("POST", "/v1/silences", { ...matchers, created_by: BY, duration: duration });
        say(box, "Silenced " + describe(made.matchers) + " for " + duration + " (silence " + made.id + ").");
      } else if (button.dataset.action === "expire") {
        await send("DELETE", "/v1/silences/" + encodeURIComponent(button.dataset.silence));
        await listSilences(box);  // the list first: once this is said, the table is current
        say(box, "Silence " + button.dataset.silence + " expired.");
      }
    } catch (e) {
      say(box, e.message, true);
    } finally {
      button.disabled = false;
    }
  });

  const panel = document.getElementById("silences");
  if (!panel) return;
  panel.querySelector("form.new-silence").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target;
    const body = { created_by: BY, duration: form.querySelector(".silence-duration").value };
    for (const name of ["run", "kind", "tag", "severity", "comment"]) {
      const value = form.elements[name].value.trim();
      if (value) body[name] = value;
    }
    try {
      const made = await send("POST", "/v1/silences", body);
      form.reset();
      await listSilences(panel);
      say(panel, "Silenced " + describe(made.matchers) + " (silence " + made.id + ").");
    } catch (e) {
      say(panel, e.message, true);
    }
  });
  listSilences(panel).catch((e) => say(panel, e.message, true));
})();
