"""plans to review, demand history, honest energy

- plans: status (RECOMMENDED, APPLYING, APPLIED, PARTIAL, FAILED, REJECTED, EXPIRED), expiry,
  the inventory digest, who decided, the settings, predictions and explanations it was made with;
  actions: their predictions. Existing plans become EXPIRED (dry runs) or APPLIED.
- container_demand: per-epoch CPU (cgroup CPU-time delta) and memory of every container.
- energy_samples.boot_id (reboot detection) and busy_ns (a node's busy CPU time), energy.idle_j / residual_j (Kepler's split).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 20:45:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('plans') as t:
        t.add_column(sa.Column('status', sa.String(length=20), nullable=False, server_default='APPLIED'))
        t.add_column(sa.Column('expires_at', sa.DateTime(), nullable=True))
        t.add_column(sa.Column('inventory_digest', sa.String(length=64), nullable=True))
        t.add_column(sa.Column('decided_by', sa.String(length=200), nullable=True))
        t.add_column(sa.Column('decided_at', sa.DateTime(), nullable=True))
        t.add_column(sa.Column('settings_json', sa.Text(), nullable=True))
        t.add_column(sa.Column('prediction_json', sa.Text(), nullable=True))
        t.add_column(sa.Column('explanations_json', sa.Text(), nullable=True))
        t.create_index('ix_plans_status', ['status'])
    op.execute("UPDATE plans SET status = 'EXPIRED' WHERE dry_run")
    with op.batch_alter_table('actions') as t:
        t.add_column(sa.Column('prediction_json', sa.Text(), nullable=True))
    with op.batch_alter_table('energy_samples') as t:
        t.add_column(sa.Column('boot_id', sa.String(length=64), nullable=True))
        t.add_column(sa.Column('busy_ns', sa.BigInteger(), nullable=True))
    with op.batch_alter_table('energy') as t:
        t.add_column(sa.Column('idle_j', sa.Float(), nullable=True))
        t.add_column(sa.Column('residual_j', sa.Float(), nullable=True))
    op.create_table('container_demand',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('container', sa.String(length=200), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('interval_s', sa.Float(), nullable=True),
    sa.Column('cpu', sa.Float(), nullable=True),
    sa.Column('cpu_time_ns', sa.BigInteger(), nullable=True),
    sa.Column('memory_mb', sa.Float(), nullable=False),
    sa.Column('source', sa.String(length=10), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_container_demand_at', 'container_demand', ['at'])
    op.create_index('ix_container_demand_container', 'container_demand', ['container'])


def downgrade() -> None:
    op.drop_index('ix_container_demand_container', table_name='container_demand')
    op.drop_index('ix_container_demand_at', table_name='container_demand')
    op.drop_table('container_demand')
    with op.batch_alter_table('energy') as t:
        t.drop_column('residual_j')
        t.drop_column('idle_j')
    with op.batch_alter_table('energy_samples') as t:
        t.drop_column('busy_ns')
        t.drop_column('boot_id')
    with op.batch_alter_table('actions') as t:
        t.drop_column('prediction_json')
    with op.batch_alter_table('plans') as t:
        t.drop_index('ix_plans_status')
        for c in ('explanations_json', 'prediction_json', 'settings_json', 'decided_at', 'decided_by',
                  'inventory_digest', 'expires_at', 'status'):
            t.drop_column(c)
