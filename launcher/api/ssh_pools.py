"""SSH node pools as the user sees them: every host's state (free, held by a cluster,
quarantined until when and why), and releasing a quarantined host the user fixed.

Blocking: listing probes quarantined hosts that are due for it (a TCP banner read
each, bounded; see launcher/clouds/ssh_hosts.py) and releases those that answer.
Raises ConfigError for a malformed config.yaml, InvalidRequestError (from
launcher.clouds.base) for an unknown pool or host or a host a cluster holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from launcher.clouds.ssh_hosts import HostState

__all__ = ["HostState", "PoolView", "ssh_pools", "ssh_release"]


@dataclass(frozen=True)
class PoolView:
    name: str
    hosts: tuple[HostState, ...]

    def count(self, state: str) -> int:
        return sum(h.state == state for h in self.hosts)

    def to_json(self) -> dict[str, object]:
        return {"pool": self.name, "hosts": [h.to_json() for h in self.hosts]}


def ssh_pools(probe: bool = True) -> list[PoolView]:
    """Every pool of config.yaml (config order) with each host's state. With `probe`,
    quarantined hosts due for a probe are probed first and released if sshd answers."""
    import time

    from launcher.clouds.ssh_hosts import all_pools, host_states, release_answering
    from launcher.clouds.ssh_pool_state import PoolStateFile

    pools = all_pools()
    if not pools:
        return []
    store = PoolStateFile()
    if probe:
        release_answering(store, pools)
    states = host_states(pools, store.read(), time.time())
    return [PoolView(p.name, tuple(h for h in states if h.pool == p.name)) for p in pools]


def ssh_release(pool: str, host: str) -> HostState:
    """Release a quarantined host of `pool` now (the user fixed it); `host` is host:port,
    or the host name when it is unique in the pool. Idempotent. Returns its new state."""
    from launcher.clouds.ssh_hosts import release_host
    from launcher.clouds.ssh_pool_state import PoolStateFile

    return release_host(PoolStateFile(), pool, host)
