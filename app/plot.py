"""One run drawn as a person reads it when an alert fires: the loss against the baseline and
noise band the detectors measured it by, the grad norm, learning rate and loss scale on
aligned panels below, and every alert where it happened.

Every mark carries a matplotlib gid, which SVG output keeps as the element's id, so what is
drawn can be checked (and styled, or linked to from an alert) without looking at pixels:

* `panel-loss` (the drawn loss tag), `panel-grad_norm`, `panel-learning_rate`,
  `panel-loss_scale`: the panels (axes);
* `series-<tag>`: a tag's curve; `baseline`, `noise-band`: the loss's baseline and band;
  `logged-<tag>`: a train loss worked back from running means, as logged;
* `nonfinite-<tag>`: the ticks at the top of a tag's panel where it is NaN or +-Inf;
* `spike-<class>-<start_step>`, `explosion-<start_step>`, `divergence-<start_step>`,
  `plateau-<start_step>`, `overfitting-<start_step>`, `collapse-<start_step>`,
  `stuck-<start_step>`: an alert's shading on the panel of its tag, and `<that id>-label`
  its label;
* `restart-<step>`: the dashed line of a resume, across every panel.

Figures are built with `matplotlib.figure.Figure` on an Agg canvas, never pyplot, so
drawing changes no global state and is safe in a server process."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import ConnectionPatch

from analyzers.baseline import BaselineConfig, trailing_baseline
from analyzers.config import AnalysisConfig
from analyzers.findings import Finding, Kind, Severity, SpikeClass
from analyzers.roles import Role
from analyzers.series import Resume, RunSeries, Series, prepare_run, prepare_series, resume_steps
from app import analysis
from app.axis import wants_log
from app.downsample import minmax_indices
from app.ingest.logdir import Run

IMAGE_FORMATS = {".png": "png", ".svg": "svg"}
MAX_POINTS = 4000  # about 3 points per pixel of a 12-inch-wide panel at 100 dpi
WIDTH_INCHES, PANEL_INCHES, DPI = 12, 3, 100
LOWER_PANELS = (Role.GRAD_NORM, Role.LEARNING_RATE, Role.LOSS_SCALE)
BAND_SIGMAS = 3.0
MIN_SPAN = 0.005  # share of the axis a shading covers at least, so a 2-step spike still shows
LABEL_ROWS = 6  # rows of labels at the top of a panel; a burst of more keeps shading and ids only
LABEL_GAP_PX = 2  # room kept around each label (its white box reaches a pixel past its text)
WARMUP_SHARE = 0.05  # the first 5% of a loss's points are its warm-up ...
WARMUP_CLIP = 1.5  # ... clipped off the y-range when they reach 1.5x over the rest's highest value
EVAL_COLOUR = "#e08a00"
LOGGED_COLOUR = "#6a6a6a"
LEGEND_COLUMNS = 5  # more, and a 12-inch figure cuts the legend's ends off
SEVERITY_COLOURS = {Severity.CRITICAL: "#c62828", Severity.WARNING: "#e08a00", Severity.INFO: "#5b7fb8"}  # the web UI's badges
SUBTITLE_CHARS = 160

LINE = "#1f4e9c"
NONFINITE = "#d00000"
RESTART_LINE = {"color": "black", "ls": "--", "lw": 1.2}
SPIKE_COLOURS = {
    SpikeClass.FAST_RECOVERING: "#2ca02c",
    SpikeClass.SLOW_RECOVERING: "#ff7f0e",
    SpikeClass.DIVERGENT: "#d62728",
    SpikeClass.PENDING: "#7f7f7f",
}
SPIKE_NAMES = {
    SpikeClass.FAST_RECOVERING: "fast",
    SpikeClass.SLOW_RECOVERING: "slow",
    SpikeClass.DIVERGENT: "divergent",
    SpikeClass.PENDING: "pending",
}


@dataclass(frozen=True)
class _Style:
    """How an alert kind other than a loss spike is shaded: its id prefix, legend entry,
    colour and opacity (stronger for a moment, lighter for a stretch of the run)."""

    gid: str
    legend: str
    colour: str
    alpha: float


_STYLES = {
    Kind.GRAD_NORM_EXPLOSION: _Style("explosion", "grad-norm explosion", "#d62728", 0.3),
    Kind.DIVERGENCE: _Style("divergence", "divergence", "#d62728", 0.08),
    Kind.PLATEAU: _Style("plateau", "plateau", "#6a3d9a", 0.07),
    Kind.OVERFITTING: _Style("overfitting", "overfitting", "#ff7f0e", 0.08),
    Kind.LOSS_SCALE_COLLAPSE: _Style("collapse", "loss-scale collapse", "#8c564b", 0.1),
    Kind.GRAD_NORM_STUCK: _Style("stuck", "grad norm stuck", "#7f7f7f", 0.12),
}


class PlotError(ValueError):
    """A plot that cannot be made as asked; the message is for the user."""


@dataclass
class _Panel:
    """One axes and what it shows, with the labels waiting to be placed once all are known."""

    ax: Axes
    series: Series
    labels: list[tuple[float, str, str, str]]  # x, text, colour, gid


def image_format(output: str) -> str:
    """The image format the output file's suffix asks for (checked before any reading)."""
    fmt = IMAGE_FORMATS.get(Path(output).suffix.lower())
    if fmt is None:
        raise PlotError(f"{output}: the file name must end in .png or .svg")
    return fmt


