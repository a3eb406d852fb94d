"""rewritten files (files.head), changes a scan has not printed yet (alert_events.report_by)

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.add_column(sa.Column('head', sa.String(length=32), nullable=True))
    with op.batch_alter_table('alert_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('report_by', sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column('report_lease', sa.Double(), nullable=True))
        batch_op.create_index('ix_alert_events_report_by', ['report_by'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('alert_events', schema=None) as batch_op:
        batch_op.drop_index('ix_alert_events_report_by')
        batch_op.drop_column('report_lease')
        batch_op.drop_column('report_by')
    with op.batch_alter_table('files', schema=None) as batch_op:
        batch_op.drop_column('head')
