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

The calling thread stays interruptible while it waits (one node: it probes itself;
several: it polls their threads' futures), so Ctrl-C, or a cancelled server request
(an exception raised in its thread), unwinds at once; the node threads then stop at
their next retry instead of probing on until the deadline.
"""

from __future__ import annotations

import dataclasses
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

from launcher.clouds.aws.errors import CLOUD
from launcher.clouds.base import CloudError, ClusterInfo, NodeInfo
from launcher.runtime import keys

NodeWaiter = Callable[[ClusterInfo, float], ClusterInfo]
RETRY_S = 1.0
CONNECT_TIMEOUT_S = 3.0
_MAX_PARALLEL = 16
_T = TypeVar("_T")


class _Aborted(Exception):
    """The waiter's caller gave up (Ctrl-C, a cancelled request): stop retrying."""


def _retry_pause(abort: threading.Event | None) -> None:
    if abort is None:
        time.sleep(RETRY_S)
    elif abort.wait(RETRY_S):
        raise _Aborted


def _each(fn: Callable[[NodeInfo, threading.Event | None], _T],
          nodes: Sequence[NodeInfo]) -> list[_T]:
    """fn(node) for every node at once, the caller interruptible throughout."""
    if len(nodes) <= 1:
        return [fn(n, None) for n in nodes]
    abort = threading.Event()
    ex = ThreadPoolExecutor(min(_MAX_PARALLEL, len(nodes)))
    futures = [ex.submit(fn, n, abort) for n in nodes]
    try:
        while not all(f.done() for f in futures):
            wait(futures, timeout=0.2)  # returns now and then: the caller can be interrupted
        return [f.result() for f in futures]
    finally:
        abort.set()
        ex.shutdown(wait=False, cancel_futures=True)


def _address(node: NodeInfo) -> str:
    return node.external_ip or node.internal_ip


def _wait_port(host: str, port: int, deadline: float,
               abort: threading.Event | None = None) -> None:
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
        _retry_pause(abort)


def _host_key(node: NodeInfo, deadline: float, abort: threading.Event | None = None) -> str:
    from launcher.runtime.runner import NodeUnreachableError
    from launcher.runtime.ssh_runner import scan_host_key

    host = _address(node)
    while True:
        _wait_port(host, node.ssh_port, deadline, abort)
        try:
            return scan_host_key(host, node.ssh_port, timeout=CONNECT_TIMEOUT_S * 2)
        except NodeUnreachableError as exc:
            if time.monotonic() >= deadline:
                raise CloudError(f"No SSH host key from {host}: {exc}", cloud=CLOUD) from exc
        _retry_pause(abort)


def _install_cluster_key(info: ClusterInfo, node: NodeInfo, deadline: float,
                         abort: threading.Event | None = None) -> None:
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
        _retry_pause(abort)


def wait_for_ssh(info: ClusterInfo, deadline: float) -> ClusterInfo:
    """The product's NodeWaiter (see the module docstring)."""
    host_keys = _each(lambda n, abort: _host_key(n, deadline, abort), info.nodes)
    nodes = tuple(dataclasses.replace(n, ssh_host_key=k)
                  for n, k in zip(info.nodes, host_keys, strict=True))
    pinned = dataclasses.replace(info, nodes=nodes)
    _each(lambda n, abort: _install_cluster_key(pinned, n, deadline, abort), nodes)
    return pinned