def pick_run(path: str, runs: Mapping[str, Run], name: str | None) -> Run:
    """The run to draw: `name`, or the only run under `path`."""
    names = ", ".join(sorted(runs))
    if name is not None:
        if name not in runs:
            raise PlotError(f"no run {name!r} in {path}; runs: {names}")
        return runs[name]
    if not runs:
        raise PlotError(f"no runs in {path}")
    if len(runs) > 1:
        raise PlotError(f"{path} holds {len(runs)} runs; pick one with --run: {names}")
    return next(iter(runs.values()))


def draw_run(source: str, run: Run, tag: str | None = None, config: AnalysisConfig = AnalysisConfig()) -> Figure:
    """The figure of one run: `tag` (default: its first loss tag) on top, the grad norm,
    learning rate and loss scale below where logged, every alert marked."""
    resumes = tuple(Resume(r.from_step, r.to_step, r.segment, r.wall_time, r.tags) for r in run.rollbacks)
    writes = analysis.tag_writes(run)
    prepared = prepare_run(writes, resumes, config.roles, running_mean=config.running_mean)
    loss = _loss_series(run.name, prepared, tag)
    findings = [alert.finding for alert in analysis.analyze(source, run, config)]
    shown = [loss] + [s for role in LOWER_PANELS for s in prepared.with_role(role)[:1] if s is not loss]
    fig = Figure(figsize=(WIDTH_INCHES, PANEL_INCHES * len(shown)), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    panels = [_Panel(ax, series, []) for ax, series in zip(axes, shown)]
    for panel in panels:
        _draw_series(panel, "loss" if panel.series is loss else panel.series.role.value)
    _draw_baseline(axes[0], loss, config.spikes.baseline)
    if loss.averaged:  # the loss as logged: its current view, not worked back
        _draw_logged(axes[0], prepare_series(loss.tag, loss.role, writes[loss.tag], resume_steps(resumes, loss.tag)))
    if loss.role is not Role.EVAL_LOSS:
        for evaluation in prepared.with_role(Role.EVAL_LOSS):
            _draw_eval(axes[0], evaluation)
    _clip_warmup(axes[0], loss)
    first, last = min(int(s.step[0]) for s in shown), max(int(s.step[-1]) for s in shown)
    axes[0].set_xlim(first - 0.01 * (last - first), last + 0.01 * (last - first) + 1)
    extra = _mark_findings(fig, panels, findings, last)
    axes[-1].set_xlabel("step")
    axes[0].set_title(_title(source, run.name, findings), fontsize=13, pad=24 if findings else 10)
    _subtitle(axes[0], findings)
    _legend(fig, axes, extra)
    # The labels are measured on the panels as they will be drawn: the layout settles first
    # and is then kept (labels inside the panels would not move it).
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    for panel in panels:
        _place_labels(panel, renderer)
    fig.set_layout_engine("none")
    return fig


def write_image(fig: Figure, output: str, fmt: str) -> None:
    """Write the figure to `output` as `fmt` (see `image_format`)."""
    try:
        fig.savefig(output, format=fmt, dpi=DPI)
    except OSError as e:
        raise PlotError(f"{output}: cannot write: {e.strerror or e}") from e


def _loss_series(run: str, prepared: RunSeries, tag: str | None) -> Series:
    """The series of the top panel: `tag` when given (any tag may be drawn there), else the
    run's first loss tag."""
    tags = ", ".join(sorted(prepared.series))
    if tag is not None:
        if tag not in prepared.series:
            raise PlotError(f"run {run!r} has no tag {tag!r}; tags: {tags}")
        return prepared.series[tag]
    losses = prepared.with_role(Role.LOSS) + prepared.with_role(Role.EVAL_LOSS)
    if not losses:
        raise PlotError(f"run {run!r} has no loss tag; pick one with --tag: {tags}")
    return losses[0]


def _draw_series(panel: _Panel, role: str) -> None:
    """The tag's curve, downsampled so that spikes and NaNs survive; a gap where it is not
    finite, with a tick at the top of the panel at each such step (they have no y value)."""
    ax, series = panel.ax, panel.series
    ax.set_gid(f"panel-{role}")
    keep = minmax_indices(series.step, series.value, MAX_POINTS)
    step, value = series.step[keep], series.value[keep]
    finite = np.isfinite(value)
    label = series.tag if role == "loss" else "_nolegend_"  # the other panels' ylabels say it
    if role == "loss" and series.averaged:
        label += f", per batch (from {series.averaged}-step epoch means)"
    ax.plot(step, np.where(finite, value, np.nan), color=LINE, lw=0.8, label=label, gid=f"series-{series.tag}")
    if not finite.all():
        ax.plot(
            step[~finite], np.full(np.count_nonzero(~finite), 0.985), transform=ax.get_xaxis_transform(),
            ls="", marker="|", ms=12, mew=1.5, color=NONFINITE, clip_on=False, zorder=4,
            label="NaN / Inf", gid=f"nonfinite-{series.tag}",
        )
    ax.set_ylabel(series.tag)
    if wants_log(series.fvalue):
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3, lw=0.5)


