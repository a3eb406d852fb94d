"""The store: migrations on an empty database of each kind, points kept exactly and
compactly, offsets committed with the points."""

from __future__ import annotations

import numpy as np
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from app.ingest.logdir import read_logdir
from app.ingest.points import Points
from app.store import chunks
from app.store import runs as stored_runs
from app.store.db import StoreError, open_store
from app.store.schema import metadata
from tests.eventfiles import loss_events, write_events


def test_migrations_create_the_schema_on_an_empty_database(store_url):
    store = open_store(store_url)
    inspector = sa.inspect(store.engine)
    assert set(metadata.tables) <= set(inspector.get_table_names())
    for table in metadata.tables.values():
        assert {c["name"] for c in inspector.get_columns(table.name)} == set(table.columns.keys()), table.name
    open_store(store_url).close()  # a second open finds it migrated
    store.close()


def test_points_and_offsets_round_trip(store_url, tmp_path):
    write_events(tmp_path / "events.out.tfevents.1", loss_events(range(100)))
    run = read_logdir(str(tmp_path)).runs["."]
    store = open_store(store_url)
    with store.write() as conn:
        row = stored_runs.lock_run(conn, "src", ".", 1.0)
        stored_runs.append_points(conn, row.id, run.points, run.segment)
    with store.read() as conn:
        [writes] = stored_runs.load_writes(conn, row.id).values()
    assert np.array_equal(writes.step, run.points.step)
    assert np.array_equal(writes.value, run.points.value)
    store.close()


def test_a_failed_transaction_stores_neither_points_nor_offsets(store_url, tmp_path):
    write_events(tmp_path / "events.out.tfevents.1", loss_events(range(10)))
    run = read_logdir(str(tmp_path)).runs["."]
    store = open_store(store_url)
    try:
        with store.write() as conn:
            row = stored_runs.lock_run(conn, "src", ".", 1.0)
            stored_runs.append_points(conn, row.id, run.points, run.segment)
            stored_runs.save_files(conn, row.id, {"f": stored_runs.StoredFile(100, 100, "complete")})
            raise RuntimeError("killed")
    except RuntimeError:
        pass
    with store.read() as conn:
        assert stored_runs.known_files(conn, "src") == {}
        assert conn.execute(sa.text("SELECT count(*) FROM chunks")).scalar() == 0
    store.close()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 500).flatmap(lambda n: st.tuples(
    arrays(np.int64, n, elements=st.integers(-(2**62), 2**62)),
    arrays(np.int32, n),
    arrays(np.float64, n),
    arrays(np.float64, n),
)))
def test_chunks_keep_every_bit(columns):
    step, segment, wall, value = columns
    back = chunks.unpack(chunks.pack(step, segment, wall, value), len(step))
    for original, restored in zip((step, segment, wall, value), back):
        assert original.tobytes() == np.asarray(restored, original.dtype).tobytes()


def test_a_bad_url_is_a_store_error():
    try:
        open_store("nosuchdb://x")
    except StoreError as e:
        assert str(e).startswith("nosuchdb://x: not a database URL losswatch can use")
    else:
        raise AssertionError("no error")


def test_an_unreachable_directory_is_a_store_error(tmp_path):
    url = f"sqlite:///{tmp_path / 'missing' / 'x.db'}"
    try:
        open_store(url)
    except StoreError as e:
        assert str(e) == f"{url}: cannot open the store: unable to open database file"
    else:
        raise AssertionError("no error")


def test_small_appends_grow_the_last_chunk_instead_of_adding_rows(store_url):
    store = open_store(store_url)
    with store.write() as conn:
        row = stored_runs.lock_run(conn, "src", "r", 1.0)
    for first in range(0, 3000, 10):  # a training loop posting 10 steps at a time
        steps = np.arange(first, first + 10, dtype=np.int64)
        points = Points(("loss",), np.zeros(10, np.int32), steps, np.full(10, np.nan), steps * 0.5)
        with store.write() as conn:
            stored_runs.append_points(conn, row.id, points, np.zeros(10, np.int32))
    with store.read() as conn:
        rows = conn.execute(sa.text("SELECT count(*) FROM chunks")).scalar()
        [writes] = stored_runs.load_writes(conn, row.id).values()
    store.close()
    assert rows <= 3000 // stored_runs.SMALL_CHUNK + 1
    assert np.array_equal(writes.step, np.arange(3000)) and np.array_equal(writes.value, np.arange(3000) * 0.5)


def test_packed_columns_are_not_compressed_again_on_postgresql(pg_url):
    store = open_store(pg_url)
    with store.read() as conn:
        storage = dict(conn.execute(sa.text(
            "SELECT c.relname || '.' || a.attname, a.attstorage FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace AND a.atttypid = 'bytea'::regtype"
        )).all())
    store.close()
    packed = {"chunks.data", "chunk_summaries.blocks", "stream_states.data", "stream_checkpoints.data"}
    assert {name: storage[name] for name in packed} == dict.fromkeys(packed, "e")  # EXTERNAL: never pglz'd
