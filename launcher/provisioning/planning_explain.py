"""Why a task has no placement: one sentence per resource alternative, naming what no
offer has (the accelerator, the instance type, the location) or the first requirement the
closest offers miss (cpus, memory, market, gang size, fabric, cost, blocked). Pure: it
reads the offers and the optimizer's failure kinds, and does no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from launcher.catalog.money import format_money
from launcher.catalog.offer import WHOLE_HOST_CLOUDS, Offer
from launcher.optimizer.ranking import (
    LOCAL_CLOUD,
    Blocked,
    Failure,
    candidate_failures,
    failure_key,
    fmt_count,
)
from launcher.task.resources import ResourceCandidate


def describe_candidate(c: ResourceCandidate, num_nodes: int) -> str:
    """ "3 spot nodes of H100:8 on vast with infiniband" — what one candidate asks for."""
    nodes = f"{num_nodes} {'spot ' if c.use_spot else ''}node{'s' if num_nodes != 1 else ''}"
    parts = [
        f"{nodes} of {c.accelerator}:{fmt_count(c.accelerator_count)}" if c.accelerator else nodes
    ]
    if c.instance_type:
        parts.append(f"of type {c.instance_type}")
    if c.cpus is not None:
        parts.append(f"with {fmt_count(c.cpus)}{'+' if c.cpus_at_least else ''} vCPUs")
    if c.memory_gib is not None:
        parts.append(f"with {fmt_count(c.memory_gib)}{'+' if c.memory_at_least else ''} GiB memory")
    if c.cloud:
        parts.append(f"on {c.cloud}")
    if c.region:
        parts.append(f"in {c.region}")
    if c.zone:
        parts.append(f"in zone {c.zone}")
    if c.network is not None and num_nodes > 1:
        if c.network.fabric == "rdma":
            parts.append("with an RDMA fabric")
        elif c.network.fabric == "best":
            parts.append("with a GPU fabric (network_tier: best)")
        elif c.network.fabric != "any":
            parts.append(f"with {c.network.fabric}")
        if c.network.min_gbps is not None:
            parts.append(f"at {fmt_count(c.network.min_gbps)}+ Gbps")
    if c.max_hourly_cost is not None:
        parts.append(f"under {format_money(c.max_hourly_cost)}/h")
    return " ".join(parts)


_SHAPE_KINDS = frozenset({"accelerator", "instance_type", "location"})


def explain_no_placement(
    num_nodes: int,
    cands: Sequence[ResourceCandidate],
    offers: Sequence[Offer],
    blocked: Blocked = Blocked(),
    include_local: bool = False,
) -> str:
    """One paragraph saying, per candidate, which constraint(s) no offer meets.

    For each candidate: the offers of its accelerator, in its cloud/region/zone and of
    its per-node count are "the right shape". If there are none, say what shapes exist.
    Otherwise, per cloud, name what keeps its closest offers out (fewest failed checks):
    "no offer with 3 nodes of H100:8 on vast with infiniband: vast offers max 1 node and
    no fabric data".
    """
    if not cands:
        return "The task has no resource candidates."
    clauses: list[str] = []
    seen: set[str] = set()
    for c in sorted(cands, key=lambda c: c.preference):
        desc = describe_candidate(c, num_nodes)
        if desc in seen:
            continue
        seen.add(desc)
        clauses.append(
            f"no offer with {desc}: {explain_candidate(c, num_nodes, offers, blocked, include_local)}"
        )
    text = "; ".join(clauses)
    return text[0].upper() + text[1:] + "."


def explain_candidate(
    c: ResourceCandidate,
    num_nodes: int,
    offers: Sequence[Offer],
    blocked: Blocked,
    include_local: bool,
) -> str:
    if c.cloud == _SSH_CLOUD:
        from launcher.provisioning.offers import pool_regions

        # every pool (the rows read for this task may be only some GPU's)
        pools = pool_regions()
        if not pools or (c.region is not None and c.region not in pools):
            return _no_ssh_pool(c.region, pools)
    if c.accelerator is not None:
        same_acc = [o for o in offers if o.accelerator == c.accelerator]
        what = c.accelerator
    elif c.instance_type is not None:
        same_acc = [o for o in offers if o.instance_type == c.instance_type]
        what = f"instance type {c.instance_type}"
    else:
        # a host of the user's own pool serves a CPU-only task whatever its GPUs
        same_acc = [o for o in offers if o.accelerator is None or o.cloud in WHOLE_HOST_CLOUDS]
        what = "CPU-only instances"
    if not same_acc:
        return _nothing_of(c, what, offers)
    # Offers with equal failure keys fail identically: work per group, not per offer.
    keyer = failure_key(c, blocked)
    groups: dict[tuple[object, ...], tuple[list[Failure], list[Offer]]] = {}
    for o in same_acc:
        k = keyer(o)
        g = groups.get(k)
        if g is None:
            groups[k] = (candidate_failures(o, c, num_nodes, blocked, include_local), [o])
        else:
            g[1].append(o)
    group_list = list(groups.values())
    shaped = [(fs, offs) for fs, offs in group_list if not any(f.kind in _SHAPE_KINDS for f in fs)]
    if not shaped:
        return _explain_shape(c, same_acc, group_list, what)
    by_cloud: dict[str, list[tuple[list[str], list[Offer]]]] = {}
    for fs, offs in shaped:
        by_cloud.setdefault(offs[0].cloud, []).append(([f.kind for f in fs], offs))
    parts = []
    for cloud, rows in sorted(by_cloud.items()):
        fewest = min(len(kinds) for kinds, _ in rows)
        kinds_in_order: list[str] = []
        for kinds, _ in rows:
            if len(kinds) == fewest:
                kinds_in_order.extend(k for k in kinds if k not in kinds_in_order)
        cloud_offers = [o for _, offs in rows for o in offs]
        phrases = [
            _phrase(kind, c, num_nodes, cloud_offers) for kind in _ordered_kinds(kinds_in_order)
        ]
        parts.append(f"{cloud} offers {' and '.join(phrases)}")
    return "; ".join(parts)


_SSH_CLOUD = "ssh"  # = launcher.catalog.query.SSH_CLOUD: its offers are config.yaml's pools


def _no_ssh_pool(pool: str | None, pools: Sequence[str]) -> str:
    """The `ssh` cloud's offers are the pools declared in config.yaml: say which is missing."""
    from launcher.state.db import launcher_home

    config = launcher_home() / "config.yaml"
    if pools:
        return f"there is no SSH node pool '{pool}' (declared in {config}: {', '.join(pools)})"
    return (
        f"no SSH node pool is declared: add `ssh_node_pools` to {config} (see docs/ssh-pools.md)"
    )


