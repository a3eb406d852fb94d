"""chunk summaries: order, lowest segment, non-finite count and per-block extremes of each
chunk, filled in for the chunks already stored

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

BATCH = 200  # chunks read, summarised and written back at a time: a few MB at most


def upgrade() -> None:
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('ordered', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('min_segment', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('nonfinite', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('blocks', sa.LargeBinary(), nullable=True))
    _backfill(op.get_bind())


def _backfill(conn) -> None:
    table = sa.table(
        'chunks', sa.column('id', sa.Integer), sa.column('count', sa.Integer), sa.column('data', sa.LargeBinary),
        sa.column('ordered', sa.Integer), sa.column('min_segment', sa.Integer), sa.column('nonfinite', sa.Integer),
        sa.column('blocks', sa.LargeBinary),
    )
    update = table.update().where(table.c.id == sa.bindparam('chunk_id')).values(
        ordered=sa.bindparam('ordered'), min_segment=sa.bindparam('min_segment'),
        nonfinite=sa.bindparam('nonfinite'), blocks=sa.bindparam('blocks'),
    )
    after = -1
    while True:
        rows = conn.execute(
            sa.select(table.c.id, table.c.count, table.c.data).where(table.c.id > after).order_by(table.c.id).limit(BATCH)
        ).all()
        if not rows:
            return
        conn.execute(update, [{'chunk_id': i, **summary_columns(*chunks.unpack(data, count))} for i, count, data in rows])
        after = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.drop_column('blocks')
        batch_op.drop_column('nonfinite')
        batch_op.drop_column('min_segment')
        batch_op.drop_column('ordered')
