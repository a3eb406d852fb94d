"""API tokens: only their SHA-256 is stored; the token itself is shown once, at creation."""

from __future__ import annotations

import hashlib
import secrets

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.store.schema import tokens

SCOPES = {"read": "read", "write": "read write"}  # a write token may read too


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(conn: Connection, name: str, scope: str, now: float, value: str | None = None) -> str | None:
    """A new token with `scope` ("read" or "write"), made up unless `value` is given; None
    if the name (or the token) is taken."""
    token = value or "lw_" + secrets.token_urlsafe(32)
    taken = sa.or_(tokens.c.name == name, tokens.c.hash == digest(token))
    if conn.execute(sa.select(tokens.c.id).where(taken)).first():
        return None
    conn.execute(tokens.insert().values(name=name, hash=digest(token), scopes=SCOPES[scope], created_at=now))
    return token


def scopes_of(conn: Connection, token: str) -> set[str] | None:
    """The scopes a presented token grants; None for an unknown token."""
    row = conn.execute(sa.select(tokens.c.scopes).where(tokens.c.hash == digest(token))).first()
    return set(row.scopes.split()) if row else None


def any_tokens(conn: Connection) -> bool:
    return conn.execute(sa.select(tokens.c.id).limit(1)).first() is not None


def list_tokens(conn: Connection) -> list[dict]:
    query = sa.select(tokens.c.name, tokens.c.scopes, tokens.c.created_at).order_by(tokens.c.name)
    return [dict(r._mapping) for r in conn.execute(query)]


def revoke_token(conn: Connection, name: str) -> bool:
    return conn.execute(tokens.delete().where(tokens.c.name == name)).rowcount == 1