def _nothing_of(c: ResourceCandidate, what: str, offers: Sequence[Offer]) -> str:
    """Why no offer has the candidate's accelerator / instance type / CPU-only shape at
    all; scoped to the candidate's cloud (the rows read were) when it names one."""
    if c.cloud == _SSH_CLOUD:  # the user's own machines: no catalog involved
        from launcher.provisioning.offers import pool_offers

        pools = "; ".join(
            f"{o.region}: {_host_shape(o)}" for o in sorted(pool_offers(), key=lambda o: o.region))
        return f"no SSH node pool has {what}" + (f" (pools: {pools})" if pools else "")
    if c.accelerator is None and c.instance_type is not None:
        from launcher.task.fields import close_matches

        close = close_matches(c.instance_type, {o.instance_type for o in offers})
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        return f"{c.cloud or 'the catalog'} has no {what}{hint}"
    if c.accelerator is None and c.cloud is not None:
        from launcher.catalog import query

        others = [x for x in query.cpu_only_clouds() if x not in (c.cloud, LOCAL_CLOUD)]
        elsewhere = f" (they are on {', '.join(others)})" if others else ""
        return f"the catalog has no CPU-only instances on {c.cloud}{elsewhere}"
    return f"the catalog has no {what}"


def _host_shape(o: Offer) -> str:
    gpus = f"{o.accelerator}:{fmt_count(o.accelerator_count)}" if o.accelerator else "no GPU"
    cpus = f", {fmt_count(o.vcpus)} vCPUs" if o.vcpus is not None else ""
    return f"{o.max_nodes or 0} host(s) with {gpus}{cpus}"


