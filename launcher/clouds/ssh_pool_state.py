"""The `ssh` cloud's allocation record: `$LAUNCHER_HOME/ssh_pools.json`.

Which hosts each cluster holds (`Allocation`), the host keys learnt on first contact
and the quarantined hosts (`PoolState`), read and written under an exclusive fcntl
lock on `ssh_pools.lock` (`PoolStateFile`). Used by launcher.clouds.ssh (the cloud)
and launcher.clouds.ssh_hosts (per-host states, releasing quarantined hosts); imports
neither. A malformed file raises ConfigError naming it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from launcher.clouds.base import NodeInfo
from launcher.clouds.ssh_health import quarantine_active
from launcher.config.settings import launcher_home
from launcher.errors import ConfigError

_STATE_VERSION = 1


@dataclass
class Allocation:
    """Hosts held by one cluster. `nodes` is filled once provisioning succeeded."""

    cluster: str
    pool: str
    hosts: list[str]  # SSHHost.address, rank order
    key_path: str  # the identity file the client uses
    ready: bool = False
    nodes: list[NodeInfo] = field(default_factory=list)


@dataclass
class PoolState:
    allocations: dict[str, Allocation] = field(default_factory=dict)
    host_keys: dict[str, str] = field(default_factory=dict)  # "host:port" -> "type base64"
    # address -> {"cluster", "since", "until", "reason"}: hosts confirmed lost (ssh_health)
    quarantine: dict[str, dict[str, object]] = field(default_factory=dict)

    def held_hosts(self) -> set[str]:
        return {h for a in self.allocations.values() for h in a.hosts}

    def unavailable_hosts(self, now: float) -> set[str]:
        """Hosts no new cluster may take: held by a cluster, or quarantined."""
        return self.held_hosts() | {
            h for h, e in self.quarantine.items() if quarantine_active(e, now)
        }

    def to_json(self) -> str:
        doc = {
            "version": _STATE_VERSION,
            "allocations": {
                name: {**asdict(a), "nodes": [asdict(n) for n in a.nodes]}
                for name, a in sorted(self.allocations.items())
            },
            "host_keys": dict(sorted(self.host_keys.items())),
            "quarantine": dict(sorted(self.quarantine.items())),
        }
        return json.dumps(doc, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str) -> PoolState:
        try:
            doc = json.loads(text)
            if doc.get("version") != _STATE_VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}")
            allocations = {}
            for name, a in doc["allocations"].items():
                nodes = [NodeInfo(**n) for n in a.get("nodes", [])]
                allocations[name] = Allocation(
                    cluster=a["cluster"],
                    pool=a["pool"],
                    hosts=list(a["hosts"]),
                    key_path=a["key_path"],
                    ready=bool(a.get("ready", False)),
                    nodes=nodes,
                )
            host_keys = {str(k): str(v) for k, v in doc.get("host_keys", {}).items()}
            quarantine = {str(k): dict(v) for k, v in doc.get("quarantine", {}).items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{source} is corrupt ({exc}); fix or remove it.") from exc
        return cls(allocations, host_keys, quarantine)


class PoolStateFile:
    """Read-modify-write of ssh_pools.json under an exclusive file lock."""

    def __init__(self) -> None:
        home = launcher_home()
        self.path = home / "ssh_pools.json"
        self.lock_path = home / "ssh_pools.lock"

    @contextlib.contextmanager
    def locked(self) -> Iterator[PoolState]:
        """Yields the state; writes it back atomically when the block exits normally."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self._read()
            before = state.to_json()
            yield state
            after = state.to_json()
            if after != before:
                tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                tmp.write_text(after, encoding="utf-8")
                os.replace(tmp, self.path)
        finally:
            os.close(fd)

    def read(self) -> PoolState:
        return self._read()

    def _read(self) -> PoolState:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return PoolState()
        return PoolState.from_json(text, str(self.path))
