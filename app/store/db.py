"""Opening the store and running transactions on it.

SQLite is the default: a file in the user's state directory, in WAL mode.  Its write
transactions start with BEGIN IMMEDIATE, so two scans at once queue for the write lock
instead of both reading and then one failing to upgrade.  PostgreSQL is used by URL
(`postgresql+psycopg://...`).  Either way the schema is brought to the newest Alembic
revision when the store is opened, under a lock so two processes never migrate at once.

Nothing waits on the database without end: connecting has a timeout, and with a statement
timeout (the service sets one) so has every statement, on the server and, for a server
that stops answering (a network partition), on the client too.  A broken connection is
found by a ping when it leaves the pool and replaced, so the store recovers by itself when
the database comes back.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

_MIGRATION_LOCK = 0x6C6F7373  # "loss": the advisory lock key PostgreSQL migrations take


class StoreError(Exception):
    """The store cannot be opened or used; says which store and why."""


# SQLSTATEs of a database without the schema this losswatch needs: undefined table, schema,
# column (recreated empty, or at an older revision).
_MISSING_SCHEMA = frozenset({"42P01", "3F000", "42703"})


def unavailable(e: BaseException) -> bool:
    """Whether a database error means the store cannot be used just now (down, unreachable,
    too slow, too busy, or without its schema), to be retried, rather than a defect."""
    if isinstance(e, (StoreError, sa.exc.TimeoutError, sa.exc.OperationalError, sa.exc.InterfaceError)):
        return True
    if isinstance(e, sa.exc.DBAPIError):
        return e.connection_invalidated or getattr(e.orig, "sqlstate", None) in _MISSING_SCHEMA
    return False


@dataclass(frozen=True)
class Timeouts:
    """How long losswatch waits on the database.  `connect`: to open a connection (and, on
    SQLite, for the write lock when `statement` is None).  `statement`: for one statement,
    lock waits included, and for a free pooled connection; None waits as long as it takes
    (the CLI: a cron scan waits its turn behind another)."""

    connect: float = 5.0
    statement: float | None = None


# A statement's answer may take this long past the server's own statement timeout (which
# answers with an error) before the client gives up on the server and drops the connection.
CLIENT_GRACE = 2.0
# A connection with nothing in flight is probed after 10 s idle, every 5 s, 3 times; data
# sent and not acknowledged for 20 s drops it: a partition is noticed even mid-statement.
_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
               "tcp_user_timeout": 20_000}


def default_url() -> str:
    """A SQLite file in the user's state directory (created if needed)."""
    directory = Path(platformdirs.user_state_dir("losswatch"))
    directory.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{directory / 'losswatch.db'}"


@dataclass
class Store:
    engine: Engine
    timeouts: Timeouts = field(default_factory=Timeouts)
    # SQLite has one writer at a time; its busy handler makes waiters poll with growing
    # sleeps (a 0.1-0.9 s tail under load).  Threads of one process queue here instead.
    _writers: threading.Lock | None = None
    _watchdog: _Watchdog | None = None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A transaction that will write: the caller owns it; it commits when the block ends."""
        with self._write_turn(), self.engine.begin() as conn:
            yield conn

    @contextlib.contextmanager
    def _write_turn(self) -> Iterator[None]:
        if self._writers is None:
            yield
            return
        wait = self.timeouts.statement
        if not self._writers.acquire(timeout=-1 if wait is None else wait):
            raise StoreError(f"the database is busy: no turn to write within {wait:g} s")
        try:
            yield
        finally:
            self._writers.release()

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
        if self._watchdog is not None:
            self._watchdog.stop()
        self.engine.dispose()


def open_store(url: str | None = None, timeouts: Timeouts = Timeouts()) -> Store:
    """Connect to `url` (default: the SQLite file in the state directory) and migrate it."""
    url = url or default_url()
    watchdog = _Watchdog(timeouts.statement + CLIENT_GRACE) if timeouts.statement is not None else None
    try:
        engine = _engine(url, timeouts, watchdog)
        _migrate(engine)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as e:
        raise StoreError(f"{_redacted(url)}: not a database URL losswatch can use ({e})") from e
    except sa.exc.OperationalError as e:
        if watchdog is not None:
            watchdog.stop()
        raise StoreError(f"{_redacted(url)}: cannot open the store: {e.orig}") from e
    if engine.dialect.name == "sqlite":
        return Store(engine, timeouts, threading.Lock())
    return Store(engine, timeouts, None, watchdog)


def schema_revision(conn: Connection) -> str | None:
    """The Alembic revision the database's schema is at; None when it has no schema."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


