"""Bringing fresh GCE nodes into reach: the product's NodeWaiter.

The same steps as on EC2 (launcher/clouds/aws/nodes.py, which imports no SDK): wait
for port 22, pin each node's host key, install the cluster-internal key (the guest
agent writes the `ssh-keys` metadata user's authorized_keys shortly after sshd starts:
logins are retried). Errors are re-labelled as GCP's.
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.clouds.base import CloudError, ClusterInfo
from launcher.clouds.gcp.errors import CLOUD

NodeWaiter = Callable[[ClusterInfo, float], ClusterInfo]


def wait_for_ssh(info: ClusterInfo, deadline: float) -> ClusterInfo:
    """SSH up on every node, host keys pinned, cluster key installed. Raises CloudError."""
    from launcher.clouds.aws.nodes import wait_for_ssh as _wait

    try:
        return _wait(info, deadline)
    except CloudError as exc:
        exc.cloud = CLOUD
        raise
