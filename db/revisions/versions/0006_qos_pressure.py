"""QoS guards and pressure

- qos_events: what each node's QoS guard did (CPU suppress, memory eviction, ...) and the
  controller's restarts after it; unique by (node, log, seq).
- container_pressure: per-container stall (PSI cpu/memory, run-queue wait) per observation.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 00:30:00
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('container_pressure',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('container', sa.String(length=200), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('qos', sa.String(length=4), nullable=False),
    sa.Column('interval_s', sa.Float(), nullable=True),
    sa.Column('cpu_stall', sa.Float(), nullable=True),
    sa.Column('memory_some', sa.Float(), nullable=True),
    sa.Column('memory_full', sa.Float(), nullable=True),
    sa.Column('wait', sa.Float(), nullable=True),
    sa.Column('cpu_some_us', sa.BigInteger(), nullable=True),
    sa.Column('memory_some_us', sa.BigInteger(), nullable=True),
    sa.Column('memory_full_us', sa.BigInteger(), nullable=True),
    sa.Column('wait_ns', sa.BigInteger(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_container_pressure_at', 'container_pressure', ['at'])
    op.create_index('ix_container_pressure_container', 'container_pressure', ['container'])
    op.create_table('qos_events',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('node', sa.String(length=200), nullable=False),
    sa.Column('log', sa.String(length=40), nullable=False),
    sa.Column('seq', sa.BigInteger(), nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('container', sa.String(length=200), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('detail_json', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('node', 'log', 'seq', name='uq_qos_events_node_log_seq')
    )
    op.create_index('ix_qos_events_at', 'qos_events', ['at'])
    op.create_index('ix_qos_events_kind', 'qos_events', ['kind'])
    op.create_index('ix_qos_events_node', 'qos_events', ['node'])


def downgrade() -> None:
    op.drop_index('ix_qos_events_node', table_name='qos_events')
    op.drop_index('ix_qos_events_kind', table_name='qos_events')
    op.drop_index('ix_qos_events_at', table_name='qos_events')
    op.drop_table('qos_events')
    op.drop_index('ix_container_pressure_container', table_name='container_pressure')
    op.drop_index('ix_container_pressure_at', table_name='container_pressure')
    op.drop_table('container_pressure')
