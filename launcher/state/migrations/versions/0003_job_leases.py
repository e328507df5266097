"""job leases: the replica working on each managed job, and the replicas themselves

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("managed_jobs", sa.Column("lock_holder", sa.Text(), nullable=True))
    op.add_column("managed_jobs", sa.Column("lock_token", sa.Text(), nullable=True))
    op.add_column("managed_jobs", sa.Column("lock_expires_at", sa.Double(), nullable=True))
    op.create_table(
        "server_replicas",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("host", sa.Text(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("heartbeat_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    # the replica running each asynchronous request (a restarting replica fails only
    # the requests of replicas no longer heard from)
    op.add_column("api_requests", sa.Column("replica", sa.Text(), nullable=True))


def downgrade() -> None:
    raise NotImplementedError("the state DB is never downgraded")
