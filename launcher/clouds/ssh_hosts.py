"""Per-host state of the SSH node pools, and releasing hosts from quarantine.

A host of a pool is, at any time, one of:
- `free`: no cluster holds it and it is not quarantined;
- `held`: a cluster holds it (`cluster`);
- `quarantined`: it was confirmed lost while `cluster` held it (ssh_health), and no
  cluster may take it until `until` (epoch seconds), with the `reason`.

A quarantined host leaves quarantine early when
- the user releases it (`release_host`, `launcher ssh release POOL HOST`) after fixing it;
- its sshd answers again (`release_answering`): quarantined hosts are probed when a
  pool falls short of free hosts for a launch and whenever the hosts are listed
  (`launcher ssh pools`, `launcher check`), once they have been quarantined for
  `HealthSettings.reprobe_after_s` (default 60 s, so a flapping host is not re-taken
  at once).
Either way the host's entry is kept with `until` = now: the next cluster that takes it
first stops whatever the old cluster left running there (SSHCloud._clean_reused).

Functions take the pool store (`launcher.clouds.ssh_pool_state.PoolStateFile`:
`read()` and `locked()`, or a stand-in); nothing here imports ssh.py. Blocking (probes
are TCP banner reads bounded by a timeout, run in parallel); raise ConfigError for a
malformed config and InvalidRequestError for an unknown pool or host.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from launcher.clouds.base import InvalidRequestError
from launcher.clouds.ssh_health import HealthSettings, quarantine_active, sshd_reachable
from launcher.clouds.ssh_pool_state import PoolState
from launcher.config.settings import SSHHost, SSHNodePool, config_path, load_config

FREE, HELD, QUARANTINED = "free", "held", "quarantined"
_MAX_PARALLEL = 16


class PoolStore(Protocol):
    def read(self) -> PoolState: ...
    def locked(self) -> AbstractContextManager[PoolState]: ...


@dataclass(frozen=True)
class HostState:
    """One host of a pool as `launcher ssh pools` shows it."""

    pool: str
    address: str  # host:port
    state: str  # FREE | HELD | QUARANTINED
    cluster: str | None = None  # held by / lost while held by
    since: float | None = None  # quarantined since (epoch seconds)
    until: float | None = None  # quarantined until (epoch seconds)
    reason: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"pool": self.pool, "host": self.address, "state": self.state,
                "cluster": self.cluster, "since": self.since, "until": self.until,
                "reason": self.reason}


def host_states(pools: Sequence[SSHNodePool], state: PoolState, now: float) -> list[HostState]:
    """Every host of `pools`, in config order, with its state at `now`."""
    holder = {h: a.cluster for a in state.allocations.values() for h in a.hosts}
    out = []
    for pool in pools:
        for host in pool.hosts:
            addr = host.address
            entry = state.quarantine.get(addr)
            if addr in holder:
                out.append(HostState(pool.name, addr, HELD, cluster=holder[addr]))
            elif entry is not None and quarantine_active(entry, now):
                out.append(HostState(
                    pool.name, addr, QUARANTINED, cluster=_str(entry.get("cluster")),
                    since=_num(entry.get("since")), until=_num(entry.get("until")),
                    reason=_str(entry.get("reason"))))
            else:
                out.append(HostState(pool.name, addr, FREE))
    return out


REPROBE_TIMEOUT_S = 5.0  # seconds a quarantined host's sshd gets to answer a re-probe


def release_answering(store: PoolStore, pools: Sequence[SSHNodePool],
                      settings: HealthSettings | None = None) -> list[str]:
    """Probe the quarantined hosts of `pools` (quarantined at least
    `settings.reprobe_after_s`) and release those whose sshd answers. Returns the
    released addresses."""
    settings = settings or HealthSettings.from_env()
    now = time.time()
    state = store.read()
    due: list[SSHHost] = []
    for pool in pools:
        for host in pool.hosts:
            entry = state.quarantine.get(host.address)
            if entry is None or not quarantine_active(entry, now) or entry.get("health"):
                continue  # a host that failed the health watch answers, and stays out
            since = _num(entry.get("since")) or 0.0
            if now - since >= settings.reprobe_after_s:
                due.append(host)
    if not due:
        return []
    with ThreadPoolExecutor(min(_MAX_PARALLEL, len(due))) as ex:
        # a generous timeout: this one probe decides whether a host comes back, and a
        # loaded host's sshd can take seconds to send its banner (dead ones cost it in parallel)
        answers = list(ex.map(lambda h: sshd_reachable(h.host, h.port, timeout=REPROBE_TIMEOUT_S),
                              due))
    back = [h.address for h, ok in zip(due, answers, strict=True) if ok]
    released = []
    with store.locked() as fresh:
        for addr in back:
            if _release(fresh, addr, "its sshd answered again", time.time()):
                released.append(addr)
    return released


def release_host(store: PoolStore, pool_name: str, host: str) -> HostState:
    """The user fixed a quarantined host: make it free now. `host` is `host:port`, or
    the host name alone when only one host of the pool has it. Idempotent (a free host
    stays free). Raises InvalidRequestError for an unknown pool or host, or a host a
    cluster holds (`launcher down` gives it back)."""
    pools = load_config().ssh_node_pools
    pool = pools.get(pool_name)
    if pool is None:
        known = ", ".join(sorted(pools)) or "none configured"
        raise InvalidRequestError(
            f"No SSH node pool named {pool_name!r} in {config_path()} (pools: {known}).",
            cloud="ssh")
    target = _find_host(pool, host)
    with store.locked() as state:
        for a in state.allocations.values():
            if target.address in a.hosts:
                raise InvalidRequestError(
                    f"Host {target.address} of pool {pool.name!r} is held by cluster "
                    f"{a.cluster!r}, not quarantined: `launcher down {a.cluster}` gives it back.",
                    cloud="ssh", region=pool.name)
        _release(state, target.address, "released by the user", time.time())
        now = time.time()
        return host_states([pool], state, now)[list(pool.hosts).index(target)]


def _find_host(pool: SSHNodePool, host: str) -> SSHHost:
    exact = [h for h in pool.hosts if h.address == host]
    if exact:
        return exact[0]
    by_name = [h for h in pool.hosts if h.host == host]
    if len(by_name) == 1:
        return by_name[0]
    listed = ", ".join(h.address for h in pool.hosts)
    if by_name:
        raise InvalidRequestError(
            f"Pool {pool.name!r} has several hosts named {host!r} ({listed}): give host:port.",
            cloud="ssh", region=pool.name)
    raise InvalidRequestError(
        f"Pool {pool.name!r} has no host {host!r} (hosts: {listed}).", cloud="ssh",
        region=pool.name)


def _release(state: PoolState, address: str, why: str, now: float) -> bool:
    """End the quarantine of `address` at `now` (kept as a cleanup marker). True when it
    was in force."""
    entry = state.quarantine.get(address)
    if entry is None or not quarantine_active(entry, now):
        return False
    entry["until"] = now
    entry["reason"] = f"{entry.get('reason', '')}; released: {why}".lstrip("; ")
    return True


def all_pools() -> list[SSHNodePool]:
    """The pools of config.yaml, in config order ([] without a config file)."""
    if not config_path().exists():
        return []
    return list(load_config().ssh_node_pools.values())


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) else None


def _str(x: object) -> str | None:
    return str(x) if x is not None and x != "" else None
