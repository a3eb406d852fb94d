"""run liveness: last seen wall time, finished time, pace (recent gaps, last values per tag)

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_seen_at', sa.Double(), nullable=True))
        batch_op.add_column(sa.Column('finished_at', sa.Double(), nullable=True))
        batch_op.add_column(sa.Column('pace', sa.JSON(), nullable=True))
        batch_op.create_index('ix_runs_last_seen', ['last_seen_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_last_seen')
        batch_op.drop_column('pace')
        batch_op.drop_column('finished_at')
        batch_op.drop_column('last_seen_at')
