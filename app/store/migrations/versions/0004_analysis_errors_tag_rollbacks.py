"""analysis errors on runs, rollbacks of some tags

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('analysis_error', sa.Text(), nullable=True))
    with op.batch_alter_table('rollbacks', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tags', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('rollbacks', schema=None) as batch_op:
        batch_op.drop_column('tags')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('analysis_error')