_KIND_ORDER = ("cpus", "memory", "market", "gang", "fabric", "bandwidth", "cost", "blocked")


def _ordered_kinds(kinds: Iterable[str]) -> list[str]:
    present = set(kinds)
    return [k for k in _KIND_ORDER if k in present]


def _phrase(kind: str, c: ResourceCandidate, num_nodes: int, offers: Sequence[Offer]) -> str:
    """What `offers` (one cloud's right-shaped rows) have, for one failed constraint kind."""
    if kind == "gang":
        limits = [o.max_nodes for o in offers if o.max_nodes is not None]
        most = max(limits) if limits else 0
        return f"max {most} node{'s' if most != 1 else ''}"
    if kind == "fabric":
        known = sorted({o.fabric for o in offers if o.fabric is not None})
        if not known:
            return "no fabric data"
        return f"fabric {'/'.join(known)} only" + (
            " (others unknown)" if any(o.fabric is None for o in offers) else ""
        )
    if kind == "bandwidth":
        known_gbps = [o.fabric_gbps for o in offers if o.fabric_gbps is not None]
        if not known_gbps:
            return "no bandwidth data"
        return f"at most {fmt_count(max(known_gbps))} Gbps"
    if kind == "market":
        return "no spot price" if c.use_spot else "no on-demand price"
    if kind == "cost":
        prices = [p for o in offers if (p := o.hourly_price(c.use_spot)) is not None]
        cheapest = min(prices) * num_nodes if prices else 0.0
        cap = c.max_hourly_cost or 0.0
        return f"nothing under max_hourly_cost {format_money(cap)} (cheapest {format_money(cheapest)}/h)"
    if kind in ("cpus", "memory"):
        unit = "vCPUs" if kind == "cpus" else "GiB memory"
        vals = sorted(
            {v for o in offers if (v := o.vcpus if kind == "cpus" else o.memory_gib) is not None}
        )
        if not vals:
            return f"no {unit} data"
        at_least = c.cpus_at_least if kind == "cpus" else c.memory_at_least
        if at_least:
            return f"at most {fmt_count(vals[-1])} {unit}"
        if len(vals) <= 6:
            return f"{', '.join(fmt_count(v) for v in vals)} {unit} only"
        return f"{fmt_count(vals[0])} to {fmt_count(vals[-1])} {unit}, none exactly as asked"
    if kind == "blocked":
        return "only blocked places"
    return kind


def _explain_shape(
    c: ResourceCandidate,
    same_acc: Sequence[Offer],
    groups: Sequence[tuple[Sequence[Failure], Sequence[Offer]]],
    what: str,
) -> str:
    """Nothing has the right accelerator count / type / location: say what exists."""
    where_ok = [
        o
        for fs, offs in groups
        if not any(f.kind in ("location", "instance_type") for f in fs)
        for o in offs
    ]
    if not where_ok:
        clouds = sorted(
            {o.cloud for o in same_acc if o.cloud != LOCAL_CLOUD or c.cloud == LOCAL_CLOUD}
        )
        if c.cloud is not None and c.region is None and c.zone is None and c.instance_type is None:
            return f"{c.cloud} has no {what}" + (
                f" ({what} is on {', '.join(clouds)})" if clouds else ""
            )
        first_loc = next(
            f.reason for fs, _ in groups for f in fs if f.kind in ("location", "instance_type")
        )
        where = [p for p in (c.cloud, c.region, c.zone) if p]
        place = "/".join(where) if where else "the requested place"
        extra = f" ({what} is on {', '.join(clouds)})" if clouds else ""
        if c.instance_type is not None and c.accelerator is not None:
            return f"no {c.instance_type} with {what} in {place}{extra}"
        return f"{place} has no {what}{extra}" if where else first_loc
    counts = sorted({o.accelerator_count for o in where_ok})
    scope = f" on {c.cloud}" if c.cloud else ""
    if c.accelerator is None:
        return f"no CPU-only instance{scope} matches"
    return (
        f"{c.accelerator} comes{scope} in {', '.join(fmt_count(n) for n in counts)} per node, "
        f"not {fmt_count(c.accelerator_count)}"
    )
