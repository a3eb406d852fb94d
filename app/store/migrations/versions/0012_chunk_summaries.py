"""chunk summaries: order, lowest segment, non-finite count and per-block extremes of each
chunk, in a table of their own, filled in for the chunks already stored

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

from app.store import chunks
from app.store.summaries import summary_columns

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None

BATCH = 200  # chunks read, summarised and written at a time: a few MB at most


def upgrade() -> None:
    op.create_table(
        'chunk_summaries',
        sa.Column('chunk_id', sa.Integer(), nullable=False),
        sa.Column('ordered', sa.Integer(), nullable=False),
        sa.Column('min_segment', sa.Integer(), nullable=False),
        sa.Column('nonfinite', sa.Integer(), nullable=False),
        sa.Column('blocks', sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(['chunk_id'], ['chunks.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('chunk_id'),
    )
    _backfill(op.get_bind())


def _backfill(conn) -> None:
    stored = sa.table('chunks', sa.column('id', sa.Integer), sa.column('count', sa.Integer), sa.column('data', sa.LargeBinary))
    summaries = sa.table(
        'chunk_summaries', sa.column('chunk_id', sa.Integer), sa.column('ordered', sa.Integer),
        sa.column('min_segment', sa.Integer), sa.column('nonfinite', sa.Integer), sa.column('blocks', sa.LargeBinary),
    )
    after = -1
    while True:
        rows = conn.execute(
            sa.select(stored.c.id, stored.c.count, stored.c.data).where(stored.c.id > after).order_by(stored.c.id).limit(BATCH)
        ).all()
        if not rows:
            return
        conn.execute(summaries.insert(), [{'chunk_id': i, **summary_columns(*chunks.unpack(data, count))} for i, count, data in rows])
        after = rows[-1].id


def downgrade() -> None:
    op.drop_table('chunk_summaries')
