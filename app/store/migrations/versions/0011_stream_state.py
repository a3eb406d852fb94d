"""streaming analysis state and its checkpoints

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'stream_states',
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('version', sa.BigInteger(), nullable=False),
        sa.Column('points', sa.BigInteger(), nullable=False),
        sa.Column('positions', sa.JSON(), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('run_id'),
    )
    op.create_table(
        'stream_checkpoints',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.Integer(), nullable=False),
        sa.Column('points', sa.BigInteger(), nullable=False),
        sa.Column('fed', sa.JSON(), nullable=False),
        sa.Column('data', sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('stream_checkpoints', schema=None) as batch_op:
        batch_op.create_index('ix_stream_checkpoints_run', ['run_id', 'points'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('stream_checkpoints', schema=None) as batch_op:
        batch_op.drop_index('ix_stream_checkpoints_run')
    op.drop_table('stream_checkpoints')
    op.drop_table('stream_states')
