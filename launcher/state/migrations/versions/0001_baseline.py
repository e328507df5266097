"""baseline: the schema of the last release before Alembic (launcher/state/legacy.py's
chains at their newest versions, as a fresh DB gets them).

Revision ID: 0001
Revises:
Create Date: 2026-11-28 00:19:15.782466
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_audit',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('at', sa.Double(), nullable=False),
    sa.Column('user', sa.Text(), nullable=False),
    sa.Column('action', sa.Text(), nullable=False),
    sa.Column('target', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    op.create_table('api_requests',
    sa.Column('id', sa.Text(), nullable=False),
    sa.Column('user', sa.Text(), nullable=False),
    sa.Column('kind', sa.Text(), nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.Column('ended_at', sa.Double(), nullable=True),
    sa.Column('result', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('api_users',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('role', sa.Text(), nullable=False),
    sa.Column('token_sha256', sa.Text(), nullable=False),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.Column('rotated_at', sa.Double(), nullable=True),
    sa.CheckConstraint("role IN ('admin', 'user')", name='api_users_role'),
    sa.PrimaryKeyConstraint('name'),
    sa.UniqueConstraint('token_sha256')
    )
    op.create_table('cluster_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cluster', sa.Text(), nullable=False),
    sa.Column('ts', sa.Double(), nullable=False),
    sa.Column('kind', sa.Text(), nullable=False),
    sa.Column('cloud', sa.Text(), nullable=True),
    sa.Column('message', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('cluster_events', schema=None) as batch_op:
        batch_op.create_index('cluster_events_by_cluster', ['cluster', 'id'], unique=False)

    op.create_table('cluster_health',
    sa.Column('cluster', sa.Text(), nullable=False),
    sa.Column('launched_at', sa.Double(), nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('seen_at', sa.Double(), nullable=False),
    sa.PrimaryKeyConstraint('cluster')
    )
    op.create_table('clusters',
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('cloud', sa.Text(), nullable=False),
    sa.Column('region', sa.Text(), nullable=False),
    sa.Column('zone', sa.Text(), nullable=True),
    sa.Column('instance_type', sa.Text(), nullable=False),
    sa.Column('num_nodes', sa.Integer(), nullable=False),
    sa.Column('use_spot', sa.Integer(), nullable=False),
    sa.Column('accelerator', sa.Text(), nullable=True),
    sa.Column('accelerator_count', sa.Double(), server_default='0', nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('hourly_cost', sa.Double(), server_default='0', nullable=False),
    sa.Column('autostop_minutes', sa.Double(), nullable=True),
    sa.Column('autostop_down', sa.Integer(), server_default='0', nullable=False),
    sa.Column('launched_at', sa.Double(), nullable=False),
    sa.Column('status_changed_at', sa.Double(), nullable=False),
    sa.Column('task_name', sa.Text(), nullable=True),
    sa.Column('resources', sa.Text(), server_default='', nullable=False),
    sa.Column('ssh_key_path', sa.Text(), nullable=True),
    sa.Column('owner', sa.Text(), nullable=True),
    sa.Column('launch_pid', sa.Integer(), nullable=True),
    sa.Column('launch_host', sa.Text(), nullable=True),
    sa.Column('launched_by', sa.Text(), nullable=True),
    sa.CheckConstraint('num_nodes >= 1', name='clusters_num_nodes'),
    sa.PrimaryKeyConstraint('name')
    )
    op.create_table('cost_ledger',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cluster', sa.Text(), nullable=False),
    sa.Column('cloud', sa.Text(), nullable=False),
    sa.Column('region', sa.Text(), nullable=False),
    sa.Column('zone', sa.Text(), nullable=True),
    sa.Column('instance_type', sa.Text(), nullable=False),
    sa.Column('num_nodes', sa.Integer(), nullable=False),
    sa.Column('use_spot', sa.Integer(), nullable=False),
    sa.Column('hourly_cost', sa.Double(), nullable=False),
    sa.Column('started_at', sa.Double(), nullable=False),
    sa.Column('ended_at', sa.Double(), nullable=True),
    sa.Column('end_reason', sa.Text(), nullable=True),
    sa.Column('owner', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('cost_ledger', schema=None) as batch_op:
        batch_op.create_index('cost_ledger_by_cluster', ['cluster', 'ended_at'], unique=False)

    op.create_table('managed_jobs',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('status', sa.Text(), nullable=False),
    sa.Column('task_yaml', sa.Text(), nullable=False),
    sa.Column('task_source', sa.Text(), nullable=True),
    sa.Column('task_id', sa.Text(), nullable=False),
    sa.Column('strategy', sa.Text(), nullable=False),
    sa.Column('max_restarts_on_errors', sa.Integer(), nullable=False),
    sa.Column('recover_on_exit_codes', sa.Text(), nullable=False),
    sa.Column('submitted_at', sa.Double(), nullable=False),
    sa.Column('started_at', sa.Double(), nullable=True),
    sa.Column('ended_at', sa.Double(), nullable=True),
    sa.Column('recoveries', sa.Integer(), server_default='0', nullable=False),
    sa.Column('restarts_on_errors', sa.Integer(), server_default='0', nullable=False),
    sa.Column('last_recovery_s', sa.Double(), nullable=True),
    sa.Column('cancel_requested', sa.Integer(), server_default='0', nullable=False),
    sa.Column('failure_reason', sa.Text(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('updated_at', sa.Double(), nullable=False),
    sa.Column('pipeline_id', sa.Integer(), nullable=True),
    sa.Column('pipeline_name', sa.Text(), nullable=True),
    sa.Column('stage_index', sa.Integer(), nullable=True),
    sa.Column('stage_count', sa.Integer(), nullable=True),
    sa.Column('after_job_id', sa.Integer(), nullable=True),
    sa.Column('deadline_at', sa.Double(), nullable=True),
    sa.Column('work_s', sa.Double(), nullable=True),
    sa.Column('restart_overhead_s', sa.Double(), nullable=True),
    sa.Column('progress', sa.Text(), nullable=True),
    sa.Column('policy', sa.Text(), nullable=True),
    sa.Column('launched_by', sa.Text(), nullable=True),
    sa.Column('cancelled_by', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('managed_jobs', schema=None) as batch_op:
        batch_op.create_index('managed_jobs_status', ['status'], unique=False)

    op.create_table('schema_version',
    sa.Column('component', sa.Text(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('applied_at', sa.Double(), nullable=False),
    sa.PrimaryKeyConstraint('component', 'version')
    )
    op.create_table('cluster_nodes',
    sa.Column('cluster', sa.Text(), nullable=False),
    sa.Column('rank', sa.Integer(), nullable=False),
    sa.Column('node_id', sa.Text(), nullable=False),
    sa.Column('internal_ip', sa.Text(), nullable=False),
    sa.Column('external_ip', sa.Text(), nullable=True),
    sa.Column('ssh_user', sa.Text(), nullable=True),
    sa.Column('ssh_port', sa.Integer(), server_default='22', nullable=False),
    sa.Column('ssh_host_key', sa.Text(), nullable=True),
    sa.Column('local_root', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['cluster'], ['clusters.name'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('cluster', 'rank')
    )
    op.create_table('managed_job_attempts',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('cluster_name', sa.Text(), nullable=False),
    sa.Column('cause', sa.Text(), nullable=False),
    sa.Column('phase', sa.Text(), nullable=False),
    sa.Column('cloud', sa.Text(), nullable=True),
    sa.Column('region', sa.Text(), nullable=True),
    sa.Column('zone', sa.Text(), nullable=True),
    sa.Column('instance_type', sa.Text(), nullable=True),
    sa.Column('num_nodes', sa.Integer(), nullable=True),
    sa.Column('use_spot', sa.Integer(), nullable=True),
    sa.Column('node_price', sa.Double(), nullable=True),
    sa.Column('cluster_job_id', sa.Integer(), nullable=True),
    sa.Column('checkpoint_dir', sa.Text(), nullable=True),
    sa.Column('created_at', sa.Double(), nullable=False),
    sa.Column('running_at', sa.Double(), nullable=True),
    sa.Column('ended_at', sa.Double(), nullable=True),
    sa.Column('outcome', sa.Text(), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('preempted_at', sa.Double(), nullable=True),
    sa.Column('recovery_s', sa.Double(), nullable=True),
    sa.Column('work_lost_s', sa.Double(), nullable=True),
    sa.Column('torn_down_at', sa.Double(), nullable=True),
    sa.Column('node_ids', sa.Text(), nullable=True),
    sa.Column('outcome_applied', sa.Integer(), server_default='0', nullable=False),
    sa.Column('outcome_reason', sa.Text(), nullable=True),
    sa.Column('drain_until', sa.Double(), nullable=True),
    sa.Column('replace_intent', sa.Text(), nullable=True),
    sa.Column('gang_runs', sa.Integer(), server_default='1', nullable=False),
    sa.Column('replace_lost', sa.Text(), nullable=True),
    sa.Column('replace_at', sa.Double(), nullable=True),
    sa.Column('replace_reason', sa.Text(), nullable=True),
    sa.Column('market', sa.Text(), nullable=True),
    sa.Column('switch_cluster', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['managed_jobs.id'], ),
    sa.PrimaryKeyConstraint('job_id', 'attempt'),
    sa.UniqueConstraint('cluster_name')
    )
    op.create_table('managed_job_blocks',
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('cloud', sa.Text(), nullable=False),
    sa.Column('region', sa.Text(), nullable=True),
    sa.Column('zone', sa.Text(), nullable=True),
    sa.Column('until', sa.Double(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['managed_jobs.id'], )
    )
    op.create_table('managed_job_deadline_log',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.Double(), nullable=False),
    sa.Column('kind', sa.Text(), nullable=False),
    sa.Column('tick', sa.Integer(), nullable=True),
    sa.Column('mode', sa.Text(), nullable=True),
    sa.Column('current', sa.Text(), nullable=True),
    sa.Column('spot_available', sa.Integer(), nullable=True),
    sa.Column('done_s', sa.Double(), nullable=True),
    sa.Column('slack_s', sa.Double(), nullable=True),
    sa.Column('restart_overhead_s', sa.Double(), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['managed_jobs.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('managed_job_deadline_log', schema=None) as batch_op:
        batch_op.create_index('managed_job_deadline_log_job', ['job_id'], unique=False)

    op.create_table('managed_job_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.Integer(), nullable=False),
    sa.Column('at', sa.Double(), nullable=False),
    sa.Column('from_status', sa.Text(), nullable=True),
    sa.Column('to_status', sa.Text(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=True),
    sa.ForeignKeyConstraint(['job_id'], ['managed_jobs.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('managed_job_events', schema=None) as batch_op:
        batch_op.create_index('managed_job_events_job', ['job_id'], unique=False)

    op.create_table('provision_attempts',
    sa.Column('cluster', sa.Text(), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('token', sa.Text(), nullable=False),
    sa.Column('cloud', sa.Text(), nullable=False),
    sa.Column('region', sa.Text(), nullable=False),
    sa.Column('zone', sa.Text(), nullable=True),
    sa.Column('instance_type', sa.Text(), nullable=False),
    sa.Column('started_at', sa.Double(), nullable=False),
    sa.Column('outcome', sa.Text(), nullable=True),
    sa.Column('error_class', sa.Text(), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('ended_at', sa.Double(), nullable=True),
    sa.PrimaryKeyConstraint('cluster', 'attempt')
    )
    # A fresh DB has no secret values in managed_jobs.task_yaml to scrub
    # (launcher/jobs/job_secrets.py): record the scrub as done.
    op.execute(sa.text(
        "INSERT INTO schema_version (component, version, description, applied_at) "
        "VALUES ('job-secrets', 1, 'fresh DB: no secret values in task_yaml', 0)"))


def downgrade() -> None:
    raise NotImplementedError("the state DB is never downgraded")