def _draw_logged(ax: Axes, series: Series) -> None:
    """A loss logged as its epoch's running mean, as logged, under the batches' losses worked
    back from it (what the detectors measured): the staircase the run's own plots show."""
    keep = minmax_indices(series.step, series.value, MAX_POINTS)
    ax.plot(series.step[keep], series.value[keep], color=LOGGED_COLOUR, lw=1.2, zorder=3,
            label=f"{series.tag} as logged (epoch means)", gid=f"logged-{series.tag}")


def _draw_eval(ax: Axes, series: Series) -> None:
    """An eval loss on the loss panel, on the same steps: markers at its (sparse) evaluations."""
    ax.plot(series.fstep, series.fvalue, color=EVAL_COLOUR, lw=1.0, marker="o", ms=4, label=series.tag,
            gid=f"eval-{series.tag}", zorder=4)


def _clip_warmup(ax: Axes, series: Series) -> None:
    """On a linear axis, a warm-up far above the rest (an initial loss of 20 over a 3.x curve)
    is cut off the y-range, with a note saying so, rather than flattening the curve."""
    values = series.fvalue
    head = max(1, int(len(values) * WARMUP_SHARE))
    if ax.get_yscale() != "linear" or len(values) < 20:
        return
    rest = values[head:]
    top, low = float(rest.max()), float(rest.min())
    if float(values[:head].max()) <= top + (WARMUP_CLIP - 1) * max(abs(top), top - low):
        return
    margin = 0.05 * (top - low or abs(top) or 1.0)
    ax.set_ylim(min(low, float(values[:head].min())) - margin, top + margin)
    clipped = series.fstep[:head][values[:head] > top + margin]
    ax.text(0.005, 0.985, f"warm-up clipped: up to {float(values[:head].max()):.4g} before step {int(clipped[-1]) + 1}",
            transform=ax.transAxes, ha="left", va="top", fontsize=8, color="#555555", gid=f"clipped-{series.tag}",
            bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "alpha": 0.7, "lw": 0}, zorder=6)


