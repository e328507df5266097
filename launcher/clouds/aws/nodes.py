"""Bringing fresh EC2 nodes into reach: the product's `NodeWaiter`.

`wait_for_ssh(info, deadline)`, for every node at once (threads):
1. TCP connect to port 22 of the address the client uses (external IP, else internal)
   until it answers (1 s between tries; no fixed sleeps);
2. learn the node's host key (`scan_host_key`; retried: sshd accepts TCP before it
   serves keys during boot) and pin it in the returned NodeInfo;
3. authorize the cluster-internal key on every node and put its private half and a
   known_hosts file (pinning every node) on the head, as the ssh cloud does
   (launcher/runtime/keys.py) - the head's agent reaches workers with it. Logins are
   retried: cloud-init writes authorized_keys after sshd starts.
Blocking until `deadline` (monotonic); raises CloudError naming the nodes that were not
reachable in time. Returns the ClusterInfo with host keys pinned.
"""

from __future__ import annotations

import dataclasses
import shlex
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from launcher.clouds.aws.errors import CLOUD
from launcher.clouds.base import CloudError, ClusterInfo, NodeInfo
from launcher.runtime import keys

NodeWaiter = Callable[[ClusterInfo, float], ClusterInfo]
RETRY_S = 1.0
CONNECT_TIMEOUT_S = 3.0
_MAX_PARALLEL = 16


def _address(node: NodeInfo) -> str:
    return node.external_ip or node.internal_ip


def _wait_port(host: str, port: int, deadline: float) -> None:
    last = ""
    while True:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                return
        except OSError as exc:
            last = str(exc)
        if time.monotonic() >= deadline:
            raise CloudError(f"{host}:{port} did not accept SSH connections in time ({last}).",
                             cloud=CLOUD)
        time.sleep(RETRY_S)


def _host_key(node: NodeInfo, deadline: float) -> str:
    from launcher.runtime.runner import NodeUnreachableError
    from launcher.runtime.ssh_runner import scan_host_key

    host = _address(node)
    while True:
        _wait_port(host, node.ssh_port, deadline)
        try:
            return scan_host_key(host, node.ssh_port, timeout=CONNECT_TIMEOUT_S * 2)
        except NodeUnreachableError as exc:
            if time.monotonic() >= deadline:
                raise CloudError(f"No SSH host key from {host}: {exc}", cloud=CLOUD) from exc
        time.sleep(RETRY_S)


def _install_cluster_key(info: ClusterInfo, node: NodeInfo, deadline: float) -> None:
    from launcher.errors import LauncherError
    from launcher.runtime.ssh_runner import SSHRunner

    name = info.cluster_name
    pair = keys.ensure_cluster_key(name)
    public = pair.public_key()
    authorize = (
        "set -e; umask 077; mkdir -p ~/.ssh; touch ~/.ssh/authorized_keys; "
        f"grep -qxF {shlex.quote(public)} ~/.ssh/authorized_keys || "
        f"printf '%s\\n' {shlex.quote(public)} >> ~/.ssh/authorized_keys"
    )
    known_hosts = "".join(f"{n.internal_ip} {n.ssh_host_key}\n"
                          for n in info.nodes if n.ssh_host_key)
    while True:
        runner = SSHRunner(node, key_path=info.ssh_key_path)
        try:
            runner.run(authorize, timeout=30).check(f"Authorizing the cluster key on {node.node_id}")
            if node.rank == 0:
                runner.put_text(pair.private_key(), keys.head_internal_key_path(name), 0o600)
                runner.put_text(known_hosts, keys.head_known_hosts_path(name), 0o644)
            return
        except LauncherError as exc:
            if time.monotonic() >= deadline:
                raise CloudError(f"Could not log in to {node.node_id} ({_address(node)}): {exc}",
                                 cloud=CLOUD) from exc
        finally:
            runner.close()
        time.sleep(RETRY_S)


def wait_for_ssh(info: ClusterInfo, deadline: float) -> ClusterInfo:
    """The product's NodeWaiter (see the module docstring)."""
    workers = min(_MAX_PARALLEL, len(info.nodes)) or 1
    with ThreadPoolExecutor(workers) as ex:
        host_keys = list(ex.map(lambda n: _host_key(n, deadline), info.nodes))
    nodes = tuple(dataclasses.replace(n, ssh_host_key=k)
                  for n, k in zip(info.nodes, host_keys, strict=True))
    pinned = dataclasses.replace(info, nodes=nodes)
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(lambda n: _install_cluster_key(pinned, n, deadline), nodes))
    return pinned
