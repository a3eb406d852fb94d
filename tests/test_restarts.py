"""Segments and the current view: a resume keeps every point, says where it rolled back,
and the current view shows what the resumed run stands on."""

from __future__ import annotations

import numpy as np

from analyzers.series import current_view
from app.ingest.points import Points
from app.ingest.restarts import SegmentState, SessionStart, assign_segments


def points(tags: tuple[str, ...], rows: list[tuple[int, int]]) -> Points:
    tag = np.array([t for t, _ in rows], np.int32)
    step = np.array([s for _, s in rows], np.int64)
    n = len(rows)
    return Points(tags, tag, step, np.arange(n, dtype=np.float64) + 1e9, np.arange(n, dtype=np.float64))


def current(p: Points, segment: np.ndarray, rollbacks) -> list[tuple[int, int, int]]:
    keep = current_view(p.tag, p.step, segment, {r.segment: r.to_step for r in rollbacks})
    return [(int(t), int(s), int(v)) for t, s, v in zip(p.tag[keep], p.step[keep], p.value[keep])]


def test_monotone_steps_are_one_segment():
    p = points(("loss", "lr"), [(0, s) for s in range(5)] + [(1, s) for s in range(5)])
    segment, rollbacks, state = assign_segments(p, [(0, "f")])
    assert list(segment) == [0] * 10
    assert rollbacks == []
    assert state == SegmentState(0, {"loss": 4, "lr": 4})


def test_step_going_back_opens_a_segment_and_hides_the_orphans():
    rows = [(0, s) for s in range(10)] + [(0, s) for s in range(6, 8)]
    p = points(("loss",), rows)
    segment, [rollback], _ = assign_segments(p, [(0, "a"), (10, "b")])
    assert list(segment) == [0] * 10 + [1, 1]
    assert (rollback.from_step, rollback.to_step, rollback.source, rollback.segment, rollback.purge) == (9, 6, "b", 1, False)
    assert rollback.wall_time == 1e9 + 10
    # steps 6.. of the first write are abandoned, including 8 and 9 never rewritten
    assert current(p, segment, [rollback]) == [(0, s, s) for s in range(6)] + [(0, 6, 10), (0, 7, 11)]


def test_interleaved_tags_roll_back_once():
    rows = [(t, s) for s in range(5) for t in (0, 1)] + [(t, s) for s in range(2, 4) for t in (0, 1)]
    p = points(("loss", "lr"), rows)
    segment, rollbacks, _ = assign_segments(p, [(0, "f")])
    assert len(rollbacks) == 1 and rollbacks[0].to_step == 2
    assert list(segment) == [0] * 10 + [1] * 4


def test_tags_logged_at_different_cadences_are_no_restart():
    rows = [(0, 0), (0, 1), (0, 2), (1, 0), (0, 3), (1, 2), (0, 4)]  # eval lags behind train
    segment, rollbacks, _ = assign_segments(points(("loss", "eval"), rows), [(0, "f")])
    assert rollbacks == [] and set(segment) == {0}


def test_repeated_step_is_a_rewrite_not_a_restart():
    p = points(("loss",), [(0, 0), (0, 1), (0, 1), (0, 2)])
    segment, rollbacks, _ = assign_segments(p, [(0, "f")])
    assert rollbacks == []
    assert current(p, segment, rollbacks) == [(0, 0, 0), (0, 1, 2), (0, 2, 3)]


def test_session_start_purges_from_its_step():
    p = points(("loss",), [(0, s) for s in range(10)] + [(0, 8), (0, 9)])
    start = SessionStart(index=10, step=5, wall_time=2e9, source="b")
    segment, [rollback], _ = assign_segments(p, [(0, "a"), (10, "b")], [start])
    assert (rollback.from_step, rollback.to_step, rollback.purge, rollback.wall_time) == (9, 5, True, 2e9)
    assert list(segment) == [0] * 10 + [1, 1]
    assert current(p, segment, [rollback]) == [(0, s, s) for s in range(5)] + [(0, 8, 10), (0, 9, 11)]


def test_session_start_at_the_beginning_is_no_rollback():
    p = points(("loss",), [(0, s) for s in range(3)])
    _, rollbacks, _ = assign_segments(p, [(0, "a")], [SessionStart(0, 0, 1e9, "a")])
    assert rollbacks == []


def test_state_carries_detection_across_incremental_reads():
    first = points(("loss",), [(0, s) for s in range(10)])
    _, _, state = assign_segments(first, [(0, "a")])
    second = points(("loss",), [(0, 4), (0, 5)])
    segment, [rollback], state2 = assign_segments(second, [(0, "b")], state=state)
    assert list(segment) == [1, 1]
    assert (rollback.from_step, rollback.to_step) == (9, 4)
    assert state2 == SegmentState(1, {"loss": 5})


def test_two_rollbacks_hide_by_the_lowest_later_resume():
    rows = [(0, s) for s in range(10)] + [(0, s) for s in range(7, 9)] + [(0, s) for s in range(3, 5)]
    p = points(("loss",), rows)
    segment, rollbacks, _ = assign_segments(p, [(0, "f")])
    assert [r.to_step for r in rollbacks] == [7, 3]
    assert current(p, segment, rollbacks) == [(0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 12), (0, 4, 13)]
