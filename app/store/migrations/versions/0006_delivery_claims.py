"""delivery claims: an idempotency key per delivery, and the claim that may send it

Revision ID: 0006
Revises: 0005
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('key', sa.String(length=32), nullable=True))
        batch_op.add_column(sa.Column('claimed_by', sa.String(length=32), nullable=True))
    deliveries = sa.table('deliveries', sa.column('id', sa.Integer), sa.column('key', sa.String))
    conn = op.get_bind()
    for (delivery_id,) in conn.execute(sa.select(deliveries.c.id)).all():
        conn.execute(deliveries.update().where(deliveries.c.id == delivery_id).values(key=uuid.uuid4().hex))
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.alter_column('key', existing_type=sa.String(length=32), nullable=False)
        batch_op.create_unique_constraint('uq_deliveries_key', ['key'])


def downgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_constraint('uq_deliveries_key', type_='unique')
        batch_op.drop_column('claimed_by')
        batch_op.drop_column('key')
