"""Which runner reaches a node: `runner_for(cluster, node)`.

Above runner.py (the contract) and the two runners that implement it, so that the
contract never imports its implementations. The runner module is imported only when
it is picked: paramiko (ssh_runner.py) is never loaded for a cluster of local nodes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.clouds.base import ClusterInfo, NodeInfo
    from launcher.runtime.runner import CommandRunner


def runner_for(cluster: ClusterInfo, node: NodeInfo) -> CommandRunner:
    """The runner that reaches `node` of `cluster`. Does not connect yet."""
    if cluster.cloud == "slurm":  # job steps of the allocation, from the login node
        from launcher.clouds.slurm.steps import SrunRunner

        return SrunRunner(cluster, node)
    if node.ssh_user is None:
        from launcher.runtime.local_runner import LocalRunner

        return LocalRunner(node)
    from launcher.runtime.ssh_runner import SSHRunner

    return SSHRunner(node, key_path=cluster.ssh_key_path)
