"""The store's tables (SQLAlchemy Core).  Alembic migrations create them; this module is
what queries are written against, and what the migrations are checked against in tests."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("source", Text, nullable=False),  # the logdir or file the run was found under
    Column("name", Text, nullable=False),
    Column("state", JSON, nullable=False),  # what incremental reading must remember
    Column("last_step", BigInteger),
    Column("points", BigInteger, nullable=False, server_default="0"),
    Column("updated_at", Double, nullable=False),
    Column("dirty_since", Double),  # new points not yet analysed (the service defers busy runs)
    Column("analyzed_at", Double),
    Column("analyzed_points", BigInteger),  # how many points the last applied analysis saw
    Column("analysis_error", Text),  # why the last analysis failed; null once one succeeds
    Column("health", JSON),  # the run's health summary as of that analysis
    Column("last_seen_at", Double),  # wall time of its newest point, or when it was first seen (app/liveness.py)
    Column("finished_at", Double),  # marked finished (POST /v1/runs/{run}/finish); new points clear it
    Column("pace", JSON),  # recent gaps between points, and each tag's last value and peak (app/liveness.py)
    UniqueConstraint("source", "name", name="uq_runs_source_name"),
    Index("ix_runs_last_seen", "last_seen_at"),
)

tags = Table(
    "tags",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("name", Text, nullable=False),
    UniqueConstraint("run_id", "name", name="uq_tags_run_name"),
)

# Points, every one, in compressed column chunks: one row per tag per append.
chunks = Table(
    "chunks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("tag_id", Integer, ForeignKey("tags.id", ondelete="CASCADE"), nullable=False),
    Column("count", Integer, nullable=False),
    Column("first_step", BigInteger, nullable=False),
    Column("last_step", BigInteger, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Index("ix_chunks_tag", "tag_id", "id"),
)

# What a read answers of a chunk without decompressing its data (app/store/summaries.py).
# A table of its own, not columns after `data`: SQLite would walk a chunk's overflow pages
# to reach them, and every listing of a tag's chunks would cost as much as reading them.
chunk_summaries = Table(
    "chunk_summaries",
    metadata,
    Column("chunk_id", Integer, ForeignKey("chunks.id", ondelete="CASCADE"), primary_key=True),
    Column("ordered", Integer, nullable=False),  # 1: steps strictly increase in write order
    Column("min_segment", Integer, nullable=False),  # the lowest segment of its writes (a resume may hide them)
    Column("nonfinite", Integer, nullable=False),  # how many of its values are NaN or +-Inf
    Column("blocks", LargeBinary, nullable=False),  # per block of writes: extremes, ends, non-finite points
)

rollbacks = Table(
    "rollbacks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("from_step", BigInteger, nullable=False),
    Column("to_step", BigInteger, nullable=False),
    Column("segment", Integer, nullable=False),
    Column("file", Text, nullable=False),
    Column("wall_time", Double),
    Column("purge", Integer, nullable=False),
    Column("tags", JSON),  # the tags it rolls back (a rewrite posted over HTTP); null: every tag
)

# The run's streaming analysis (analyzers/runstream.py), saved with the points it has seen:
# compressed JSON, and per tag the last chunk fed and how many of its writes.  `version`
# counts saves, so an analysis that finished after another one was saved is dropped.
stream_states = Table(
    "stream_states",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("points", BigInteger, nullable=False),  # points fed, all tags
    Column("positions", JSON, nullable=False),  # tag -> [chunk id, writes of it fed]
    Column("data", LargeBinary, nullable=False),
)

# Earlier states of it, one every STREAM_CHECKPOINT points: a rollback replays from the
# newest one that had not reached the rewritten steps.
stream_checkpoints = Table(
    "stream_checkpoints",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("points", BigInteger, nullable=False),
    Column("fed", JSON, nullable=False),  # tag -> last step fed
    Column("data", LargeBinary, nullable=False),
    Index("ix_stream_checkpoints_run", "run_id", "points"),
)

files = Table(
    "files",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("path", Text, primary_key=True),
    Column("offset", BigInteger, nullable=False),
    Column("size", BigInteger, nullable=False),  # file size when last read: unchanged means skip
    Column("end", String(16), nullable=False),
    Column("head", String(32)),  # fingerprint of the file's first bytes: another means rewritten
)

alerts = Table(
    "alerts",
    metadata,
    Column("id", String(32), primary_key=True),  # fingerprint of source, run, tag, kind, onset
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("tag", Text, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("state", String(16), nullable=False),  # pending, firing, resolved
    Column("severity", String(16), nullable=False),
    Column("classification", String(32)),
    Column("inhibited_by", String(32)),
    Column("start_step", BigInteger, nullable=False),
    Column("finding", JSON, nullable=False),  # the latest finding, as reported
    Column("since_step", BigInteger),  # step and time of the last state change
    Column("since_time", Double, nullable=False),
    Column("acknowledged", Integer, nullable=False, server_default="0"),
    Column("silenced", Integer, nullable=False, server_default="0"),
    Index("ix_alerts_run", "run_id"),
    Index("ix_alerts_state", "state"),
)

alert_events = Table(
    "alert_events",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("alert_id", String(32), ForeignKey("alerts.id", ondelete="CASCADE"), nullable=False),
    Column("change", String(16), nullable=False),  # pending, firing, updated, resolved
    Column("state", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("classification", String(32)),
    Column("step", BigInteger),
    Column("time", Double, nullable=False),
    Column("message", Text, nullable=False),
    # A change a `losswatch scan` committed and has not printed yet: which scan, and until when
    # its claim holds (then, or once that process is gone, the next scan prints it).  NULL once
    # printed, and for the service's changes (reported in its responses and webhooks).
    Column("report_by", String(128)),
    Column("report_lease", Double),
    Index("ix_alert_events_alert", "alert_id"),
    Index("ix_alert_events_report_by", "report_by"),
)

deliveries = Table(
    "deliveries",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("event_id", Integer, ForeignKey("alert_events.id", ondelete="CASCADE"), nullable=False),
    Column("url", Text, nullable=False),
    Column("key", String(32), nullable=False),  # the idempotency key receivers see
    Column("status", String(16), nullable=False),  # pending, sending (claimed), delivered, failed
    Column("claimed_by", String(32)),  # the claim that may send it and record the outcome
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("next_attempt_at", Double, nullable=False),  # when sending: the end of the claim's lease
    Column("delivered_at", Double),
    # The run whose changes it carries (NULL: queued before 0008): a receiver gets a run's
    # deliveries in order, each only once those before it were delivered.
    Column("run_id", Integer),
    Column("event_ids", JSON),  # every change it carries, in order (NULL: just `event_id`)
    Index("ix_deliveries_status", "status", "next_attempt_at"),
    Index("ix_deliveries_run", "run_id", "id"),
    UniqueConstraint("key", name="uq_deliveries_key"),
)

# Logdirs the service polls; `next_poll_at` lets several processes share them (SKIP LOCKED).
logdirs = Table(
    "logdirs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("path", Text, nullable=False, unique=True),
    Column("created_at", Double, nullable=False),
    Column("next_poll_at", Double, nullable=False),
    Column("last_scan_at", Double),
    Column("last_error", Text),
)

tokens = Table(
    "tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", Text, nullable=False, unique=True),
    Column("hash", String(64), nullable=False, unique=True),  # sha256 of the token: never the token
    Column("scopes", Text, nullable=False),  # "read" or "read write"
    Column("created_at", Double, nullable=False),
)

# Silences (app/alerts/silences.py): globs on an alert's run, kind, tag, severity and id
# (NULL: any), until `ends_at`; expiring one sets `ends_at` to then.
silences = Table(
    "silences",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run", Text),
    Column("kind", Text),
    Column("tag", Text),
    Column("severity", Text),
    Column("alert_id", Text),
    Column("created_by", Text, nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Double, nullable=False),
    Column("ends_at", Double, nullable=False),
    Index("ix_silences_ends_at", "ends_at"),
)
