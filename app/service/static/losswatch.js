// Charts of runs' tags with their alerts marked, drawn with uPlot from the JSON API.
// One zoom for every chart of the page (drag to zoom, double-click to zoom out, both kept in
// the URL); a zoomed window is fetched again at full detail.  Data is fetched again every
// `?refresh=` seconds (30) while the tab is visible, keeping the zoom.  On a run page the x-axis
// is the step, the time since the run's first point or the wall time (`?x=`); the zoom is kept
// in steps whatever the axis, through the run's clock (chartkit.clock).
(function () {
  "use strict";
  const root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined" || !window.chartkit) return;
  const kit = window.chartkit;

  const HEIGHT = 240, LANES = 3, LANE_PX = 14;
  const RUN_COLORS = ["#1f4e9c", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
  const EVAL_COLOR = "#e08a00";
  const CLASS_COLORS = {
    fast_recovering: "rgba(44,160,44,0.25)", slow_recovering: "rgba(255,127,14,0.3)",
    divergent: "rgba(214,39,40,0.3)", pending: "rgba(120,120,120,0.25)",
  };
  const KIND_COLORS = {
    grad_norm_explosion: "rgba(214,39,40,0.3)", divergence: "rgba(148,103,189,0.15)",
    plateau: "rgba(148,103,189,0.1)", overfitting: "rgba(255,127,14,0.12)", loss_scale_collapse: "rgba(140,86,75,0.15)",
    nonfinite: "rgba(214,39,40,0.15)", grad_norm_stuck: "rgba(120,120,120,0.15)",
  };

  const XAXES = ["step", "relative", "wall"];
  const XNAMES = { step: "step", relative: "relative time", wall: "wall time" };
  const params = new URLSearchParams(location.search);
  const runs = JSON.parse(root.dataset.runs);  // [{name, source}]: one run, or the runs compared
  const single = runs.length === 1;
  const state = {
    zoom: initialZoom(),
    smooth: clamp(Number(params.get("smooth") || 0), 0, 0.99),
    refresh: Math.max(1, Number(params.get("refresh") || root.dataset.refresh || 30)),
    alerts: [],
    seen: null,  // alert ids already shown; new ones are announced
    xaxis: XAXES.includes(params.get("x")) ? params.get("x") : "step",
    clock: null,  // the run's step <-> wall time mapping; null without wall times
  };
  const charts = [];
  const sync = uPlot.sync("losswatch");

  function clamp(v, lo, hi) { return Number.isFinite(v) ? Math.min(hi, Math.max(lo, v)) : lo; }

  function xMode() { return single && state.clock ? state.xaxis : "step"; }

  function toX(step) {
    const mode = xMode();
    if (mode === "step") return step;
    return state.clock.toTime(step) - (mode === "relative" ? state.clock.start : 0);
  }

  function toStep(x) {
    const mode = xMode();
    if (mode === "step") return x;
    return state.clock.toStep(x + (mode === "relative" ? state.clock.start : 0));
  }

  function buildClock() {
    // One clock for the page, from every line of every chart, so the charts' cursors agree.
    const steps = [], walls = [];
    for (const c of charts) for (const s of c.full) { steps.push(...s.steps); walls.push(...s.walls); }
    state.clock = single ? kit.clock(steps, walls) : null;
  }

  function wallText(seconds) {
    const d = new Date(seconds * 1000), two = (n) => String(n).padStart(2, "0");
    return d.getFullYear() + "-" + two(d.getMonth() + 1) + "-" + two(d.getDate()) + " " + two(d.getHours()) + ":" + two(d.getMinutes()) + ":" + two(d.getSeconds());
  }

  function xValue(v) {
    if (v === null || v === undefined) return "";
    const mode = xMode();
    if (mode === "relative") return kit.duration(v) + " (step " + Math.round(toStep(v)) + ")";
    if (mode === "wall") return wallText(v) + " (step " + Math.round(toStep(v)) + ")";
    return String(Math.round(v));
  }

  function initialZoom() {
    const from = params.get("from"), to = params.get("to");
    if (from !== null && to !== null && Number.isFinite(+from) && Number.isFinite(+to) && +from < +to) return { min: +from, max: +to };
    if (root.dataset.focusStart) return { min: Number(root.dataset.focusStart), max: Number(root.dataset.focusEnd) };
    return null;
  }

  function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

  function writeUrl() {
    const url = new URL(location.href);
    if (state.zoom) { url.searchParams.set("from", String(Math.floor(state.zoom.min))); url.searchParams.set("to", String(Math.ceil(state.zoom.max))); }
    else { url.searchParams.delete("from"); url.searchParams.delete("to"); }
    if (state.smooth > 0) url.searchParams.set("smooth", String(state.smooth)); else url.searchParams.delete("smooth");
    if (state.xaxis !== "step") url.searchParams.set("x", state.xaxis); else url.searchParams.delete("x");
    history.replaceState(null, "", url);
  }

  async function fetchJson(path, what) {
    const response = await fetch(path, { credentials: "same-origin" });
    if (!response.ok) throw new Error(what + ": HTTP " + response.status);
    return response.json();
  }

  async function fetchSeries(line, width, zoom) {
    const query = { tag: line.tag, max_points: String(Math.max(200, Math.min(4000, 2 * width))) };
    if (line.source) query.source = line.source;
    if (zoom) { query.start = String(Math.floor(zoom.min)); query.end = String(Math.ceil(zoom.max)); }
    const body = await fetchJson("/v1/runs/" + encodeURIComponent(line.run) + "/series?" + new URLSearchParams(query), "series " + line.tag);
    return {
      steps: body.points.map((p) => p[0]),
      values: body.points.map((p) => (typeof p[1] === "number" ? p[1] : null)),
      nonfinite: body.points.filter((p) => typeof p[1] !== "number").map((p) => p[0]),
      walls: body.wall_times,
      log: body.log_axis,
    };
  }

  function linesOf(el) {
    // One line per compared run; on a run page the tag, plus the evaluations drawn with it.
    const tag = el.dataset.tag;
    if (!single) {
      const having = JSON.parse(el.dataset.runs);
      return runs.map((r, i) => ({ run: r.name, source: r.source, tag: tag, label: r.name, color: RUN_COLORS[i % RUN_COLORS.length], marker: false }))
        .filter((l) => having.includes(l.run));
    }
    const extra = el.dataset.extra ? JSON.parse(el.dataset.extra) : [];
    return [{ run: runs[0].name, source: runs[0].source, tag: tag, label: tag, color: css("--line") || RUN_COLORS[0], marker: false },
      ...extra.map((t) => ({ run: runs[0].name, source: runs[0].source, tag: t, label: t, color: EVAL_COLOR, marker: true }))];
  }

  function marksOf(tag) {
    // Bands for this tag's alerts (spikes by class), dashed lines for restarts (every chart).
    return state.alerts.filter((a) => a.tag === tag || a.kind === "restart").map((a) => ({
      kind: a.kind, start: a.start_step, end: a.finding.end_step, id: a.id,
      color: a.kind === "loss_spike" ? CLASS_COLORS[a.classification] : KIND_COLORS[a.kind],
      label: (a.kind === "restart" ? "restart" : (a.kind === "loss_spike" ? a.classification : a.kind).replace(/_/g, "-")) + " " + a.start_step,
      message: a.finding.message,
    }));
  }

  function table(chart) {
    // uPlot's one x column joined from each line's steps; with smoothing on, each line is
    // drawn twice: faint as logged, and its moving average.
    const tables = [], series = [{ label: XNAMES[xMode()], value: (u, v) => xValue(v) }];
    const value = (u, v) => kit.fmt(v);
    const positive = (vs) => (chart.log ? vs.map((v) => (v !== null && v > 0 ? v : null)) : vs);
    chart.lines.forEach((line, i) => {
      const s = chart.view[i];
      let xs = s.steps.map(toX), values = positive(s.values);
      const worked = chart.worked ? chart.worked[i] : null;
      if (worked && worked.averaged) {
        // a train loss logged as its epoch's running mean: drawn faint as logged, and each
        // batch's loss worked back (what the alerts speak of) as the line's own
        tables.push([xs, values]);
        const faint = single ? "#999" : line.color;
        series.push({ label: line.label + " (logged: running mean of " + worked.averaged + "-step epochs)", stroke: faint, alpha: single ? 1 : 0.35, width: 1, spanGaps: false, value: value, class: "logged-mean" });
        xs = worked.losses.map((p) => toX(p[0]));
        values = positive(worked.losses.map((p) => p[1]));
      }
      if (line.marker) {
        tables.push([xs, values]);
        series.push({ label: line.label, stroke: line.color, width: 1, spanGaps: true, points: { show: true, size: 6, fill: line.color }, value: value });
      } else if (state.smooth > 0) {
        tables.push([xs, values], [xs, kit.ema(values, state.smooth)]);
        series.push({ label: line.label + " (raw)", stroke: line.color, alpha: 0.25, width: 1, spanGaps: false, value: value },
          { label: line.label, stroke: line.color, width: 1.5, spanGaps: true, value: value, class: "smoothed" });
      } else {
        tables.push([xs, values]);
        series.push({ label: line.label, stroke: line.color, width: 1, spanGaps: false, value: value });
      }
    });
    const data = tables.length === 1 ? tables[0] : uPlot.join(tables, tables.map(() => [0, 1]));
    return { data: data, series: series };
  }

  function drawBands(u, chart) {
    const ctx = u.ctx, { left, top, width, height } = u.bbox, px = devicePixelRatio;
    ctx.save();
    ctx.beginPath(); ctx.rect(left, top, width, height); ctx.clip();  // nothing spills past the plot
    for (const m of chart.marks) {
      const x0 = u.valToPos(toX(m.start), "x", true);
      if (m.kind === "restart") {
        ctx.strokeStyle = css("--fg"); ctx.setLineDash([6, 4]); ctx.lineWidth = px;
        ctx.beginPath(); ctx.moveTo(x0, top); ctx.lineTo(x0, top + height); ctx.stroke(); ctx.setLineDash([]);
        continue;
      }
      const x1 = m.end !== null && m.end !== undefined ? u.valToPos(toX(m.end), "x", true) : u.valToPos(u.scales.x.max, "x", true);
      ctx.fillStyle = m.color || "rgba(120,120,120,0.2)";
      ctx.fillRect(x0, top, Math.max(x1 - x0, 3 * px), height);
    }
    if (chart.band && chart.showBand && chart.band.points.length) drawBaseline(u, chart);
    if (hasBand(chart)) chart.el.dataset.band = chart.band && chart.showBand ? String(chart.band.points.length) : "off";
    ctx.fillStyle = "#c62828";
    for (const step of chart.view[0] ? chart.view[0].nonfinite : []) {
      const x = u.valToPos(toX(step), "x", true);
      ctx.fillRect(x - px, top, 2 * px, 8 * px);
    }
    ctx.restore();
  }

  function placeLabels(u, chart) {
    // Labels are text in a layer over the plot (clipped to it), in lanes so none overlap.
    let layer = u.over.querySelector(".mark-labels");
    if (!layer) { layer = document.createElement("div"); layer.className = "mark-labels"; u.over.appendChild(layer); }
    layer.replaceChildren();
    const lo = toStep(u.scales.x.min), hi = toStep(u.scales.x.max);
    const shown = chart.marks.filter((m) => {
      const end = m.end !== null && m.end !== undefined ? m.end : m.start;
      return end >= lo && m.start <= hi;
    });
    const spans = shown.map((m) => {
      const span = document.createElement("span");
      span.className = "mark-label";
      span.textContent = m.label;
      layer.appendChild(span);
      return span;
    });
    const plotWidth = u.over.clientWidth;
    const items = shown.map((m, i) => ({ x: u.valToPos(toX(m.start), "x") + 3, w: spans[i].offsetWidth }));
    kit.lanes(items, 0, plotWidth, LANES, 6).forEach((place, i) => {
      if (place.lane < 0) { spans[i].remove(); return; }  // too crowded: named on hover instead
      spans[i].style.left = place.x + "px";
      spans[i].style.top = (2 + place.lane * LANE_PX) + "px";
    });
  }

  function shownRange(u, chart) {
    // The steps shown, the last step drawn and the x-axis, for tests and screenshots to read.
    chart.el.dataset.x = Math.round(toStep(u.scales.x.min)) + ".." + Math.round(toStep(u.scales.x.max));
    chart.el.dataset.last = u.data[0].length ? String(Math.round(toStep(u.data[0][u.data[0].length - 1]))) : "";
    chart.el.dataset.xaxis = xMode();
  }

  function hoverMarks(u, chart) {
    // What the cursor is over: every alert there, including those too crowded to label.
    const idx = u.cursor.idx, out = chart.box.querySelector(".mark-hover");
    if (!out) return;
    const step = idx === null || idx === undefined ? null : toStep(u.data[0][idx]);
    const under = step === null ? [] : chart.marks.filter((m) => m.start <= step && step <= (m.end !== null && m.end !== undefined ? m.end : m.start));
    out.textContent = under.map((m) => m.label + ": " + m.message).join("  |  ");
  }

  function render(chart) {
    // (Re)draws the chart from its data, with the page's zoom and the chart's log toggle.
    const { data, series } = table(chart);
    if (chart.u) chart.u.destroy();
    const axis = { stroke: css("--fg"), grid: { stroke: css("--grid"), width: 1 }, ticks: { stroke: css("--grid") } };
    chart.u = new uPlot({
      width: chart.el.clientWidth || 900, height: HEIGHT,
      cursor: {
        sync: { key: sync.key },
        drag: { setScale: false, x: true, y: false },
        bind: { dblclick: () => null },  // double-click zooms every chart out (below), not just this one
      },
      legend: { live: true },
      scales: { x: { time: xMode() === "wall" }, y: { distr: chart.log ? 3 : 1 } },
      series: series,
      axes: [{ ...axis, ...xAxis(chart) }, { ...axis, size: 70, values: (u, values) => kit.ticks(values) }],
      hooks: {
        drawClear: [(u) => drawBands(u, chart)],
        draw: [(u) => { placeLabels(u, chart); shownRange(u, chart); }],
        setCursor: [(u) => hoverMarks(u, chart)],
        setSelect: [(u) => {
          if (u.select.width < 5) return;
          const min = toStep(u.posToVal(u.select.left, "x")), max = toStep(u.posToVal(u.select.left + u.select.width, "x"));
          u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
          zoomTo({ min: min, max: max });
        }],
      },
    }, data, chart.el);
    if (state.zoom) chart.u.setScale("x", { min: toX(state.zoom.min), max: toX(state.zoom.max) });
    chart.el.dataset.log = String(chart.log);
  }

  function xAxis(chart) {
    // Relative time reads as durations; wall time keeps uPlot's dates.  The labels drawn are
    // kept on the chart for tests to read (they are drawn on a canvas).
    const mode = xMode();
    if (mode === "step") { delete chart.el.dataset.xticks; return {}; }
    return {
      values: (u, splits, axisIdx, space, incr) => {
        // Wall time: the date when ticks are days apart, else the time of day.
        const texts = mode === "relative" ? splits.map(kit.duration)
          : splits.map((v) => (incr >= 86400 ? wallText(v).slice(0, 10) : wallText(v).slice(11, 16)));
        chart.el.dataset.xticks = texts.join("|");
        return texts;
      },
    };
  }

  let pendingZoom;
  function zoomTo(zoom) {
    // Every chart's select hook may ask at once (uPlot syncs the drag): the last one wins.
    clearTimeout(pendingZoom);
    pendingZoom = setTimeout(() => applyZoom(zoom).catch(showError), 0);
  }

  async function applyZoom(zoom) {
    state.zoom = zoom;
    writeUrl();
    await Promise.all(charts.map(loadView));
    charts.forEach(render);
    root.dataset.zoom = zoom ? Math.floor(zoom.min) + "-" + Math.ceil(zoom.max) : "";
  }

  async function loadFull(chart) {
    chart.full = await Promise.all(chart.lines.map((l) => fetchSeries(l, chart.el.clientWidth || 900, null)));
  }

  async function loadView(chart) {
    chart.view = state.zoom ? await Promise.all(chart.lines.map((l) => fetchSeries(l, chart.el.clientWidth || 900, state.zoom))) : chart.full;
    const width = chart.el.clientWidth || 900;
    if (hasBand(chart)) chart.band = await fetchBand(chart.lines[0], width, state.zoom);
    // each train loss's worked-back batches, where it was logged as running means: on a run
    // page the band carries them, on the compare view each run's are asked for
    if (chart.el.dataset.role === "loss") chart.worked = single ? [chart.band] : await Promise.all(chart.lines.map((l) => fetchBand(l, width, state.zoom)));
  }

  function hasBand(chart) { return single && chart.el.dataset.role === "loss"; }

  async function fetchBand(line, width, zoom) {
    // The spike detector's baseline and noise band (as the PNG draws them), for the window shown.
    const query = { tag: line.tag, max_points: String(Math.max(200, Math.min(2000, width))) };
    if (line.source) query.source = line.source;
    if (zoom) { query.start = String(Math.floor(zoom.min)); query.end = String(Math.ceil(zoom.max)); }
    const body = await fetchJson("/v1/runs/" + encodeURIComponent(line.run) + "/baseline?" + new URLSearchParams(query), "baseline " + line.tag);
    return { sigmas: body.sigmas, points: body.points.filter((p) => p[1] !== null && p[2] !== null), averaged: body.averaged, losses: body.losses };
  }

  function drawBaseline(u, chart) {
    // Baseline +/- sigmas filled grey under the curve, the baseline dashed over the band.
    const ctx = u.ctx, px = devicePixelRatio, pts = chart.band.points, k = chart.band.sigmas;
    const x = (p) => u.valToPos(toX(p[0]), "x", true);
    const y = (v) => u.valToPos(chart.log ? Math.max(v, u.scales.y.min) : v, "y", true);
    ctx.fillStyle = css("--band") || "rgba(136,136,136,0.3)";
    ctx.beginPath();
    pts.forEach((p, i) => (i ? ctx.lineTo(x(p), y(p[1] + k * p[2])) : ctx.moveTo(x(p), y(p[1] + k * p[2]))));
    for (let i = pts.length - 1; i >= 0; i--) ctx.lineTo(x(pts[i]), y(pts[i][1] - k * pts[i][2]));
    ctx.closePath();
    ctx.fill();
    ctx.strokeStyle = css("--fg"); ctx.lineWidth = px; ctx.setLineDash([5 * px, 3 * px]);
    ctx.beginPath();
    pts.forEach((p, i) => (i ? ctx.lineTo(x(p), y(p[1])) : ctx.moveTo(x(p), y(p[1]))));
    ctx.stroke();
    ctx.setLineDash([]);
  }

  function download(name, blob) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  function fileName(chart, ext) {
    return (runs.map((r) => r.name).join("+") + "_" + chart.tag).replace(/[^\w.+-]+/g, "_") + "." + ext;
  }

  function button(text, title, onClick) {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = text; b.title = title;
    b.addEventListener("click", onClick);
    return b;
  }

  function tools(chart) {
    // Per chart: the log/linear toggle and the downloads.
    const bar = document.createElement("div");
    bar.className = "chart-tools";
    const log = button(chart.log ? "log y" : "linear y", "Switch the y-axis between log and linear", () => {
      chart.log = !chart.log;
      log.textContent = chart.log ? "log y" : "linear y";
      render(chart);
    });
    log.className = "log-toggle";
    if (hasBand(chart)) {
      const band = button("baseline", "Show or hide the spike detector's baseline and noise band (baseline ± 3σ)", () => {
        chart.showBand = !chart.showBand;
        band.setAttribute("aria-pressed", String(chart.showBand));
        render(chart);
      });
      band.className = "band-toggle";
      band.setAttribute("aria-pressed", "true");
      bar.append(band);
    }
    const lineNames = () => chart.u.series.slice(1).map((s) => s.label);
    const xName = () => ({ step: "step", relative: "seconds", wall: "wall_time" })[xMode()];
    bar.append(log,
      button("CSV", "Download the points shown as CSV", () => download(fileName(chart, "csv"), new Blob([kit.csv(lineNames(), chart.u.data, xName())], { type: "text/csv" }))),
      button("PNG", "Download the chart as a PNG image", () => chart.u.ctx.canvas.toBlob((blob) => download(fileName(chart, "png"), blob))));
    const hover = document.createElement("div");
    hover.className = "mark-hover";
    chart.el.before(bar);
    chart.el.after(hover);
  }

  function pageTools() {
    // For the page: smoothing, and (with several charts) a filter on tag names.
    const bar = document.createElement("div");
    bar.className = "page-tools";
    const label = document.createElement("label");
    label.textContent = "smoothing ";
    const slider = document.createElement("input");
    Object.assign(slider, { type: "range", min: "0", max: "0.99", step: "0.01", value: String(state.smooth), id: "smoothing" });
    const shown = document.createElement("output");
    shown.textContent = state.smooth.toFixed(2);
    slider.addEventListener("input", () => {
      state.smooth = Number(slider.value);
      shown.textContent = state.smooth.toFixed(2);
      writeUrl();
      charts.forEach(render);
    });
    label.append(slider, " ", shown);
    bar.append(label);
    if (single) bar.append(xSelector());
    if (charts.length > 1) {
      const filter = document.createElement("input");
      Object.assign(filter, { type: "search", id: "tag-filter", placeholder: "filter tags (regex)" });
      filter.value = params.get("tags") || "";
      const apply = () => {
        let pattern = null;
        try { pattern = new RegExp(filter.value, "i"); filter.classList.remove("invalid"); } catch (e) { filter.classList.add("invalid"); return; }
        for (const c of charts) c.box.hidden = !pattern.test(c.tag);
        for (const group of root.querySelectorAll(".tag-group")) group.hidden = [...group.querySelectorAll(".chart-box")].every((b) => b.hidden);
        const url = new URL(location.href);
        if (filter.value) url.searchParams.set("tags", filter.value); else url.searchParams.delete("tags");
        history.replaceState(null, "", url);
      };
      filter.addEventListener("input", apply);
      bar.append(filter);
      apply();
    }
    root.before(bar);
  }

  function xSelector() {
    // Step, relative or wall time; the time axes need the run's wall times.
    const label = document.createElement("label");
    label.textContent = "x-axis ";
    const select = document.createElement("select");
    select.id = "x-axis";
    for (const mode of XAXES) {
      const option = new Option(XNAMES[mode], mode, false, mode === state.xaxis);
      if (mode !== "step" && !state.clock) { option.disabled = true; option.title = "this run's points have no wall times"; }
      select.add(option);
    }
    if (!state.clock) select.value = "step";
    select.addEventListener("change", () => {
      state.xaxis = select.value;
      writeUrl();
      charts.forEach(render);
    });
    label.append(select);
    return label;
  }

  async function loadAlerts() {
    if (!single) return;
    const run = runs[0];
    state.alerts = await fetchJson("/v1/runs/" + encodeURIComponent(run.name) + "/alerts?" + new URLSearchParams({ source: run.source }), "alerts");
    const ids = state.alerts.map((a) => a.id);
    if (state.seen !== null) announce(state.alerts.filter((a) => !state.seen.has(a.id)));
    state.seen = new Set(ids);
    for (const c of charts) c.marks = marksOf(c.tag);
  }

  function announce(fresh) {
    // A new alert since the page was opened: named at the top, linked to its page.
    for (const a of fresh) {
      const note = document.createElement("p");
      note.className = "new-alert " + a.severity;
      const link = document.createElement("a");
      link.href = "/alert/" + encodeURIComponent(a.id);
      link.textContent = a.finding.message;
      note.append("New alert: ", link);
      root.before(note);
    }
  }

  async function refresh() {
    if (document.visibilityState !== "visible" || refresh.busy) return;
    refresh.busy = true;
    try {
      await loadAlerts();
      await Promise.all(charts.map(async (c) => { await loadFull(c); await loadView(c); }));
      buildClock();
      charts.forEach(render);
      root.dataset.refreshed = String(Number(root.dataset.refreshed || 0) + 1);
    } catch (e) {
      showError(e);
    } finally {
      refresh.busy = false;
    }
  }

  function showError(e) {
    // The message names a tag: text, never HTML.
    const error = document.createElement("p");
    error.className = "error";
    error.textContent = e.message;
    root.prepend(error);
  }

  async function main() {
    for (const el of root.querySelectorAll(".chart")) {
      charts.push({ el: el, box: el.closest(".chart-box"), tag: el.dataset.tag, lines: linesOf(el), marks: [], full: [], view: [], log: false, u: null, band: null, showBand: true });
    }
    await loadAlerts();
    await Promise.all(charts.map(async (c) => { await loadFull(c); await loadView(c); c.log = c.full.some((s) => s.log); }));
    buildClock();
    charts.forEach((c) => { tools(c); render(c); });
    pageTools();
    root.addEventListener("dblclick", (e) => { if (e.target.closest(".u-over")) zoomTo(null); });
    new ResizeObserver(() => charts.forEach((c) => c.u && c.u.setSize({ width: c.el.clientWidth, height: HEIGHT }))).observe(root);
    setInterval(refresh, state.refresh * 1000);
    document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") refresh(); });
    root.dataset.zoom = state.zoom ? Math.floor(state.zoom.min) + "-" + Math.ceil(state.zoom.max) : "";
    root.dataset.ready = "true";  // for tests and screenshots: every chart is drawn
  }

  main().catch(showError);
})();
