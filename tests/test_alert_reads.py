"""Applying an analysis reads only the alerts its evaluation can change or consult (the open
ones, those reported again, the NaN and divergence alerts on the tags of reported spikes),
not the run's whole history: every change, and every row, is still what evaluating the
whole history gives (`lifecycle.evaluate` of every stored alert)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import sqlalchemy as sa

from analyzers.findings import Finding, Kind, Severity, SpikeClass
from app.alerts.lifecycle import REWRITTEN, AlertRecord, evaluate
from app.analysis import Alert, fingerprint
from app.liveness import STALE
from app.store import alerts as stored_alerts
from app.store import runs as stored_runs
from app.store.runs import StoredRun
from app.updates import Assessment, apply

T0 = 1_800_000_000.0


def alert(kind: Kind, start: int, tag: str = "loss", ongoing: bool = True, end: int | None = None,
          severity: Severity = Severity.CRITICAL, cls: SpikeClass | None = None) -> Alert:
    finding = Finding(kind=kind, tag=tag, severity=severity, start_step=start, message=f"{kind.value} at {start}",
                      remediation="r", end_step=end, ongoing=ongoing, classification=cls)
    return Alert(fingerprint("http", "r", tag, kind.value, start), "http", "r", finding)


def spike(start: int, tag: str = "loss") -> Alert:
    return alert(Kind.LOSS_SPIKE, start, tag, severity=Severity.WARNING, cls=SpikeClass.PENDING)


def history(store, *analyses: list[Alert], last_step: int = 1000) -> None:
    """Apply successive whole-run analyses at T0, T0 + 1, ...: the run's stored history."""
    for i, current in enumerate(analyses):
        analysed(store, current, None, T0 + i, last_step)


