// Pure helpers of the charts (no DOM, no uPlot): number formatting, label lanes, smoothing,
// CSV.  Kept apart from losswatch.js so each does one job; exposed as window.chartkit.
(function () {
  "use strict";

  // Significant figures at any magnitude: an LR of 3e-5 reads "3e-5", never "0".
  function fmt(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "";
    if (typeof v !== "number") return String(v);
    if (!Number.isFinite(v)) return v > 0 ? "Infinity" : "-Infinity";
    if (v === 0) return "0";
    const d = digits || 4, a = Math.abs(v);
    if (a < 1e-3 || a >= 1e6) {
      const [m, e] = v.toExponential(d - 1).split("e");
      return String(+m) + "e" + (+e);
    }
    return String(+v.toPrecision(d));
  }

  // Tick labels with the fewest digits that tell every tick apart (a zoomed log axis has ticks
  // at 2.1e-4, 2.2e-4 ...: one digit would print "2e-4" thrice); any still equal are blanked.
  function ticks(values) {
    const shown = values.filter((v) => v !== null && v !== undefined);
    let digits = 1;
    while (digits < 8 && new Set(shown.map((v) => fmt(v, digits))).size < shown.length) digits++;
    let previous = null;
    return values.map((v) => {
      if (v === null || v === undefined) return "";
      const text = fmt(v, digits);
      if (text === previous) return "";
      previous = text;
      return text;
    });
  }

  // Labels in stacked lanes: each goes in the first lane where it overlaps nothing, shifted
  // left to end inside [left, right]; one that fits in no lane is hidden (shown on hover).
  // items: [{x, w}] in pixels; returns [{lane, x}] with lane -1 for hidden.
  function lanes(items, left, right, count, gap) {
    const ends = new Array(count).fill(-Infinity);
    const order = items.map((_, i) => i).sort((a, b) => items[a].x - items[b].x);
    const out = new Array(items.length);
    for (const i of order) {
      const w = items[i].w;
      const x = Math.max(left, Math.min(items[i].x, right - w));
      const lane = ends.findIndex((end) => x >= end + gap);
      if (lane === -1 || x + w > right + 0.5) { out[i] = { lane: -1, x: x }; continue; }
      ends[lane] = x + w;
      out[i] = { lane: lane, x: x };
    }
    return out;
  }

  // TensorBoard's smoothing: an exponential moving average, debiased so the first points are
  // not pulled towards 0; gaps (NaN, missing) stay gaps and do not reset it.
  function ema(values, weight) {
    let last = 0, n = 0;
    return values.map((v) => {
      if (v === null || !Number.isFinite(v)) return null;
      last = last * weight + (1 - weight) * v;
      n += 1;
      return last / (1 - Math.pow(weight, n));
    });
  }

  // A chart's shown data as CSV: an x column (step, seconds or wall time) and one column per line.
  function csv(names, data, xName) {
    const quote = (s) => /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    const rows = [[xName || "step", ...names].map(quote).join(",")];
    for (let i = 0; i < data[0].length; i++) {
      rows.push(data.map((col) => (col[i] === null || col[i] === undefined ? "" : String(col[i]))).join(","));
    }
    return rows.join("\n") + "\n";
  }

  // A run's clock: step to wall time and back, from the (step, wall time) pairs of its points,
  // linearly between them.  Pairs without a wall time are skipped, and the times are made
  // increasing in step (a clock set back must not fold the axis; steps logged in the same
  // millisecond are 1 ms apart), so the mapping is one to one and a zoom in time is a zoom in
  // steps.  null when fewer than two steps are timed.
  function clock(steps, walls) {
    const pairs = [];
    for (let i = 0; i < steps.length; i++) if (walls[i] !== null && Number.isFinite(walls[i])) pairs.push([steps[i], walls[i]]);
    pairs.sort((a, b) => a[0] - b[0]);
    const s = [], w = [];
    for (const [step, wall] of pairs) {
      if (s.length && step === s[s.length - 1]) continue;
      s.push(step);
      w.push(w.length ? Math.max(wall, w[w.length - 1] + 1e-3) : wall);
    }
    if (s.length < 2) return null;
    return { start: w[0], toTime: (step) => interpolate(s, w, step), toStep: (time) => interpolate(w, s, time) };
  }

  // y at x on the polyline (xs ascending), extended beyond its ends by the nearest segment's
  // slope (a zoom may reach past the first or last point); a flat stretch maps to its start.
  function interpolate(xs, ys, x) {
    let lo = 0, hi = xs.length - 1;
    if (x <= xs[0]) hi = 1; else if (x >= xs[hi]) lo = hi - 1;
    else while (hi - lo > 1) { const mid = (lo + hi) >> 1; if (xs[mid] <= x) lo = mid; else hi = mid; }
    const dx = xs[hi] - xs[lo];
    return dx === 0 ? ys[lo] : ys[lo] + (ys[hi] - ys[lo]) * (x - xs[lo]) / dx;
  }

  // A span of seconds as people read it: "45s", "12m 5s", "3h 20m", "2d 4h".
  function duration(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "";
    const sign = seconds < 0 ? "-" : "", t = Math.round(Math.abs(seconds));
    const d = Math.floor(t / 86400), h = Math.floor(t % 86400 / 3600), m = Math.floor(t % 3600 / 60), s = t % 60;
    if (d) return sign + d + "d" + (h ? " " + h + "h" : "");
    if (h) return sign + h + "h" + (m ? " " + m + "m" : "");
    if (m) return sign + m + "m" + (s ? " " + s + "s" : "");
    return sign + s + "s";
  }

  // Natural order: "seed2" before "seed10".
  const natural = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" }).compare;

  window.chartkit = { fmt: fmt, ticks: ticks, lanes: lanes, ema: ema, csv: csv, natural: natural, clock: clock, duration: duration };
})();
