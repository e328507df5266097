"""Provisioning: the one path `launch` (launcher.api) and the managed-jobs controller
(launcher.jobs) share to get a cluster and give it back.

Small modules, each importable on its own:
- `cloud_access`: `CloudFn` and `default_cloud` (name -> Cloud, through the registry)
- `offers`:       catalog rows plus the live offers of the user's SSH node pools
- `planning`:     `plan(task, blocked)`: every catalog offer ranked (pure ranking + credentials)
- `attempts`:     the state DB's record of every provisioning attempt and its idempotency token
- `failover`:     `provision_with_failover` (rank -> provision -> block and re-rank, and
                  `retry_until_up` rounds with backoff)
- `prepare`:      `prepare_cluster` (agent, file sync, setup) and `job_spec_for`
- `teardown`:     `terminate_everywhere`, `down_cluster`, `terminate_orphan`

Layering: this package imports clouds, runtime, optimizer, catalog and state; it never
imports `launcher.api`, `launcher.jobs` or `launcher.cli` (tests/test_layering.py).
"""