def _draw_baseline(ax: Axes, series: Series, config: BaselineConfig) -> None:
    """The baseline and noise band the spike detector measured each point against, where
    it knows both: before a tag's ~40th point it measures nothing against them (a young
    eval loss is judged against the evaluation before, and its trailing median, lagging
    above a steep fall, would be drawn over the curve).  A trailing median has no spikes to
    lose, so an even stride of it is enough."""
    if len(series.fvalue) == 0:
        return
    base = trailing_baseline(series.fvalue, config)
    keep = np.unique(np.linspace(0, len(series.fvalue) - 1, MAX_POINTS).astype(np.int64))
    keep = keep[np.isfinite(base.sigma[keep])]
    if not len(keep):
        return
    step, level, sigma = series.fstep[keep], base.level[keep], base.sigma[keep]
    ax.fill_between(
        step, level - BAND_SIGMAS * sigma, level + BAND_SIGMAS * sigma, color="#888888", alpha=0.3, lw=0,
        label=f"noise band (baseline ± {BAND_SIGMAS:g}σ)", gid="noise-band", zorder=1,
    )
    ax.plot(step, level, color="#333333", lw=1.0, ls="--", label="baseline", gid="baseline", zorder=3)


def _mark_findings(fig: Figure, panels: list[_Panel], findings: list[Finding], last: int) -> dict[str, Artist]:
    """Mark each alert on the panel of its tag (restarts across all); alerts on tags not
    drawn are only counted in the title.  Returns the legend entries drawn outside any axes."""
    by_tag = {panel.series.tag: panel for panel in panels}
    extra: dict[str, Artist] = {}
    for f in findings:
        if f.kind is Kind.RESTART:
            _mark_restart(fig, panels, f.start_step)
            extra["restart"] = Line2D([], [], **RESTART_LINE)  # a patch would show as a box
        elif f.tag in by_tag and f.kind is Kind.LOSS_SPIKE:
            _mark_spike(by_tag[f.tag], f, last)
        elif f.tag in by_tag and f.kind in _STYLES:
            _mark_stretch(by_tag[f.tag], f, last)
    return extra


def _shade(panel: _Panel, start: int, end: int, colour: str, alpha: float, label: str, gid: str) -> None:
    ax = panel.ax
    xmin, xmax = ax.get_xlim()
    end = max(end, start + MIN_SPAN * (xmax - xmin))
    ax.axvspan(start, end, color=colour, alpha=alpha, lw=0, zorder=0, label=label, gid=gid)


def _mark_spike(panel: _Panel, f: Finding, last: int) -> None:
    """Shaded from onset to recovery (to the end while not recovered), coloured by class."""
    cls = f.classification
    gid = f"spike-{cls.value}-{f.start_step}"
    colour = SPIKE_COLOURS[cls]
    _shade(panel, f.start_step, last if f.end_step is None else f.end_step, colour, 0.35, f"spike: {cls.value}", gid)
    panel.labels.append((f.start_step, f"{SPIKE_NAMES[cls]} {f.start_step}", colour, gid + "-label"))


