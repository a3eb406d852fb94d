"""grouped deliveries: one delivery carries a run's changes of one analysis to one receiver,
and deliveries of one run to one receiver go out in order

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.add_column(sa.Column('run_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('event_ids', sa.JSON(), nullable=True))
        batch_op.create_index('ix_deliveries_run', ['run_id', 'id'])


def downgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_deliveries_run')
        batch_op.drop_column('event_ids')
        batch_op.drop_column('run_id')
