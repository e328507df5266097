"""Offers = the catalog's rows plus the live offers of the user's SSH node pools, Slurm
clusters (`sinfo`/`scontrol` on each cluster's login node) and Kubernetes contexts (their
nodes), plus the plan-only offers of a task that names kubernetes where no kubeconfig
context exists (`kubernetes_offers`).

The catalog never imports a cloud module: the pools' offers are read here (from
`launcher.clouds.ssh`, only when a config file exists) and handed to
`launcher.catalog.query.offers(..., live=...)`. Blocking only on local reads.
Raises ConfigError for a malformed config file.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.catalog.offer import Offer
    from launcher.task.resources import ResourceCandidate

SSH_CLOUD = "ssh"


def pool_offers() -> list[Offer]:
    """One offer per SSH node pool in `config.yaml` (none without a config file)."""
    from launcher.config.settings import config_path

    if not config_path().exists():
        return []
    from launcher.clouds.ssh import ssh_offers

    return ssh_offers()


SLURM_CLOUD = "slurm"


def slurm_cluster_offers() -> list[Offer]:
    """Offers read live from the Slurm clusters in `config.yaml` (none without one)."""
    from launcher.config.settings import config_path, load_config

    if not config_path().exists() or not load_config().slurm.clusters:
        return []
    from launcher.clouds.slurm.offers import slurm_offers

    return slurm_offers()


KUBERNETES = "kubernetes"


def kubernetes_configured() -> bool:
    """A kubeconfig exists (or launcher runs in a pod): the `kubernetes` cloud's presence."""
    from launcher.clouds.presence import credentials_present

    found = credentials_present(KUBERNETES)
    return bool(found and found.enabled)


def kubernetes_ranked_by_default() -> bool:
    """Whether the contexts' nodes are planned for a task that names no cloud: only when
    config.yaml lists them (`kubernetes.allowed_contexts`), as Slurm clusters are listed
    in `slurm:`. A kubeconfig alone (often with a stale current context) must not make
    every `cost`, `--dryrun` and launch load the SDK and wait on an API server; a task that
    names kubernetes still uses the current context."""
    if not kubernetes_configured():
        return False
    from launcher.config.settings import load_config

    try:
        return bool(load_config().kubernetes.allowed_contexts)
    except Exception:  # a malformed config is reported where the launch reads it
        return False


def kubernetes_cluster_offers() -> list[Offer]:
    """Offers read live from the nodes of the usable Kubernetes contexts (none without a
    kubeconfig or the SDK)."""
    if not kubernetes_configured():
        return []
    from launcher.clouds.kubernetes.offers import kubernetes_offers as live

    return live()


def kubernetes_largest_nodes(contexts: Collection[str | None]) -> str:
    """"Largest node of Kubernetes context ctx-a: gpu-1 (8x H100, 96 vCPUs, 1024 GiB)."
    for the named contexts (None: every usable one), from the cached node lists; ""
    without a kubeconfig or when no context answers."""
    if not kubernetes_configured():
        return ""
    from launcher.clouds.base import CloudError
    from launcher.clouds.kubernetes.api import contexts as usable
    from launcher.clouds.kubernetes.offers import largest_node, nodes

    lines = []
    try:
        ctxs = usable()
    except CloudError:
        return ""
    for ctx in ctxs:
        if None in contexts or ctx.name in contexts:
            try:
                lines.append(f"Largest node of Kubernetes context {ctx.name}: "
                             f"{largest_node(nodes(ctx))}.")
            except CloudError:
                continue
    return " ".join(lines)


def kubernetes_gpu_nodes() -> list[dict[str, object]]:
    """Per Kubernetes context and GPU node type: {context, accelerator, gpus_per_node,
    nodes, free, total} (free: GPUs no live pod requests); [] without a kubeconfig."""
    if not kubernetes_configured():
        return []
    from dataclasses import asdict

    from launcher.clouds.kubernetes.offers import gpu_node_summary

    return [asdict(r) for r in gpu_node_summary()]


def pool_regions() -> list[str]:
    """The pool names (the ssh cloud's regions), sorted."""
    return sorted({o.region for o in pool_offers()})


def catalog_offers(
    accelerators: Collection[str] | None = None, clouds: Collection[str] | None = None
) -> list[Offer]:
    """`query.offers(accelerators, clouds)` with the SSH pools' offers handed in (read
    only when the clouds asked for include ssh)."""
    from launcher.catalog import query

    wanted = None if clouds is None else {c.lower() for c in clouds}
    live = pool_offers() if wanted is None or SSH_CLOUD in wanted else []
    if wanted is None or SLURM_CLOUD in wanted:
        live = live + slurm_cluster_offers()
    if wanted is not None and KUBERNETES in wanted:  # asks the API servers: only when named
        live = live + kubernetes_cluster_offers()
    return query.offers(accelerators=accelerators, clouds=clouds, live=live)


# Why a request-derived Kubernetes placement is not enabled: no context to launch in.
KUBERNETES_NOT_LAUNCHABLE = ("no Kubernetes context: no kubeconfig (KUBECONFIG, ~/.kube/config) "
                             "and not running in a pod")
# The region of a Kubernetes placement when the task names no context.
IN_CLUSTER = "in-cluster"


def kubernetes_offers(cands: Sequence[ResourceCandidate]) -> list[Offer]:
    """Offers for the candidates that name kubernetes (none otherwise): the contexts'
    live offers when a kubeconfig exists (kubernetes_cluster_offers), else plan-only
    ones derived from the request, as follows.

    A user's own cluster has no price catalog, so each offer is the request itself: the
    asked accelerator and count, vCPUs and memory, in the named context (region) or
    `in-cluster`; instance type `pod` unless one is named; on-demand price 0 (unknown:
    shown as "-"), no spot market, no fabric data. The optimizer serves such an offer
    only to a candidate naming kubernetes (NAMED_ONLY_CLOUDS); planning marks it not
    enabled (KUBERNETES_NOT_LAUNCHABLE)."""
    from launcher.catalog.offer import KUBERNETES_CLOUD, Offer

    if not any(c.cloud == KUBERNETES_CLOUD for c in cands):
        return []
    if kubernetes_configured():
        return kubernetes_cluster_offers()
    out: dict[Offer, None] = {}
    for c in cands:
        if c.cloud != KUBERNETES_CLOUD:
            continue
        offer = Offer(
            cloud=KUBERNETES_CLOUD, region=c.region or IN_CLUSTER, zone=c.zone,
            instance_type=c.instance_type or "pod", accelerator=c.accelerator,
            accelerator_count=c.accelerator_count if c.accelerator is not None else 0.0,
            accelerator_memory_gib=None, vcpus=c.cpus, memory_gib=c.memory_gib,
            price=0.0, spot_price=None, fabric=None, fabric_gbps=None, nvlink=None,
            max_nodes=None, arch="x86_64",
            source="derived from the task (a Kubernetes cluster has no price catalog)",
            fetched_at="",
        )  # fmt: skip
        out[offer] = None
    return list(out)
