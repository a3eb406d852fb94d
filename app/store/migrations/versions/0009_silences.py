"""silences: matchers on run, kind, tag, severity and alert id, with an end

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('silences',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run', sa.Text(), nullable=True),
    sa.Column('kind', sa.Text(), nullable=True),
    sa.Column('tag', sa.Text(), nullable=True),
    sa.Column('severity', sa.Text(), nullable=True),
    sa.Column('alert_id', sa.Text(), nullable=True),
    sa.Column('created_by', sa.Text(), nullable=False),
    sa.Column('comment', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.Column('ends_at', sa.Double(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_silences_ends_at', 'silences', ['ends_at'])


def downgrade() -> None:
    op.drop_index('ix_silences_ends_at', table_name='silences')
    op.drop_table('silences')
