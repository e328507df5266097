"""The SSH pool's own view of a host's health (what `SSHCloud.query` reports).

An SSH pool has no cloud API that could say "this machine is gone". Its view is
the hosts' sshd, probed from here:

- a node that answers an SSH command is RUNNING;
- a node whose sshd cannot be reached at the TCP level (connection refused, no
  route, timeout) on *every* probe of a short confirmation window
  (`confirm_s`, `probes` probes) is LOST: reported as TERMINATED, which the
  managed-jobs controller treats as a confirmed loss (a recovery);
- anything else (one failed probe, sshd answering but the command failing) is
  UNKNOWN: transient, never a recovery on its own.

Hosts confirmed lost while a cluster held them are quarantined in the pool's
state (`ssh_pools.json`) for `quarantine_s` so no cluster takes them again at
once; a quarantined host is cleaned of the old cluster's processes before it is
handed out again.

A quarantined host whose sshd answers again is released sooner (ssh_hosts.py): it is
probed once it has been quarantined for `reprobe_after_s`.

Settings (environment): LAUNCHER_SSH_LOST_CONFIRM_S (default 3), LAUNCHER_SSH_LOST_PROBES
(default 3), LAUNCHER_SSH_QUARANTINE_S (default 600), LAUNCHER_SSH_REPROBE_AFTER_S
(default 60).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

DEFAULT_CONFIRM_S = 3.0
DEFAULT_PROBES = 3
DEFAULT_QUARANTINE_S = 600.0
DEFAULT_REPROBE_AFTER_S = 60.0
_CONNECT_TIMEOUT_S = 2.0


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    try:
        return float(raw) if raw else default
    except ValueError:
        return default


@dataclass(frozen=True)
class HealthSettings:
    """How long and how often a host is probed before it is called lost."""

    confirm_s: float = DEFAULT_CONFIRM_S
    probes: int = DEFAULT_PROBES
    quarantine_s: float = DEFAULT_QUARANTINE_S
    reprobe_after_s: float = DEFAULT_REPROBE_AFTER_S

    @classmethod
    def from_env(cls) -> HealthSettings:
        return cls(
            confirm_s=max(0.0, _env_float("LAUNCHER_SSH_LOST_CONFIRM_S", DEFAULT_CONFIRM_S)),
            probes=max(2, int(_env_float("LAUNCHER_SSH_LOST_PROBES", DEFAULT_PROBES))),
            quarantine_s=max(0.0, _env_float("LAUNCHER_SSH_QUARANTINE_S", DEFAULT_QUARANTINE_S)),
            reprobe_after_s=max(
                0.0, _env_float("LAUNCHER_SSH_REPROBE_AFTER_S", DEFAULT_REPROBE_AFTER_S)),
        )


def sshd_reachable(host: str, port: int, timeout: float = _CONNECT_TIMEOUT_S) -> bool:
    """True when a TCP connection to sshd opens and it sends its banner; False on
    refused / unreachable / timeout. Never raises."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def confirmed_unreachable(host: str, port: int, settings: HealthSettings) -> bool:
    """Probe `settings.probes` times spread over `settings.confirm_s`; True only if
    every probe failed (the host is lost). One answer anywhere = not lost."""
    gap = settings.confirm_s / max(1, settings.probes - 1)
    for i in range(settings.probes):
        if sshd_reachable(host, port):
            return False
        if i < settings.probes - 1:
            time.sleep(gap)  # a silent host sends no event to wait on: probe again later
    return True


def quarantine_active(entry: dict[str, object], now: float) -> bool:
    """Is a quarantine entry (`{"until": epoch, ...}`) still in force?"""
    until = entry.get("until")
    return isinstance(until, int | float) and now < float(until)
