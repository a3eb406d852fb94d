"""Opening the store and running transactions on it.

SQLite is the default: a file in the user's state directory, in WAL mode.  Its write
transactions start with BEGIN IMMEDIATE, so two scans at once queue for the write lock
instead of both reading and then one failing to upgrade.  PostgreSQL is used by URL
(`postgresql+psycopg://...`).  Either way the schema is brought to the newest Alembic
revision when the store is opened, under a lock so two processes never migrate at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection, Engine

_MIGRATION_LOCK = 0x6C6F7373  # "loss": the advisory lock key PostgreSQL migrations take


class StoreError(Exception):
    """The store cannot be opened or used; says which store and why."""


def default_url() -> str:
    """A SQLite file in the user's state directory (created if needed)."""
    directory = Path(platformdirs.user_state_dir("losswatch"))
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'losswatch.db'}"


@dataclass
class Store:
    engine: Engine
    # SQLite has one writer at a time; its busy handler makes waiters poll with growing
    # sleeps (a 0.1-0.9 s tail under load).  Threads of one process queue here instead.
    _writers: contextlib.AbstractContextManager = field(default_factory=contextlib.nullcontext)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A transaction that will write: the caller owns it; it commits when the block ends."""
        with self._writers, self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction over one snapshot (SQLite: without the write lock;
        PostgreSQL: REPEATABLE READ, so a run's row and its points agree)."""
        options = {"losswatch_read": True}
        if self.dialect == "postgresql":
            options["isolation_level"] = "REPEATABLE READ"
        with self.engine.connect().execution_options(**options) as conn, conn.begin():
            yield conn

    def close(self) -> None:
        self.engine.dispose()


def open_store(url: str | None = None) -> Store:
    """Connect to `url` (default: the SQLite file in the state directory) and migrate it."""
    url = url or default_url()
    try:
        engine = _engine(url)
        _migrate(engine)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as e:
        raise StoreError(f"{_redacted(url)}: not a database URL losswatch can use ({e})") from e
    except sa.exc.OperationalError as e:
        raise StoreError(f"{_redacted(url)}: cannot open the store: {e.orig}") from e
    return Store(engine, threading.Lock()) if engine.dialect.name == "sqlite" else Store(engine)


def _engine(url: str) -> Engine:
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(parsed, connect_args={"timeout": 60})
        sa.event.listen(engine, "connect", _sqlite_connect)
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return sa.create_engine(parsed, pool_pre_ping=True)


def _sqlite_connect(dbapi_connection, _record) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN itself (the pysqlite recipe).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=60000")
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("losswatch_read") else "BEGIN IMMEDIATE")


def _migrate(engine: Engine) -> None:
    config = Config()
    config.set_main_option("script_location", "app.store:migrations")
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def _redacted(url: str) -> str:
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url
