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

  // A chart's shown data as CSV: a step column and one column per line.
  function csv(names, data) {
    const quote = (s) => /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    const rows = [["step", ...names].map(quote).join(",")];
    for (let i = 0; i < data[0].length; i++) {
      rows.push(data.map((col) => (col[i] === null || col[i] === undefined ? "" : String(col[i]))).join(","));
    }
    return rows.join("\n") + "\n";
  }

  // Natural order: "seed2" before "seed10".
  const natural = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" }).compare;

  window.chartkit = { fmt: fmt, ticks: ticks, lanes: lanes, ema: ema, csv: csv, natural: natural };
})();
