"""`losswatch plot` as a user meets it, checked on structure (the SVG's element ids, which
are the marks' gids), never on pixels."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from app import plot
from app.cli import main
from app.ingest.sources import read_path
from tests.conftest import REPO
from tests.eventfiles import file_version, scalar_event, write_events

SAMPLES = REPO / "sample_runs"


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def svg_of(path: Path, tmp_path: Path, *options: str) -> ET.Element:
    out = tmp_path / "plot.svg"
    result = invoke("plot", str(path), *options, "-o", str(out))
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    return ET.parse(out).getroot()


def ids(element: ET.Element) -> set[str]:
    return {e.get("id") for e in element.iter() if e.get("id")}


def by_id(root: ET.Element, gid: str) -> ET.Element:
    return next(e for e in root.iter() if e.get("id") == gid)


def panel(root: ET.Element, role: str) -> set[str]:
    """The ids drawn inside one panel."""
    return ids(by_id(root, f"panel-{role}"))


@pytest.fixture
def two_runs(tmp_path):
    """run_a logs a train and an eval loss, run_b only a learning rate."""
    rng = np.random.default_rng(0)
    for name, tags in [("run_a", ["train/loss", "eval/loss"]), ("run_b", ["train/lr"])]:
        (tmp_path / name).mkdir()
        events = [scalar_event(i, tag, 1.0 + 0.02 * rng.standard_normal()) for i in range(120) for tag in tags]
        write_events(tmp_path / name / "events.out.tfevents.1", [file_version(), *events])
    return tmp_path


def test_bad_batch_marks_the_spike_and_the_explosion_on_their_panels(tmp_path):
    root = svg_of(SAMPLES / "bad_batch", tmp_path)
    assert {"panel-loss", "panel-grad_norm", "panel-learning_rate"} <= ids(root)
    assert "panel-loss_scale" not in ids(root)  # not logged
    assert {"series-train/loss", "baseline", "noise-band", "spike-fast_recovering-1500",
            "spike-fast_recovering-1500-label"} <= panel(root, "loss")
    assert not any(i.startswith("plateau") for i in ids(root))  # it converged: no alert
    assert {"series-train/grad_norm", "explosion-1500", "explosion-1500-label"} <= panel(root, "grad_norm")
    assert "explosion-1500" not in panel(root, "loss")
    assert not any(i.startswith("nonfinite") for i in ids(root))


def test_a_stalled_learning_rate_shades_the_plateau_from_where_the_lr_fell(tmp_path):
    root = svg_of(SAMPLES / "stalled_lr", tmp_path)
    assert {"plateau-200", "plateau-200-label"} <= panel(root, "loss")


def test_fp16_overflow_marks_nans_where_they_happen_and_the_collapse(tmp_path):
    root = svg_of(SAMPLES / "fp16_overflow", tmp_path)
    assert {"nonfinite-train/loss", "spike-divergent-1897"} <= panel(root, "loss")
    assert "nonfinite-train/grad_norm" in panel(root, "grad_norm")
    assert "collapse-1523" in panel(root, "loss_scale")
    assert "nonfinite-train/loss_scale" not in ids(root)


def test_a_restart_is_one_line_across_every_panel(tmp_path):
    root = svg_of(SAMPLES / "resume", tmp_path)
    assert "restart-1500" in ids(root)
    assert not any("restart-1500" in panel(root, role) for role in ("loss", "grad_norm", "learning_rate"))
    assert "restart-1500-label" in panel(root, "loss")


def test_log_scale_where_the_range_calls_for_it():
    run = read_path(str(SAMPLES / "fp16_overflow")).runs["fp16_overflow"]
    fig = plot.draw_run(str(SAMPLES / "fp16_overflow"), run)
    scales = {ax.get_gid(): ax.get_yscale() for ax in fig.axes}
    assert scales == {"panel-loss": "linear", "panel-grad_norm": "log", "panel-learning_rate": "log",
                      "panel-loss_scale": "log"}
    # the info alerts are the grad norm's 12 overflow skips (its drift to 12x before them is no explosion)
    assert fig.axes[0].get_title() == "fp16_overflow: 16 alerts (4 critical, 12 info)"


def test_png_is_a_png_of_12_inches_by_3_per_panel_at_100_dpi(tmp_path):
    out = tmp_path / "bad_batch.png"
    result = invoke("plot", str(SAMPLES / "bad_batch"), "-o", str(out))
    assert (result.exit_code, result.stdout) == (0, "")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (1200, 900)  # 3 panels: loss, grad norm, lr


def test_a_pending_spike_and_a_lone_nan(tmp_path):
    rng = np.random.default_rng(1)
    loss = 1.0 + 0.02 * rng.standard_normal(300)
    loss[100], loss[-3:] = np.nan, 5.0  # the spike is at the very end: too early to classify
    write_events(tmp_path / "events.out.tfevents.1", [scalar_event(i, "train/loss", float(v)) for i, v in enumerate(loss)])
    root = svg_of(tmp_path, tmp_path)
    assert {"spike-pending-297", "spike-pending-297-label", "nonfinite-train/loss"} <= panel(root, "loss")
    assert ids(root) >= {"panel-loss"} and not any(i.startswith("panel-") and i != "panel-loss" for i in ids(root))


def test_a_long_series_is_drawn_from_at_most_4000_points_and_keeps_its_spike(tmp_path):
    n = 50_000
    loss = 1.0 + 0.02 * np.random.default_rng(2).standard_normal(n)
    loss[31_415] = 30.0
    path = tmp_path / "long.csv"
    np.savetxt(path, np.column_stack([np.arange(n), loss]), fmt=["%d", "%.6g"], delimiter=",", header="step,loss", comments="")
    fig = plot.draw_run(str(path), read_path(str(path)).runs["long"])
    (line,) = [line for line in fig.axes[0].lines if line.get_gid() == "series-loss"]
    assert len(line.get_xdata()) <= plot.MAX_POINTS
    assert 31_415 in line.get_xdata()
    assert "spike-fast_recovering-31415" in {p.get_gid() for p in fig.axes[0].patches}


def test_several_runs_without_run_is_exit_2_listing_them(two_runs, tmp_path):
    result = invoke("plot", str(two_runs), "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {two_runs} holds 2 runs; pick one with --run: run_a, run_b\n"
    assert not (tmp_path / "x.png").exists()


def test_run_picks_the_run_and_an_unknown_run_is_named(two_runs, tmp_path):
    root = svg_of(two_runs, tmp_path, "--run", "run_a")
    assert "series-train/loss" in panel(root, "loss")  # the first loss tag by default
    result = invoke("plot", str(two_runs), "--run", "nope", "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: no run 'nope' in {two_runs}; runs: run_a, run_b\n"


def test_tag_picks_the_loss_and_an_unknown_tag_lists_the_tags(two_runs, tmp_path):
    root = svg_of(two_runs, tmp_path, "--run", "run_a", "--tag", "eval/loss")
    assert "series-eval/loss" in panel(root, "loss") and "series-train/loss" not in ids(root)
    result = invoke("plot", str(two_runs), "--run", "run_a", "--tag", "nope", "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert result.stderr == "losswatch: run 'run_a' has no tag 'nope'; tags: eval/loss, train/loss\n"


def test_a_run_without_a_loss_tag_asks_for_one(two_runs, tmp_path):
    result = invoke("plot", str(two_runs), "--run", "run_b", "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2
    assert result.stderr == "losswatch: run 'run_b' has no loss tag; pick one with --tag: train/lr\n"
    root = svg_of(two_runs, tmp_path, "--run", "run_b", "--tag", "train/lr")
    assert "series-train/lr" in panel(root, "loss")


@pytest.mark.parametrize("name", ["plot.pdf", "plot", "plot.png.txt"])
def test_the_suffix_sets_the_format_and_any_other_is_refused_before_reading(tmp_path, name):
    out = tmp_path / name
    result = invoke("plot", str(tmp_path / "missing"), "-o", str(out))
    assert result.exit_code == 2
    assert result.stderr == f"losswatch: {out}: the file name must end in .png or .svg\n"
    assert not out.exists()


def test_input_and_output_errors_are_exit_2(tmp_path):
    missing = invoke("plot", str(tmp_path / "missing"), "-o", str(tmp_path / "x.png"))
    assert missing.exit_code == 2 and missing.stderr.startswith("losswatch: ")
    out = tmp_path / "no" / "such" / "dir" / "x.png"
    unwritable = invoke("plot", str(SAMPLES / "bad_batch"), "-o", str(out))
    assert unwritable.exit_code == 2
    assert unwritable.stderr == f"losswatch: {out}: cannot write: No such file or directory\n"


def test_the_eval_loss_is_drawn_on_the_loss_panel(two_runs, tmp_path):
    root = svg_of(two_runs, tmp_path, "--run", "run_a")
    assert {"series-train/loss", "eval-eval/loss"} <= panel(root, "loss")


def test_a_warmup_far_above_the_rest_is_clipped_off_the_y_range_and_said_so(tmp_path):
    rng = np.random.default_rng(1)
    values = [20.0 - i for i in range(17)] + list(3.2 + 0.05 * rng.standard_normal(383))  # from 20 down to a 3.x curve
    (tmp_path / "run").mkdir()
    write_events(tmp_path / "run" / "events.out.tfevents.1",
                 [file_version(), *[scalar_event(i, "train/loss", v) for i, v in enumerate(values)]])
    fig = plot.draw_run(str(tmp_path / "run"), read_path(str(tmp_path / "run")).runs["run"])
    loss = fig.axes[0]
    assert loss.get_yscale() == "linear" and loss.get_ylim()[1] < 4
    [note] = [t for t in loss.texts if t.get_gid() == "clipped-train/loss"]
    assert note.get_text() == "warm-up clipped: up to 20 before step 17"
    steady = read_path(str(SAMPLES / "bad_batch")).runs["bad_batch"]  # a spike after warm-up is never clipped
    assert not any(t.get_gid() == "clipped-train/loss" for t in plot.draw_run(str(SAMPLES / "bad_batch"), steady).axes[0].texts)


def test_the_worst_alert_is_the_subtitle_in_its_severity_colour(tmp_path):
    run = read_path(str(SAMPLES / "fp16_overflow")).runs["fp16_overflow"]
    fig = plot.draw_run(str(SAMPLES / "fp16_overflow"), run)
    [subtitle] = [t for t in fig.axes[0].texts if t.get_gid() == "worst-alert"]
    assert subtitle.get_text().startswith("train/loss has been rising since step 1512")
    assert subtitle.get_color() == "#c62828"  # critical, as the web UI's badge
    lr_burst = plot.draw_run(str(SAMPLES / "lr_burst"), read_path(str(SAMPLES / "lr_burst")).runs["lr_burst"])
    assert lr_burst.axes[0].get_title() == "lr_burst: 1 alert (1 warning)"


def label_boxes(fig) -> list[tuple[object, object, str]]:
    """Each alert label's box on the drawn figure, with its panel's box and its id."""
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    return [(t.get_window_extent(renderer), ax.get_window_extent(renderer), t.get_gid())
            for ax in fig.axes for t in ax.texts if (t.get_gid() or "").endswith("-label") and t.get_visible()]


def crowded_panel() -> plot._Panel:
    """A panel with more labels than fit: marks 6 to 20 steps apart of a 2000-step axis, long
    and short names, one at each edge, and a note at the top left as the warm-up clip writes."""
    fig = Figure(figsize=(plot.WIDTH_INCHES, plot.PANEL_INCHES), dpi=plot.DPI, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.set_xlim(-20, 2020)
    ax.text(0.005, 0.985, "warm-up clipped: up to 20 before step 17", transform=ax.transAxes, fontsize=8, va="top", gid="note")
    names = ["spike-divergent", "grad-norm explosion 12.5x", "restart", "nonfinite", "plateau"]
    labels = [(float(x), f"{names[k % len(names)]} {x}", "black", f"mark-{x}-label")
              for k, x in enumerate([0, 6, 12, 30, 500, 503, 506, 510, 515, 520, 525, 530, 540, 1000, 1010, 1020, 1960, 1970, 1980, 1985, 1990, 1995, 1999, 2000])]
    return plot._Panel(ax, None, labels)


def test_crowded_labels_take_rows_and_those_that_fit_nowhere_are_left_out():
    panel = crowded_panel()
    panel.ax.figure.draw_without_rendering()
    plot._place_labels(panel, panel.ax.figure.canvas.get_renderer())
    placed = label_boxes(panel.ax.figure)
    assert 8 <= len(placed) < len(panel.labels)
    note = next(t for t in panel.ax.texts if t.get_gid() == "note").get_window_extent()
    for i, (box, panel_box, gid) in enumerate(placed):
        assert panel_box.x0 - 0.5 <= box.x0 and box.x1 <= panel_box.x1 + 0.5 and panel_box.y0 <= box.y0 and box.y1 <= panel_box.y1, gid
        assert not box.overlaps(note), gid
        for other, _, other_gid in placed[i + 1:]:
            assert not box.overlaps(other), (gid, other_gid)


@pytest.mark.parametrize("name", ["fp16_overflow", "lr_burst", "resume", "bad_batch"])
def test_alert_labels_do_not_collide_and_stay_inside_their_panel(name, tmp_path):
    run = read_path(str(SAMPLES / name)).runs[name]
    placed = label_boxes(plot.draw_run(str(SAMPLES / name), run))
    assert placed
    for i, (box, panel_box, gid) in enumerate(placed):
        assert panel_box.x0 - 0.5 <= box.x0 and box.x1 <= panel_box.x1 + 0.5 and panel_box.y0 <= box.y0 and box.y1 <= panel_box.y1, gid
        for other, _, other_gid in placed[i + 1:]:
            assert not box.overlaps(other), (gid, other_gid)


def test_a_loss_logged_as_running_means_is_drawn_worked_back_over_the_means_as_logged(tmp_path):
    path = REPO / "bench" / "trained" / "runs" / "charlm_epoch_mean_lr_jump"
    assert {"series-train/loss", "logged-train/loss"} <= panel(svg_of(path, tmp_path), "loss")
    fig = plot.draw_run(str(path), read_path(str(path)).runs[path.name])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"train/loss, per batch (from 250-step epoch means)", "train/loss as logged (epoch means)"} <= set(legend)


def test_a_young_eval_loss_is_drawn_with_its_spike_and_no_baseline(tmp_path):
    """20 evaluations: the spike detector measures nothing against a trailing median yet (it
    would lag over the curve), so none is drawn; the early rule's spike is."""
    (tmp_path / "run").mkdir()
    value = 1.3 + 1.3 * np.exp(-np.arange(20) / 4.5)
    value[13:16] *= [1.14, 1.08, 1.02]
    events = [scalar_event(100 * (i + 1), "eval/loss", float(v)) for i, v in enumerate(value)]
    write_events(tmp_path / "run" / "events.out.tfevents.1", [file_version(), *events])
    root = svg_of(tmp_path / "run", tmp_path)
    drawn = panel(root, "loss")
    assert {"series-eval/loss", "spike-fast_recovering-1400"} <= drawn
    assert not {"baseline", "noise-band"} & drawn
