// Charts of a run's tags with its alerts marked, drawn with uPlot from the JSON API.
// Drag to zoom (the zoomed window is fetched again at full detail), double-click to reset.
(function () {
  "use strict";
  const root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined") return;

  const run = root.dataset.run, source = root.dataset.source;
  const CLASS_COLORS = {
    fast_recovering: "rgba(44,160,44,0.25)", slow_recovering: "rgba(255,127,14,0.3)",
    divergent: "rgba(214,39,40,0.3)", pending: "rgba(120,120,120,0.25)",
  };
  const KIND_COLORS = {
    grad_norm_explosion: "rgba(214,39,40,0.3)", divergence: "rgba(148,103,189,0.15)",
    plateau: "rgba(148,103,189,0.1)", overfitting: "rgba(255,127,14,0.12)", loss_scale_collapse: "rgba(140,86,75,0.15)",
    nonfinite: "rgba(214,39,40,0.15)", grad_norm_stuck: "rgba(120,120,120,0.15)",
  };
  const runPath = "/v1/runs/" + encodeURIComponent(run);
  const query = (params) => "?" + new URLSearchParams({ source: source, ...params }).toString();
  const charts = [];
  const sync = uPlot.sync("losswatch");

  function number(v) { return typeof v === "number" ? v : null; }

  function tickLabels(u, values) {
    // Small learning rates and huge loss scales read better as powers of ten.
    return values.map((v) => {
      if (v === null || v === undefined) return "";
      return v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5) ? v.toExponential(0) : String(+v.toPrecision(4));
    });
  }

  async function fetchSeries(tag, width, start, end) {
    const params = { tag: tag, max_points: String(Math.max(200, Math.min(4000, 2 * width))) };
    if (start !== undefined) { params.start = String(Math.floor(start)); params.end = String(Math.ceil(end)); }
    const response = await fetch(runPath + "/series" + query(params), { credentials: "same-origin" });
    if (!response.ok) throw new Error("series " + tag + ": HTTP " + response.status);
    const body = await response.json();
    const steps = body.points.map((p) => p[0]);
    const values = body.points.map((p) => number(p[1]));
    const bad = body.points.filter((p) => typeof p[1] !== "number").map((p) => p[0]);
    return { data: [steps, values], nonfinite: bad };
  }

  function logScale(values) {
    const positive = values.filter((v) => v !== null && v > 0);
    if (positive.length !== values.filter((v) => v !== null).length || positive.length < 2) return false;
    return Math.max(...positive) / Math.min(...positive) > 100;
  }

  function marks(alerts, tag) {
    // Bands for this tag's alerts (spikes by class), dashed lines for restarts (every chart).
    return alerts.filter((a) => a.tag === tag || a.kind === "restart").map((a) => ({
      kind: a.kind, start: a.start_step, end: a.finding.end_step, id: a.id,
      color: a.kind === "loss_spike" ? CLASS_COLORS[a.classification] : KIND_COLORS[a.kind],
      label: (a.kind === "loss_spike" ? a.classification : a.kind).replace(/_/g, "-"),
    }));
  }

  function drawMarks(u, chartMarks, nonfinite) {
    const ctx = u.ctx, top = u.bbox.top, height = u.bbox.height;
    const right = u.scales.x.max;
    ctx.save();
    ctx.font = `${11 * devicePixelRatio}px system-ui`;
    ctx.textAlign = "left";  // uPlot leaves its axis alignment behind
    ctx.textBaseline = "alphabetic";
    for (const m of chartMarks) {
      const x0 = u.valToPos(m.start, "x", true);
      if (m.kind === "restart") {
        ctx.strokeStyle = "#333"; ctx.setLineDash([6, 4]); ctx.lineWidth = devicePixelRatio;
        ctx.beginPath(); ctx.moveTo(x0, top); ctx.lineTo(x0, top + height); ctx.stroke(); ctx.setLineDash([]);
        ctx.fillStyle = "#333"; ctx.fillText("restart " + m.start, x0 + 4, top + 12 * devicePixelRatio);
        continue;
      }
      const x1 = u.valToPos(m.end !== null && m.end !== undefined ? m.end : right, "x", true);
      ctx.fillStyle = m.color || "rgba(120,120,120,0.2)";
      ctx.fillRect(x0, top, Math.max(x1 - x0, 3 * devicePixelRatio), height);
      ctx.fillStyle = "#333"; ctx.fillText(m.label + " " + m.start, x0 + 3, top + 24 * devicePixelRatio);
    }
    ctx.fillStyle = "#c62828";
    for (const step of nonfinite) {
      const x = u.valToPos(step, "x", true);
      ctx.fillRect(x - devicePixelRatio, top, 2 * devicePixelRatio, 8 * devicePixelRatio);
    }
    ctx.restore();
  }

  async function build(el, alerts) {
    const tag = el.dataset.tag, width = el.clientWidth || 900;
    const series = await fetchSeries(tag, width);
    const chartMarks = marks(alerts, tag);
    let nonfinite = series.nonfinite;
    const opts = {
      width: width, height: 240,
      cursor: { sync: { key: sync.key } },
      scales: { x: { time: false }, y: { distr: logScale(series.data[1]) ? 3 : 1 } },
      series: [{ label: "step" }, { label: tag, stroke: "#1f4e9c", width: 1, spanGaps: false }],
      axes: [{}, { size: 70, values: tickLabels }],
      hooks: {
        draw: [(u) => drawMarks(u, chartMarks, nonfinite)],
        setSelect: [async (u) => {
          if (u.select.width < 5) return;
          const lo = u.posToVal(u.select.left, "x"), hi = u.posToVal(u.select.left + u.select.width, "x");
          const detail = await fetchSeries(tag, width, lo, hi);
          nonfinite = detail.nonfinite;
          u.setData(detail.data, false);
          u.setScale("x", { min: lo, max: hi });
        }],
      },
    };
    const chart = new uPlot(opts, series.data, el);
    chart.full = series;
    el.addEventListener("dblclick", () => { nonfinite = series.nonfinite; chart.setData(series.data, true); });
    charts.push(chart);
    return chart;
  }

  async function main() {
    const response = await fetch(runPath + "/alerts" + query({}), { credentials: "same-origin" });
    const alerts = response.ok ? await response.json() : [];
    const built = await Promise.all([...root.querySelectorAll(".chart")].map((el) => build(el, alerts)));
    if (root.dataset.focusStart) {
      const start = Number(root.dataset.focusStart), end = Number(root.dataset.focusEnd);
      const pad = Math.max(50, (end - start) * 2);
      for (const c of built) c.setScale("x", { min: start - pad, max: end + pad });
    }
    root.dataset.ready = "true";  // for tests and screenshots: every chart is drawn
  }

  main().catch((e) => {
    // The message names a tag: text, never HTML.
    const error = document.createElement("p");
    error.className = "error";
    error.textContent = e.message;
    root.prepend(error);
  });
})();
