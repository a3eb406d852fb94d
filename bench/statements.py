"""Counting the statements a piece of work sends to the database: every statement SQLAlchemy
hands the driver (an executemany counts once: psycopg pipelines its rows) on one engine,
with its text, so a test can bound a request's round trips and a bench can print them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.engine import Engine


@contextlib.contextmanager
def counting(engine: Engine) -> Iterator[list[str]]:
    """The statements sent on `engine` while the block runs (first line of each), in order."""
    sent: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        sent.append(statement.strip().splitlines()[0])

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