def analysed(store, current: list[Alert], vanishing: Mapping[str, str] | None, now: float, last_step: int = 1000,
             run_as: dict | None = None) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Apply an analysis to run "r" (its row as stored, with `run_as` changed), and say what
    evaluating the whole stored history would have reported: (changes applied, changes
    expected), each (change, alert id, reason)."""
    with store.write() as conn:
        run = replace(stored_runs.lock_run(conn, "http", "r", now), **(run_as or {}))
        everything = stored_alerts.load_alerts(conn, run.id)
        expected = _whole_history(run, everything, current, last_step, now, vanishing)
        applied = apply(conn, run, Assessment(run.points, last_step, current, vanishing=vanishing), [], now)
    return [(r.event.change.value, r.event.record.id, r.event.reason) for r in applied.changes], expected


def _whole_history(run: StoredRun, everything: dict[str, AlertRecord], current: list[Alert], last_step: int,
                   now: float, vanishing: Mapping[str, str] | None) -> list[tuple[str, str, str]]:
    """The changes `apply` made when it read every alert the run ever had (stale ones are
    judged by time: none here but where a test says so)."""
    detected = {k: r for k, r in everything.items() if r.kind != STALE}
    _, events = evaluate(detected, current, last_step, now, vanishing)
    return [(e.change.value, e.record.id, e.reason) for e in events]


def rows(store) -> dict[str, tuple[str, str | None, float]]:
    with store.read() as conn:
        query = sa.text("SELECT id, state, inhibited_by, since_time FROM alerts")
        return {i: (state, inhibitor, since) for i, state, inhibitor, since in conn.execute(query)}


def test_a_resolved_alert_reported_over_again_stays_resolved_and_reports_nothing(store):
    over = alert(Kind.DIVERGENCE, 300, ongoing=False, end=400)
    history(store, [alert(Kind.DIVERGENCE, 300)], [over])
    before = rows(store)
    assert before[over.id][0] == "resolved"
    changes, expected = analysed(store, [over], None, T0 + 10)  # a replay reports the closed finding again
    assert changes == expected == []
    assert rows(store) == before


def test_a_resolved_alert_that_fires_again_fires_under_its_id(store):
    collapse = alert(Kind.LOSS_SCALE_COLLAPSE, 200, tag="loss_scale")  # onset-free: one id per tag
    history(store, [collapse], [replace(collapse, finding=replace(collapse.finding, ongoing=False, end_step=300))])
    again = alert(Kind.LOSS_SCALE_COLLAPSE, 700, tag="loss_scale")
    assert again.id == collapse.id
    changes, expected = analysed(store, [again], {}, T0 + 10)
    assert changes == expected == [("firing", collapse.id, "")]
    assert rows(store)[collapse.id][:2] == ("firing", None)


def test_a_resolved_divergence_inhibits_the_lesser_spikes_within_it_on_its_tag_not_after_it(store):
    divergence = alert(Kind.DIVERGENCE, 100)
    history(store, [divergence], [replace(divergence, finding=replace(divergence.finding, ongoing=False, end_step=650))])
    within, elsewhere, after = spike(600), spike(600, tag="other"), spike(700)
    changes, expected = analysed(store, [within, elsewhere, after], {}, T0 + 10)  # streaming: the divergence is final
    assert sorted(changes) == sorted(expected) == sorted([("firing", elsewhere.id, ""), ("firing", after.id, "")])
    assert rows(store)[within.id][:2] == ("firing", divergence.id)
    assert rows(store)[after.id][:2] == ("firing", None)


def test_an_open_alert_no_longer_seen_resolves_and_a_final_one_is_left_alone(store):
    vanished, final, done = alert(Kind.NONFINITE, 100), alert(Kind.DIVERGENCE, 200), alert(Kind.NONFINITE, 50)
    history(store, [done], [vanished, final])
    before = rows(store)
    changes, expected = analysed(store, [], {vanished.id: REWRITTEN}, T0 + 10)
    assert changes == expected == [("resolved", vanished.id, "no longer seen: those steps were rewritten")]
    after = rows(store)
    assert (after[final.id], after[done.id]) == (before[final.id], before[done.id])
    changes, expected = analysed(store, [], None, T0 + 11)  # a whole-run analysis: every open one not seen
    assert changes == expected == [("resolved", final.id, "no longer seen: those steps were rewritten")]
    assert rows(store)[done.id] == before[done.id]


def test_a_stale_alert_resolved_before_fires_again_and_resolves_when_points_arrive(store):
    def at(now: float, last_seen: float) -> list[tuple[str, str]]:
        return [c[:2] for c in analysed(store, [], {}, now, run_as={"last_seen_at": last_seen, "last_step": 1000})[0]]

    ((change, stale_id),) = at(T0 + 3600, T0)  # an hour without a point: past the 10-minute floor
    assert change == "firing"
    assert at(T0 + 3700, T0 + 3700) == [("resolved", stale_id)]
    assert at(T0 + 3800, T0 + 3700) == []
    # quiet again at the same step (a rollback took the run back there): the same incident fires again
    assert at(T0 + 9000, T0 + 3700) == [("firing", stale_id)]
    assert rows(store)[stale_id][:2] == ("firing", None)
    assert at(T0 + 9100, T0 + 9100) == [("resolved", stale_id)]


def test_only_what_the_evaluation_needs_is_read(store):
    settled = [alert(Kind.DIVERGENCE, s, tag="other") for s in range(10, 50, 10)]
    history(store, settled, [])
    with store.read() as conn:
        run_id = stored_runs.find_runs(conn, "r", "http")[0].id
        assert len(stored_alerts.load_alerts(conn, run_id)) == len(settled)
        assert stored_alerts.load_alerts_to_evaluate_of_runs(conn, [run_id], [], ["divergence"], ["loss"])[run_id] == {}
        assert set(stored_alerts.load_alerts_to_evaluate_of_runs(conn, [run_id], [settled[0].id], [], [])[run_id]) == {settled[0].id}
        assert len(stored_alerts.load_alerts_to_evaluate_of_runs(conn, [run_id], [], ["divergence"], ["other"])[run_id]) == len(settled)


def test_an_analysis_reporting_more_alerts_than_a_statement_takes_ids_asks_for_them_in_turn(store, monkeypatch):
    monkeypatch.setattr(stored_alerts, "MAX_IDS", 3)
    over = [alert(Kind.DIVERGENCE, s, ongoing=False, end=s + 5) for s in range(100, 600, 100)]
    history(store, [alert(Kind.DIVERGENCE, s) for s in range(100, 600, 100)], over)
    before = rows(store)
    read_whole, real = [], stored_alerts.load_alerts
    monkeypatch.setattr(stored_alerts, "load_alerts", lambda conn, run_id: read_whole.append(run_id) or real(conn, run_id))
    changes, expected = analysed(store, over, None, T0 + 10)  # five ids: more than three
    assert changes == expected == []
    assert rows(store) == before
    assert len(read_whole) == 1  # for the expectation only: `apply` asked for the five, three then two
    with store.read() as conn:
        run_id = stored_runs.find_runs(conn, "r", "http")[0].id
        asked = stored_alerts.load_alerts_to_evaluate_of_runs(conn, [run_id], [a.id for a in over], [], [])[run_id]
    assert set(asked) == {a.id for a in over}

