"""controller lease with fencing token

Replaces the heartbeat lock (controller_lock) with a lease row whose token grows with every new
holder. The row is created here and never deleted, so the token never restarts and taking the
lease is always an UPDATE (no INSERT race between two first controllers).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 18:26:15.866970
"""
from datetime import datetime

from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    lease = op.create_table('controller_lease',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('token', sa.BigInteger(), nullable=False),
    sa.Column('holder', sa.String(length=200), nullable=True),
    sa.Column('acquired_at', sa.DateTime(), nullable=True),
    sa.Column('expires_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.bulk_insert(lease, [{'id': 1, 'token': 0, 'holder': None, 'acquired_at': None,
                            'expires_at': datetime(1970, 1, 1)}])
    op.drop_table('controller_lock')


def downgrade() -> None:
    op.create_table('controller_lock',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('owner', sa.String(length=200), nullable=False),
    sa.Column('acquired_at', sa.DateTime(), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.drop_table('controller_lease')
