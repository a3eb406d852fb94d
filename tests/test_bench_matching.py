"""The event matching bench/accuracy.py scores real curves with (bench/realcurves.py): each
required event takes the nearest flag of its kind within its tolerance; leftovers are
duplicates, optional hits or false alarms."""

from __future__ import annotations

from pathlib import Path

from bench.corpus import Event, LabelledRun
from bench.realcurves import Flag, match, score
from bench.wild import score as wild_score


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


def test_the_wild_sweep_counts_events_found_of_their_own_kind_and_loud_alerts_no_event_explains() -> None:
    runs = [
        {"run": "a", "events": [{"tag": "eval_loss", "kind": "overfitting", "step": 800, "tolerance": 200, "accept_kinds": ["divergence"],
                                "why": "rises"}]},
        {"run": "b", "events": [{"tag": "loss", "kind": "plateau", "step": 0, "tolerance": 100, "optional": True, "why": "flat"}]},
        {"run": "c", "events": []},
    ]
    alert = {"run": "a", "tag": "eval_loss", "kind": "divergence", "start_step": 900, "severity": "critical"}
    found = [
        alert,  # an accepted kind: found, not of its own kind
        {"run": "b", "tag": "loss", "kind": "plateau", "start_step": 50, "severity": "warning"},  # optional: neither
        {"run": "c", "tag": "grad_norm", "kind": "grad_norm_explosion", "start_step": 5, "severity": "info"},  # info: not loud
        {"run": "c", "tag": "loss", "kind": "loss_spike", "start_step": 9, "severity": "warning"},  # false
    ]
    s = wild_score(runs, found)
    assert (s["events"], s["found"], s["own kind"], s["missed"]) == (1, 1, 0, [])
    assert [(a["run"], a["kind"]) for a in s["false"]] == [("c", "loss_spike")]
    missed = wild_score(runs, found[1:])["missed"]
    assert [(e.run, e.kind, e.step) for e in missed] == [("a", "overfitting", 800)]
