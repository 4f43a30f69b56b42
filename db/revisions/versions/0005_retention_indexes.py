"""a store that lives for years: hourly aggregates, approvals for the leader, indexes for every
per-epoch query

- container_demand_hourly, energy_hourly: raw rows older than `[store] raw_days` are summed into
  these (db/repos/retention.py) and removed.
- approvals: plans approved on a web page, for the controller that leads to run between epochs.
- indexes: energy_samples (node, source, at), energy (container, start), power_events.state and
  finished_at, migrations.finished_at; and the foreign keys retention follows when it removes old
  plans (migrations.action_id, energy.plan_id).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 10:00:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('container_demand_hourly',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('hour', sa.DateTime(), nullable=False),
    sa.Column('container', sa.String(length=200), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('rows', sa.Integer(), nullable=False),
    sa.Column('seconds', sa.Float(), nullable=True),
    sa.Column('cpu', sa.Float(), nullable=True),
    sa.Column('cpu_max', sa.Float(), nullable=True),
    sa.Column('memory_mb', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_container_demand_hourly_hour', 'container_demand_hourly', ['hour'])
    op.create_index('ix_container_demand_hourly_container', 'container_demand_hourly', ['container'])
    op.create_table('energy_hourly',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('hour', sa.DateTime(), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('container', sa.String(length=200), nullable=True),
    sa.Column('source', sa.String(length=10), nullable=False),
    sa.Column('rows', sa.Integer(), nullable=False),
    sa.Column('start', sa.DateTime(), nullable=False),
    sa.Column('end', sa.DateTime(), nullable=False),
    sa.Column('energy_j', sa.Float(), nullable=False),
    sa.Column('idle_j', sa.Float(), nullable=True),
    sa.Column('residual_j', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_energy_hourly_hour', 'energy_hourly', ['hour'])
    op.create_index('ix_energy_hourly_node', 'energy_hourly', ['node'])
    op.create_table('approvals',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('plan_id', sa.Integer(), nullable=False),
    sa.Column('partial', sa.Boolean(), nullable=False),
    sa.Column('requested_by', sa.String(length=200), nullable=False),
    sa.Column('requested_at', sa.DateTime(), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('outcome', sa.Text(), nullable=True),
    sa.Column('applied_by', sa.String(length=200), nullable=True),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_approvals_plan_id', 'approvals', ['plan_id'])
    op.create_index('ix_approvals_requested_at', 'approvals', ['requested_at'])
    op.create_index('ix_approvals_state', 'approvals', ['state'])
    op.create_index('ix_energy_samples_node_source_at', 'energy_samples', ['node', 'source', 'at'])
    op.create_index('ix_energy_container_start', 'energy', ['container', 'start'])
    op.create_index('ix_power_events_state', 'power_events', ['state'])
    op.create_index('ix_power_events_finished_at', 'power_events', ['finished_at'])
    op.create_index('ix_migrations_finished_at', 'migrations', ['finished_at'])
    op.create_index('ix_migrations_action_id', 'migrations', ['action_id'])
    op.create_index('ix_energy_plan_id', 'energy', ['plan_id'])


def downgrade() -> None:
    op.drop_index('ix_energy_plan_id', table_name='energy')
    op.drop_index('ix_migrations_action_id', table_name='migrations')
    op.drop_index('ix_migrations_finished_at', table_name='migrations')
    op.drop_index('ix_power_events_finished_at', table_name='power_events')
    op.drop_index('ix_power_events_state', table_name='power_events')
    op.drop_index('ix_energy_container_start', table_name='energy')
    op.drop_index('ix_energy_samples_node_source_at', table_name='energy_samples')
    op.drop_table('approvals')
    op.drop_index('ix_energy_hourly_node', table_name='energy_hourly')
    op.drop_index('ix_energy_hourly_hour', table_name='energy_hourly')
    op.drop_table('energy_hourly')
    op.drop_index('ix_container_demand_hourly_container', table_name='container_demand_hourly')
    op.drop_index('ix_container_demand_hourly_hour', table_name='container_demand_hourly')
    op.drop_table('container_demand_hourly')
