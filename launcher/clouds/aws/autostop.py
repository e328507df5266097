"""Autostop on AWS: the nodes power themselves off, and EC2 stops or terminates them.

The head-node agent runs an "action" once the cluster has been idle long enough
(launcher/runtime/agent_daemon.py). On AWS that action is: power off every worker over
SSH with the cluster-internal key (pinned known_hosts), then the head itself, with
`sudo shutdown -h now`. What EC2 then does is each instance's
`InstanceInitiatedShutdownBehavior`, set here when autostop is configured: `stop`
(EBS kept; `launcher start` brings the cluster back) or, for `--down`, `terminate`.
Spot instances cannot be stopped: a spot cluster gets autostop only with `--down`.
Whatever remains after a self-terminate (per-cluster security group, Elastic IPs, the
placement group) is deleted when the client next reconciles (`status --refresh` sees
every node terminated and runs terminate) or on `launcher down`.
"""

from __future__ import annotations

import shlex
from typing import Any

from launcher.clouds.aws.errors import CLOUD, aws_errors
from launcher.clouds.base import ClusterInfo, InvalidRequestError
from launcher.runtime import keys
from launcher.runtime.runner import shell_path

POWER_OFF = "sudo shutdown -h now"


def set_shutdown_behavior(ec2: Any, region: str, instance_ids: list[str], down: bool) -> None:
    """Make an OS shutdown of these instances stop them, or (`down`) terminate them."""
    value = "terminate" if down else "stop"
    with aws_errors(region=region, action="instance shutdown behavior"):
        for iid in instance_ids:
            ec2.modify_instance_attribute(InstanceId=iid, Attribute="instanceInitiatedShutdownBehavior",
                                          Value=value)


def power_off_command(cluster: ClusterInfo) -> str:
    """Shell for the head: power off the workers (in parallel), then the head."""
    key = shell_path(keys.head_internal_key_path(cluster.cluster_name))
    known = shell_path(keys.head_known_hosts_path(cluster.cluster_name))
    parts = []
    for node in cluster.nodes:
        if node.rank == cluster.head.rank:
            continue
        target = shlex.quote(f"{node.ssh_user or 'ubuntu'}@{node.internal_ip}")
        parts.append(
            f"ssh -i {key} -o UserKnownHostsFile={known} -o StrictHostKeyChecking=yes "
            f"-o BatchMode=yes -o ConnectTimeout=10 -p {node.ssh_port} {target} "
            f"{shlex.quote(POWER_OFF)} &")
    return " ".join([*parts, "wait;" if parts else "", POWER_OFF]).strip()


def autostop_action(ec2: Any, cluster: ClusterInfo, down: bool,
                    spot: bool) -> str:
    """Prepare the instances and return the agent's autostop action. Raises
    InvalidRequestError for a stop (no `down`) of a spot cluster, CloudError."""
    if spot and not down:
        raise InvalidRequestError(
            f"Cluster {cluster.cluster_name!r} runs on spot instances, which cannot be stopped: "
            "use autostop with --down.", cloud=CLOUD, region=cluster.region)
    set_shutdown_behavior(ec2, cluster.region, [n.node_id for n in cluster.nodes], down)
    return power_off_command(cluster)
