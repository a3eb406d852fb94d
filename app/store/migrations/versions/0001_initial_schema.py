"""initial schema

Revision ID: 0001
Revises: 
"""

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('state', sa.JSON(), nullable=False),
    sa.Column('last_step', sa.BigInteger(), nullable=True),
    sa.Column('points', sa.BigInteger(), server_default='0', nullable=False),
    sa.Column('updated_at', sa.Double(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('source', 'name', name='uq_runs_source_name')
    )
    op.create_table('alerts',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('tag', sa.Text(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('classification', sa.String(length=32), nullable=True),
    sa.Column('inhibited_by', sa.String(length=32), nullable=True),
    sa.Column('start_step', sa.BigInteger(), nullable=False),
    sa.Column('finding', sa.JSON(), nullable=False),
    sa.Column('since_step', sa.BigInteger(), nullable=True),
    sa.Column('since_time', sa.Double(), nullable=False),
    sa.Column('acknowledged', sa.Integer(), server_default='0', nullable=False),
    sa.Column('silenced', sa.Integer(), server_default='0', nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.create_index('ix_alerts_run', ['run_id'], unique=False)
        batch_op.create_index('ix_alerts_state', ['state'], unique=False)

    op.create_table('files',
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('offset', sa.BigInteger(), nullable=False),
    sa.Column('size', sa.BigInteger(), nullable=False),
    sa.Column('end', sa.String(length=16), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('run_id', 'path')
    )
    op.create_table('rollbacks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('from_step', sa.BigInteger(), nullable=False),
    sa.Column('to_step', sa.BigInteger(), nullable=False),
    sa.Column('segment', sa.Integer(), nullable=False),
    sa.Column('file', sa.Text(), nullable=False),
    sa.Column('wall_time', sa.Double(), nullable=True),
    sa.Column('purge', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('tags',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'name', name='uq_tags_run_name')
    )
    op.create_table('alert_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('alert_id', sa.String(length=32), nullable=False),
    sa.Column('change', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('severity', sa.String(length=16), nullable=False),
    sa.Column('classification', sa.String(length=32), nullable=True),
    sa.Column('step', sa.BigInteger(), nullable=True),
    sa.Column('time', sa.Double(), nullable=False),
    sa.Column('message', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['alert_id'], ['alerts.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('alert_events', schema=None) as batch_op:
        batch_op.create_index('ix_alert_events_alert', ['alert_id'], unique=False)

    op.create_table('chunks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tag_id', sa.Integer(), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.Column('first_step', sa.BigInteger(), nullable=False),
    sa.Column('last_step', sa.BigInteger(), nullable=False),
    sa.Column('data', sa.LargeBinary(), nullable=False),
    sa.ForeignKeyConstraint(['tag_id'], ['tags.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.create_index('ix_chunks_tag', ['tag_id', 'id'], unique=False)

    op.create_table('deliveries',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('event_id', sa.Integer(), nullable=False),
    sa.Column('url', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), server_default='0', nullable=False),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('next_attempt_at', sa.Double(), nullable=False),
    sa.Column('delivered_at', sa.Double(), nullable=True),
    sa.ForeignKeyConstraint(['event_id'], ['alert_events.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_deliveries_status', ['status', 'next_attempt_at'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_deliveries_status')

    op.drop_table('deliveries')
    with op.batch_alter_table('chunks', schema=None) as batch_op:
        batch_op.drop_index('ix_chunks_tag')

    op.drop_table('chunks')
    with op.batch_alter_table('alert_events', schema=None) as batch_op:
        batch_op.drop_index('ix_alert_events_alert')

    op.drop_table('alert_events')
    op.drop_table('tags')
    op.drop_table('rollbacks')
    op.drop_table('files')
    with op.batch_alter_table('alerts', schema=None) as batch_op:
        batch_op.drop_index('ix_alerts_state')
        batch_op.drop_index('ix_alerts_run')

    op.drop_table('alerts')
    op.drop_table('runs')
