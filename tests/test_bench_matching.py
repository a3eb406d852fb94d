"""The event matching bench/accuracy.py scores real curves with (bench/realcurves.py): each
required event takes the nearest flag of its kind within its tolerance; leftovers are
duplicates, optional hits or false alarms."""

from __future__ import annotations

from pathlib import Path

from bench.corpus import Event, LabelledRun
from bench.realcurves import Flag, match, score


def _run(*events: Event) -> LabelledRun:
    return LabelledRun("r", "p", "f", "tuning", "", events, (), Path("p"))


SPIKE = Event("r", "train/loss", "loss_spike", 100, 5, "a spike", "fast_recovering")
DIVERGENT = Event("r", "train/loss", "loss_spike", 500, 50, "not back", "divergent", accept_kinds=("divergence",))
BLIP = Event("r", "train/loss", "loss_spike", 300, 2, "a blip", optional=True)


def test_the_nearest_flag_within_tolerance_is_the_detection_and_the_rest_are_sorted_out() -> None:
    run = _run(SPIKE, DIVERGENT, BLIP)
    flags = [
        Flag("loss_spike", "train/loss", 108, "info", "fast_recovering"),  # outside the tolerance
        Flag("loss_spike", "train/loss", 103, "info", "fast_recovering"),
        Flag("loss_spike", "train/loss", 99, "info", "slow_recovering"),  # nearer: taken
        Flag("loss_spike", "train/loss", 301, "info", "fast_recovering"),  # the optional blip
        Flag("loss_spike", "val/loss", 100, "warning", "fast_recovering"),  # another tag
        Flag("divergence", "train/loss", 470, "critical"),  # an accepted kind
    ]
    outcome = match(run, flags)
    assert outcome.found == {SPIKE: flags[2], DIVERGENT: flags[5]}
    assert outcome.duplicates == [flags[1]]
    assert outcome.optional == [flags[3]]
    assert outcome.false == [flags[0], flags[4]]
    scores = score((run,), {run: outcome})
    spikes = scores["loss_spike"]
    assert (spikes.labelled, spikes.found, spikes.flags, spikes.false) == (2, 2, 3, 2)
    assert (spikes.classified, spikes.classified_right) == (1, 0)  # found as slow; the divergence has no class
    assert (scores["divergence"].flags, scores["divergence"].false) == (1, 0)


def test_an_event_nobody_flagged_is_a_miss() -> None:
    run = _run(SPIKE)
    outcome = match(run, [Flag("loss_spike", "train/loss", 200, "info", "fast_recovering")])
    assert outcome.missed == [SPIKE] and not outcome.found
    assert score((run,), {run: outcome})["loss_spike"].recall() == "0.00"
