"""The firewall rules network.py creates once per VPC network and shares between clusters
(`launcher-<network>-ssh`, `launcher-<network>-internal`, aimed at the `launcher` network
tag), found and deleted on demand (`launcher clouds cleanup gcp`; `down` never deletes
them). They are project-wide (no region). In use while any launcher instance (labelled
with a cluster, any status but deleted) exists in the project. The per-cluster
`launcher-<cluster>-ports` rules are deleted with their cluster and are not listed.
SSH keys go into each instance's own metadata (gone with it), never the project's.
"""

from __future__ import annotations

import re
import time
from typing import Any

from launcher.clouds.base import Leftover
from launcher.clouds.gcp.errors import CLOUD
from launcher.clouds.gcp.ops import Sleep, call
from launcher.clouds.gcp.teardown import delete_ports_rule

FIREWALL_RULE = "firewall rule"
_SHARED_RULE = re.compile(r"launcher-.+-(ssh|internal)\Z")


def leftovers(clients: Any, project: str, users: dict[str, list[str]]) -> list[Leftover]:
    """The project's shared launcher firewall rules; `users`: cluster -> its instances
    (SupportsOrphans.list_tagged_clusters), which keep every rule in use."""
    from launcher.clouds.gcp.network import NODE_TAG

    rules = call(lambda: list(clients.firewalls().list(project=project)),
                 action="list firewall rules")
    names = sorted(n for insts in users.values() for n in insts)
    why = None
    if names:
        more = f" and {len(names) - 3} more" if len(names) > 3 else ""
        why = f"used by instance(s) {', '.join(names[:3])}{more}"
    out = []
    for rule in rules:
        name = str(rule.name)
        if _SHARED_RULE.match(name) and list(rule.target_tags) == [NODE_TAG]:
            network = str(rule.network).rsplit("/", 1)[-1]
            out.append(Leftover(CLOUD, FIREWALL_RULE, f"{name} (network {network})", name,
                                None, why))
    return out


def delete(clients: Any, project: str, item: Leftover, *, timeout: float, poll: float,
           sleep: Sleep = time.sleep) -> None:
    """Delete one listed rule (gone already is fine) and forget that it exists."""
    from launcher.clouds.gcp.network import forget

    delete_ports_rule(clients, project, item.id, deadline=time.monotonic() + timeout,
                      poll=poll, sleep=sleep)
    forget(project, item.id, everywhere=True)
