"""Finding and deleting a cluster's instances, placement policy and ports rule.

- `zone_instances`: the cluster's instances in a zone (`instances.list` filtered by the
  `launcher-cluster` label, every page);
- `all_instances`: the same over every zone (`instances.aggregatedList`), for a cluster
  with no record and for the orphan listing;
- `teardown_zone`: delete every instance of the cluster in the zone (any status),
  wait for each delete operation, then until the zone lists none (idempotent: nothing
  found, nothing done);
- `delete_policy` / `delete_ports_rule`: after the instances are gone (a policy in use
  cannot be deleted); a 404 counts as deleted.
Blocking up to `deadline` (monotonic); raises typed CloudErrors.
"""

from __future__ import annotations

import time
from typing import Any

from launcher.clouds.base import CloudError
from launcher.clouds.gcp.errors import CLOUD, is_not_found
from launcher.clouds.gcp.ops import Sleep, call, wait
from launcher.clouds.gcp.provision import CLUSTER_LABEL, label_value


def label_filter(cluster: str) -> str:
    return f'labels.{CLUSTER_LABEL} = "{label_value(cluster)}"'


def zone_instances(clients: Any, project: str, zone: str, cluster: str) -> list[Any]:
    from google.cloud import compute_v1

    request = compute_v1.ListInstancesRequest(project=project, zone=zone,
                                              filter=label_filter(cluster))
    pager = call(lambda: clients.instances().list(request=request), action="list instances",
                 zone=zone)
    return call(lambda: list(pager), action="list instances", zone=zone)


def zone_tagged_instances(clients: Any, project: str, zone: str) -> list[Any]:
    """Every instance in `zone` that carries launcher's cluster label (one paged
    `instances.list`: the batched view of many clusters, `GCPCloud.query_many`)."""
    from google.cloud import compute_v1

    request = compute_v1.ListInstancesRequest(project=project, zone=zone,
                                              filter=f"labels.{CLUSTER_LABEL}:*")
    pager = call(lambda: clients.instances().list(request=request), action="list instances",
                 zone=zone)
    return call(lambda: list(pager), action="list instances", zone=zone)


def all_instances(clients: Any, project: str, filter_: str) -> dict[str, list[Any]]:
    """zone -> instances matching `filter_`, over every zone of the project."""
    def run() -> dict[str, list[Any]]:
        from google.cloud import compute_v1

        out: dict[str, list[Any]] = {}
        request = compute_v1.AggregatedListInstancesRequest(project=project, filter=filter_)
        for scope, scoped in clients.instances().aggregated_list(request=request):
            insts = list(getattr(scoped, "instances", None) or [])
            if insts:
                out[scope.rsplit("/", 1)[-1]] = insts
        return out
    return call(run, action="list instances")


def teardown_zone(clients: Any, project: str, zone: str, cluster: str, *, deadline: float,
                  poll: float, sleep: Sleep = time.sleep) -> None:
    """Delete the cluster's instances in `zone` and wait until they are gone."""
    insts = zone_instances(clients, project, zone, cluster)
    ops = []
    for inst in insts:
        try:
            ops.append(call(lambda name=inst.name: clients.instances().delete_unary(
                project=project, zone=zone, instance=name),
                action=f"delete instance {inst.name}", zone=zone, sleep=sleep))
        except CloudError as exc:
            if not is_not_found(exc.__cause__ or exc):
                raise
    for op in ops:
        try:
            wait(clients, project, op, deadline=deadline, action="delete instance", zone=zone,
                 poll=poll, sleep=sleep)
        except CloudError as exc:
            if "notFound" not in str(exc) and "RESOURCE_NOT_FOUND" not in str(exc):
                raise
    while True:
        left = zone_instances(clients, project, zone, cluster)
        if not left:
            return
        if time.monotonic() >= deadline:
            raise CloudError(f"instances of {cluster} not deleted in time: "
                             + ", ".join(f"{i.name}={i.status}" for i in left),
                             cloud=CLOUD, zone=zone)
        sleep(poll)


def delete_policy(clients: Any, project: str, region: str, name: str, *, deadline: float,
                  poll: float, sleep: Sleep = time.sleep) -> None:
    try:
        op = call(lambda: clients.resource_policies().delete_unary(
            project=project, region=region, resource_policy=name),
            action=f"delete placement policy {name}", region=region, sleep=sleep)
        wait(clients, project, op, deadline=deadline, action=f"delete placement policy {name}",
             region=region, poll=poll, sleep=sleep)
    except CloudError as exc:
        if not (is_not_found(exc.__cause__ or exc) or "notFound" in str(exc)):
            raise


def delete_ports_rule(clients: Any, project: str, name: str, *, deadline: float,
                      poll: float, sleep: Sleep = time.sleep) -> None:
    try:
        op = call(lambda: clients.firewalls().delete_unary(project=project, firewall=name),
                  action=f"delete firewall {name}", sleep=sleep)
        wait(clients, project, op, deadline=deadline, action=f"delete firewall {name}",
             poll=poll, sleep=sleep)
    except CloudError as exc:
        if not (is_not_found(exc.__cause__ or exc) or "notFound" in str(exc)):
            raise