def _mark_stretch(panel: _Panel, f: Finding, last: int) -> None:
    """Every other alert: shaded from its start to its end (or the end of the run)."""
    style = _STYLES[f.kind]
    gid = f"{style.gid}-{f.start_step}"
    end = last if f.end_step is None else f.end_step
    _shade(panel, f.start_step, end, style.colour, style.alpha, style.legend, gid)
    size = f" {f.ratio:.3g}x" if f.kind is Kind.GRAD_NORM_EXPLOSION else ""
    text = f"{style.legend}{size} {f.start_step}"
    panel.labels.append((f.start_step, text, style.colour, gid + "-label"))


def _mark_restart(fig: Figure, panels: list[_Panel], step: int) -> None:
    """One dashed line from the top of the first panel to the bottom of the last."""
    top, bottom = panels[0].ax, panels[-1].ax
    fig.add_artist(ConnectionPatch(
        xyA=(step, 1), coordsA=top.get_xaxis_transform(), xyB=(step, 0), coordsB=bottom.get_xaxis_transform(),
        zorder=5, gid=f"restart-{step}", **RESTART_LINE,
    ))
    panels[0].labels.append((step, f"restart {step}", "black", f"restart-{step}-label"))


def _place_labels(panel: _Panel, renderer: RendererBase) -> None:
    """Write the panel's labels at the top, each in the first row where its box, as the
    renderer measures it, meets no other text of the panel (earlier labels, the warm-up note),
    so that marks a few steps apart stay readable; a label that would run off the right edge
    ends at its mark instead of starting there.  A label finding no free row, inside the
    panel, is left out rather than written over another: its shading still shows."""
    ax = panel.ax
    area = ax.get_window_extent(renderer)
    taken = [t.get_window_extent(renderer).padded(LABEL_GAP_PX) for t in ax.texts if t.get_visible()]
    for x, text, colour, gid in sorted(panel.labels):
        label = ax.text(
            x, 0.93, f" {text}", transform=ax.get_xaxis_transform(), fontsize=8, color=colour, fontweight="bold",
            va="top", ha="left", zorder=6, gid=gid, bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "alpha": 0.7, "lw": 0},
        )
        if label.get_window_extent(renderer).x1 > area.x1:
            label.set_text(f"{text} ")
            label.set_horizontalalignment("right")
        for row in range(LABEL_ROWS):
            label.set_y(0.93 - 0.085 * row)
            box = label.get_window_extent(renderer).padded(LABEL_GAP_PX)
            if area.x0 <= box.x0 + LABEL_GAP_PX and box.x1 - LABEL_GAP_PX <= area.x1 and not any(box.overlaps(t) for t in taken):
                taken.append(box)
                break
        else:
            label.remove()


def _title(source: str, run: str, findings: list[Finding]) -> str:
    """The run (its directory's name when it is the logdir itself) and its alerts by severity."""
    name = Path(source).resolve().name if run == "." else run
    counts = Counter(f.severity for f in findings)
    parts = [f"{counts[s]} {s}" for s in sorted(counts, reverse=True)]
    n = len(findings)
    return f"{name}: {n} alert{'' if n == 1 else 's'} ({', '.join(parts)})" if findings else f"{name}: no alerts"


def _subtitle(ax: Axes, findings: list[Finding]) -> None:
    """The worst alert's message (most severe, then earliest) under the title, in its
    severity's colour."""
    if not findings:
        return
    worst = max(findings, key=lambda f: (f.severity, -f.start_step))
    text = worst.message if len(worst.message) <= SUBTITLE_CHARS else worst.message[:SUBTITLE_CHARS - 3] + "..."
    ax.annotate(text, xy=(0.5, 1), xycoords="axes fraction", xytext=(0, 5), textcoords="offset points", ha="center",
                va="bottom", fontsize=9, color=SEVERITY_COLOURS[worst.severity], gid="worst-alert")


def _legend(fig: Figure, axes: list[Axes], extra: dict[str, Artist]) -> None:
    """One legend above the panels, one entry per kind of mark, where it covers no data."""
    entries: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    entries.update(extra)
    fig.legend(entries.values(), entries.keys(), loc="outside upper center", ncols=min(len(entries), LEGEND_COLUMNS), fontsize=9)
