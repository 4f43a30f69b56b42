"""traffic between containers and the savings ledger (issue #21)

- traffic: bytes per client/server pair per conntrack read; traffic_reads: which node was read
  when (and why one was not measured).
- savings: nodes' time off with their measured idle power, migrations and wakes with their
  measured energy.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25 00:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('traffic',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('interval_s', sa.Float(), nullable=False),
    sa.Column('counted_on', sa.String(length=200), nullable=False),
    sa.Column('client_kind', sa.String(length=10), nullable=False),
    sa.Column('client', sa.String(length=200), nullable=False),
    sa.Column('client_node', sa.String(length=200), nullable=True),
    sa.Column('server_kind', sa.String(length=10), nullable=False),
    sa.Column('server', sa.String(length=200), nullable=False),
    sa.Column('server_node', sa.String(length=200), nullable=True),
    sa.Column('c2s_bytes', sa.BigInteger(), nullable=False),
    sa.Column('s2c_bytes', sa.BigInteger(), nullable=False),
    sa.Column('flows', sa.Integer(), nullable=False),
    sa.Column('how', sa.String(length=20), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_traffic_at', 'traffic', ['at'])
    op.create_index('ix_traffic_client', 'traffic', ['client'])
    op.create_index('ix_traffic_server', 'traffic', ['server'])
    op.create_table('traffic_reads',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('interval_s', sa.Float(), nullable=True),
    sa.Column('flows', sa.Integer(), nullable=False),
    sa.Column('unaccounted', sa.Integer(), nullable=False),
    sa.Column('measured', sa.Boolean(), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_traffic_reads_at', 'traffic_reads', ['at'])
    op.create_table('savings',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=10), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=True),
    sa.Column('plan_id', sa.Integer(), nullable=True),
    sa.Column('start', sa.DateTime(), nullable=False),
    sa.Column('end', sa.DateTime(), nullable=True),
    sa.Column('source', sa.String(length=10), nullable=True),
    sa.Column('idle_w', sa.Float(), nullable=True),
    sa.Column('energy_j', sa.Float(), nullable=True),
    sa.Column('model_j', sa.Float(), nullable=True),
    sa.Column('note', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['plan_id'], ['plans.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_savings_kind', 'savings', ['kind'])
    op.create_index('ix_savings_node', 'savings', ['node'])
    op.create_index('ix_savings_start', 'savings', ['start'])


def downgrade() -> None:
    op.drop_index('ix_savings_start', table_name='savings')
    op.drop_index('ix_savings_node', table_name='savings')
    op.drop_index('ix_savings_kind', table_name='savings')
    op.drop_table('savings')
    op.drop_index('ix_traffic_reads_at', table_name='traffic_reads')
    op.drop_table('traffic_reads')
    op.drop_index('ix_traffic_server', table_name='traffic')
    op.drop_index('ix_traffic_client', table_name='traffic')
    op.drop_index('ix_traffic_at', table_name='traffic')
    op.drop_table('traffic')
