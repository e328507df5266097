"""each node's last reported state and health; who launched each cluster, kept after `down`

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # launcher/state/node_state.py: the cluster page's node table
    op.create_table(
        "node_state",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("launched_at", sa.Double(), nullable=False),
        sa.Column("node_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("seen_at", sa.Double(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.CheckConstraint("kind IN ('state', 'health')", name="node_state_kind"),
        sa.PrimaryKeyConstraint("cluster", "node_id", "kind"),
    )
    # launcher/api/server_store.py: a user's cost includes clusters already taken down
    op.create_table(
        "api_cluster_launches",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("launched_at", sa.Double(), nullable=False),
        sa.Column("user", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "launched_at"),
    )
    op.execute(
        'INSERT INTO api_cluster_launches (cluster, launched_at, "user")'
        " SELECT name, launched_at, launched_by FROM clusters WHERE launched_by IS NOT NULL")


def downgrade() -> None:
    raise NotImplementedError("the state DB is never downgraded")
