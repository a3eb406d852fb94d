// The runs page: a sparkline of each run's loss with its alerts marked (red: critical,
// orange: warning), drawn with uPlot when its row scrolls into view, so a page of 100 runs
// fetches only what is seen.
(function () {
  "use strict";
  const cells = document.querySelectorAll("td.spark[data-run]");
  if (!cells.length || typeof uPlot === "undefined") return;
  const SEVERITY = { critical: "#c62828", warning: "#e08a00" };

  async function json(url) {
    const response = await fetch(url, { credentials: "same-origin" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    return response.json();
  }

  async function draw(cell) {
    const base = "/v1/runs/" + encodeURIComponent(cell.dataset.run), source = "?" + new URLSearchParams({ source: cell.dataset.source });
    const run = await json(base + source);
    const loss = run.tags.find((t) => t.role === "loss") || run.tags.find((t) => t.points > 1);
    if (!loss) { cell.dataset.drawn = "empty"; return; }
    const [series, alerts] = await Promise.all([
      json(base + "/series" + source + "&" + new URLSearchParams({ tag: loss.tag, max_points: "120" })),
      json(base + "/alerts" + source),
    ]);
    const marked = alerts.filter((a) => a.severity in SEVERITY && (a.tag === loss.tag || a.tag === "*"));
    const data = [series.points.map((p) => p[0]), series.points.map((p) => (typeof p[1] === "number" ? p[1] : null))];
    new uPlot({
      width: 160, height: 32, pxAlign: false,
      cursor: { show: false }, legend: { show: false }, select: { show: false },
      scales: { x: { time: false }, y: { distr: series.log_axis ? 3 : 1 } },
      axes: [{ show: false }, { show: false }],
      series: [{}, { stroke: getComputedStyle(document.documentElement).getPropertyValue("--line").trim() || "#1f4e9c", width: 1 }],
      hooks: {
        draw: [(u) => {
          for (const a of marked) {
            const x = u.valToPos(a.start_step, "x", true);
            u.ctx.fillStyle = SEVERITY[a.severity];
            u.ctx.fillRect(x - devicePixelRatio, u.bbox.top, 2 * devicePixelRatio, u.bbox.height);
          }
        }],
      },
    }, data, cell);
    cell.title = loss.tag + (marked.length ? ": " + marked.map((a) => a.kind + " at " + a.start_step).join(", ") : "");
    cell.dataset.marked = String(marked.length);
    cell.dataset.drawn = "true";
  }

  const seen = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      if (!entry.isIntersecting) continue;
      seen.unobserve(entry.target);
      draw(entry.target).catch((e) => { entry.target.textContent = e.message; entry.target.dataset.drawn = "failed"; });
    }
  });
  cells.forEach((cell) => seen.observe(cell));
})();
