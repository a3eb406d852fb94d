"""The alert lifecycle as a pure function: the same stored rows and findings always give
the same states and the same changes."""

from __future__ import annotations

from dataclasses import replace

from analyzers.findings import Finding, Kind, Severity, SpikeClass
from app.alerts.lifecycle import Change, State, evaluate
from app.analysis import Alert, fingerprint

SPIKE_SEVERITY = {
    SpikeClass.PENDING: Severity.WARNING, SpikeClass.FAST_RECOVERING: Severity.INFO,
    SpikeClass.SLOW_RECOVERING: Severity.WARNING, SpikeClass.DIVERGENT: Severity.CRITICAL,
}


def spike(cls: SpikeClass, start: int = 100, tag: str = "loss", end: int | None = None) -> Alert:
    recovered = cls in (SpikeClass.FAST_RECOVERING, SpikeClass.SLOW_RECOVERING)
    finding = Finding(
        kind=Kind.LOSS_SPIKE, tag=tag, severity=SPIKE_SEVERITY[cls], start_step=start, message=f"spike {cls}",
        remediation="r", classification=cls, end_step=end if recovered else None, ongoing=not recovered,
    )
    return Alert(fingerprint("s", "run", tag, "loss_spike", start), "s", "run", finding)


def nan(start: int, tag: str = "loss", ongoing: bool = True) -> Alert:
    finding = Finding(kind=Kind.NONFINITE, tag=tag, severity=Severity.CRITICAL, start_step=start,
                      message="nan", remediation="r", ongoing=ongoing)
    return Alert(fingerprint("s", "run", tag, "nonfinite", start), "s", "run", finding)


def run_through(*states: list[Alert], steps=None):
    """Evaluate successive analyses, carrying the records; the changes of each."""
    stored, out = {}, []
    for i, current in enumerate(states):
        records, events = evaluate(stored, current, (steps or [1000] * len(states))[i], float(i))
        stored = {r.id: r for r in records}
        out.append([(e.change, e.record.classification) for e in events])
    return stored, out


def test_a_pending_spike_fires_at_once_then_moves_along_by_updates_and_resolves_once():
    stored, changes = run_through(
        [spike(SpikeClass.PENDING)], [spike(SpikeClass.PENDING)], [spike(SpikeClass.DIVERGENT)],
        [spike(SpikeClass.SLOW_RECOVERING, end=400)], [spike(SpikeClass.SLOW_RECOVERING, end=400)],
    )
    assert changes == [
        [(Change.FIRING, "pending")], [], [(Change.UPDATED, "divergent")], [(Change.RESOLVED, "slow_recovering")], [],
    ]
    [record] = stored.values()
    assert record.state is State.RESOLVED and record.since_step == 400


def test_a_pending_spike_fires_as_a_warning_and_a_far_one_as_critical():
    records, events = evaluate({}, [spike(SpikeClass.PENDING)], 1000, 0.0)
    assert [(e.change, e.record.severity, e.step) for e in events] == [(Change.FIRING, "warning", 1000)]
    assert records[0].state is State.FIRING
    far = spike(SpikeClass.PENDING)
    far = Alert(far.id, far.source, far.run, replace(far.finding, severity=Severity.CRITICAL))
    _, changes = run_through([spike(SpikeClass.PENDING)], [far])
    assert changes == [[(Change.FIRING, "pending")], [(Change.UPDATED, "pending")]]


def test_an_alert_stored_pending_by_an_earlier_version_fires():
    records, _ = evaluate({}, [spike(SpikeClass.PENDING)], 1000, 0.0)
    old = replace(records[0], state=State.PENDING)
    _, events = evaluate({old.id: old}, [spike(SpikeClass.PENDING)], 1010, 1.0)
    assert [(e.change, e.record.state) for e in events] == [(Change.FIRING, State.FIRING)]


def test_a_class_change_updates_the_same_alert():
    stored, changes = run_through(
        [spike(SpikeClass.DIVERGENT)], [spike(SpikeClass.DIVERGENT)], [spike(SpikeClass.SLOW_RECOVERING, end=900)],
    )
    assert changes == [[(Change.FIRING, "divergent")], [], [(Change.RESOLVED, "slow_recovering")]]
    assert len(stored) == 1


def test_a_critical_finding_fires_at_once_and_updates_when_its_class_changes():
    pending_critical = spike(SpikeClass.DIVERGENT)
    _, changes = run_through([nan(50)], [nan(50)])
    assert changes == [[(Change.FIRING, None)], []]
    _, changes = run_through([spike(SpikeClass.SLOW_RECOVERING, end=2000)], [pending_critical])
    assert changes[1] == [(Change.FIRING, "divergent")]


def test_a_vanished_alert_resolves_once_with_a_reason():
    stored, changes = run_through([nan(50)], [], [])
    assert changes[0] == [(Change.FIRING, None)]
    assert changes[1] == [(Change.RESOLVED, None)]
    assert changes[2] == []
    records, events = evaluate({}, [nan(50)], 10, 0.0)
    _, later = evaluate({r.id: r for r in records}, [], 10, 1.0)
    assert later[0].reason == "no longer seen: those steps were rewritten"


def test_nan_inhibits_the_lesser_spikes_after_it_on_that_tag_only():
    current = [nan(500), spike(SpikeClass.PENDING, start=600), spike(SpikeClass.PENDING, start=400),
               spike(SpikeClass.PENDING, start=600, tag="other")]
    records, events = evaluate({}, current, 1000, 0.0)
    inhibited = {r.start_step: r.inhibited_by for r in records if r.kind == "loss_spike" and r.tag == "loss"}
    assert inhibited == {600: current[0].id, 400: None}
    assert sorted((e.record.tag, e.record.start_step) for e in events) == [("loss", 400), ("loss", 500), ("other", 600)]


def test_an_alert_that_is_over_when_first_seen_fires_and_resolves_together():
    records, events = evaluate({}, [spike(SpikeClass.FAST_RECOVERING, end=130)], 1000, 5.0)
    assert [e.change for e in events] == [Change.FIRING, Change.RESOLVED]
    assert [e.step for e in events] == [130, 130]
    assert records[0].state is State.RESOLVED


def test_state_is_a_function_of_rows_and_findings():
    first = evaluate({}, [nan(5), spike(SpikeClass.PENDING)], 100, 1.0)
    again = evaluate({}, [nan(5), spike(SpikeClass.PENDING)], 100, 1.0)
    assert first == again