@functools.cache
def head_revision() -> str:
    """The revision this losswatch's schema is at (the newest migration)."""
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def _engine(url: str, timeouts: Timeouts, watchdog: _Watchdog | None) -> Engine:
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        busy = timeouts.statement if timeouts.statement is not None else 60.0
        engine = sa.create_engine(parsed, connect_args={"timeout": busy})
        sa.event.listen(engine, "connect", lambda dbapi_connection, _: _sqlite_connect(dbapi_connection, busy))
        sa.event.listen(engine, "begin", _sqlite_begin)
        return engine
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    engine = sa.create_engine(
        parsed, pool_pre_ping=True, pool_timeout=timeouts.statement if timeouts.statement is not None else 30.0,
    )
    connection_class = _watched_connection_class(watchdog)
    sa.event.listen(
        engine, "do_connect", lambda _d, _r, cargs, cparams: _pg_connect(connection_class, cargs, cparams, timeouts)
    )
    return engine


def _pg_connect(connection_class, cargs: list, cparams: dict, timeouts: Timeouts):
    """A psycopg connection with the timeouts (what the URL sets wins): connect_timeout
    (whole seconds, at least 2: libpq's rule), keepalives, and the server's
    statement_timeout, added to any `options` the URL gave."""
    params = {**_KEEPALIVES, "connect_timeout": max(2, round(timeouts.connect)), **cparams}
    if timeouts.statement is not None:
        options = f"-c statement_timeout={round(timeouts.statement * 1000)}"
        params["options"] = f"{cparams['options']} {options}" if cparams.get("options") else options
    return connection_class.connect(*cargs, **params)


def _sqlite_connect(dbapi_connection, busy: float) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN itself (the pysqlite recipe).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={round(busy * 1000)}")
    cursor.close()


def _sqlite_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get("losswatch_read") else "BEGIN IMMEDIATE")


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", "app.store:migrations")
    return config


def _migrate(engine: Engine) -> None:
    config = _alembic_config()
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


class _Watchdog:
    """Drops a PostgreSQL connection that has waited on the server longer than `limit`
    seconds: the server's statement timeout answers a slow statement, but a server that
    cannot be reached (a partition, a stopped host) never answers at all.  Shutting the
    socket down wakes the waiting thread with an error, and the pool discards the connection.
    One thread per store, started with its first connection."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._busy: dict[int, tuple[float, int]] = {}  # wait id -> (started, socket)
        self._expired: set[int] = set()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_id = 0

    def start_wait(self, fd: int) -> int:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="losswatch-db-watchdog", daemon=True)
                self._thread.start()
            self._next_id += 1
            self._busy[self._next_id] = (time.monotonic(), fd)
            return self._next_id

    def end_wait(self, wait_id: int) -> bool:
        """Whether the wait was cut short by the watchdog."""
        with self._lock:
            self._busy.pop(wait_id, None)
            if wait_id in self._expired:
                self._expired.discard(wait_id)
                return True
            return False

    def stop(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(min(1.0, self.limit / 4)):
            now = time.monotonic()
            with self._lock:
                for wait_id, (started, fd) in list(self._busy.items()):
                    if now - started > self.limit:
                        del self._busy[wait_id]
                        self._expired.add(wait_id)
                        _shut_down(fd)


def _shut_down(fd: int) -> None:
    with contextlib.suppress(OSError):
        sock = socket.socket(fileno=os.dup(fd))
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()


def _watched_connection_class(watchdog: _Watchdog | None):
    """psycopg's Connection, its every wait on the server (statements, fetches, commits,
    pings) registered with the watchdog."""
    import psycopg

    if watchdog is None:
        return psycopg.Connection

    class WatchedConnection(psycopg.Connection):
        def wait(self, gen, *args, **kwargs):
            wait_id = watchdog.start_wait(self.pgconn.socket)
            try:
                return super().wait(gen, *args, **kwargs)
            except psycopg.OperationalError as e:
                if watchdog.end_wait(wait_id):
                    raise psycopg.OperationalError(f"no answer from the database within {watchdog.limit:g} s") from e
                raise
            finally:
                watchdog.end_wait(wait_id)

    return WatchedConnection
