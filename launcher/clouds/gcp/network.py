"""Firewall rules nodes need, per VPC network (created once, kept: shared by clusters;
`launcher clouds cleanup gcp` deletes them, cleanup.py).

- `launcher-<network>-ssh`: TCP 22 from `gcp.ssh_cidr` to instances tagged `launcher`;
- `launcher-<network>-internal`: all TCP/UDP/ICMP between instances tagged `launcher`
  (the gang's intra-cluster traffic: NCCL, the head agent reaching workers).
Per cluster, when the task opens `ports`: `launcher-<cluster>-ports` from anywhere to
the cluster's own tag (deleted with the cluster, teardown.py). Global operations are
waited on; an existing rule (409 alreadyExists) counts as created.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from launcher.clouds.gcp.errors import is_not_found
from launcher.clouds.gcp.ops import call, wait
from launcher.config.settings import GCPSettings

NODE_TAG = "launcher"
_known: set[tuple[str, str]] = set()  # (project, rule) this process saw exist
_lock = threading.Lock()
# Touched by `forget` (a rule deleted by `launcher clouds cleanup`, maybe in another
# process): a process whose `_known` predates it looks the rules up again.
_seen_mark: list[int] = [0]


def _mark_path() -> Any:
    from launcher.config.settings import launcher_home

    return launcher_home() / "gcp" / "firewalls-deleted"


def _mark() -> int:
    try:
        return _mark_path().stat().st_mtime_ns
    except OSError:
        return 0


def network_url(project: str, network: str) -> str:
    return network if "/" in network else f"projects/{project}/global/networks/{network}"


def cluster_tag(label: str) -> str:
    return f"launcher-{label}"[:63].rstrip("-")


def _ensure_rule(clients: Any, project: str, body: dict[str, Any], deadline: float) -> None:
    from google.cloud import compute_v1

    name = body["name"]
    with _lock:
        mark = _mark()
        if mark != _seen_mark[0]:
            _known.clear()
            _seen_mark[0] = mark
        if (project, name) in _known:
            return
    fw = clients.firewalls()
    try:
        call(fw.get, action=f"firewall {name}", project=project, firewall=name)
    except Exception as exc:
        if not is_not_found(exc.__cause__ or exc):
            raise
        try:
            op = call(fw.insert_unary, action=f"create firewall {name}", project=project,
                      firewall_resource=compute_v1.Firewall(body))
            wait(clients, project, op, deadline=deadline, action=f"create firewall {name}")
        except Exception as exc2:
            if "alreadyExists" not in str(exc2) and "already exists" not in str(exc2):
                raise
    with _lock:
        _known.add((project, name))


def ensure_firewall(clients: Any, project: str, settings: GCPSettings, *,
                    timeout: float = 300.0) -> None:
    """The network's SSH and internal rules exist (see the module docstring)."""
    deadline = time.monotonic() + timeout
    net = settings.network.rsplit("/", 1)[-1]
    url = network_url(project, settings.network)
    _ensure_rule(clients, project, {
        "name": f"launcher-{net}-ssh"[:63], "network": url, "direction": "INGRESS",
        "allowed": [{"I_p_protocol": "tcp", "ports": ["22"]}],
        "source_ranges": [settings.ssh_cidr], "target_tags": [NODE_TAG],
    }, deadline)
    _ensure_rule(clients, project, {
        "name": f"launcher-{net}-internal"[:63], "network": url, "direction": "INGRESS",
        "allowed": [{"I_p_protocol": p} for p in ("tcp", "udp", "icmp")],
        "source_tags": [NODE_TAG], "target_tags": [NODE_TAG],
    }, deadline)


def ports_rule_name(label: str) -> str:
    return f"launcher-{label}-ports"[:63].rstrip("-")


def create_ports_rule(clients: Any, project: str, settings: GCPSettings, label: str,
                      ports: tuple[str, ...], *, timeout: float = 300.0) -> None:
    """Open the task's `ports` (e.g. "8080", "9000-9010") to the cluster's tag."""
    _ensure_rule(clients, project, {
        "name": ports_rule_name(label), "network": network_url(project, settings.network),
        "direction": "INGRESS", "allowed": [{"I_p_protocol": "tcp", "ports": list(ports)}],
        "source_ranges": ["0.0.0.0/0"], "target_tags": [cluster_tag(label)],
    }, time.monotonic() + timeout)


def forget(project: str, name: str, *, everywhere: bool = False) -> None:
    """Rule `name` was deleted: look it up again before relying on it. `everywhere`:
    in every launcher process of this LAUNCHER_HOME too (a shared rule)."""
    with _lock:
        _known.discard((project, name))
    if everywhere:
        path = _mark_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
