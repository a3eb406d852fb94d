"""packed columns kept as written on PostgreSQL: a chunk's points, its summary, a run's
streaming state and its checkpoints are packed by losswatch already (zlib, or raw floats
that do not compress), and are rewritten on every append or analysis; PostgreSQL's pglz
tried to compress each of them again on every write, for nothing (a 72 KB state: 2.9 ms per
update against 1.3 ms stored as is; an 18 KB chunk: 0.72 against 0.37 ms)

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None

PACKED = (("chunks", "data"), ("chunk_summaries", "blocks"), ("stream_states", "data"), ("stream_checkpoints", "data"))


def upgrade() -> None:
    _set_storage("EXTERNAL")  # out of line when large, never compressed


def downgrade() -> None:
    _set_storage("EXTENDED")  # PostgreSQL's default for bytea


def _set_storage(storage: str) -> None:
    """SQLite keeps every value as written: nothing to change there.  On PostgreSQL only the
    catalog changes (values already stored stay as they are until rewritten)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column in PACKED:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE {storage}")
