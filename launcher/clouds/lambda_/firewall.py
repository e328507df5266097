"""Opening a task's `ports:` on Lambda: the account's inbound firewall rules.

Lambda's firewall is one rule list per account (`GET /firewall-rules`, replaced whole
by `PUT /firewall-rules {"data": [...]}`; each rule `{protocol, port_range: [lo, hi],
source_network, description}`; it does not apply in us-south-1, where every port is
open). `open_ports` adds a TCP rule from 0.0.0.0/0 for each requested port or range
that no rule covers yet, keeping every existing rule. Rules are shared by every
instance of the account, so `down` leaves them (docs/lambda.md).
"""

from __future__ import annotations

from typing import Any

from launcher.clouds.base import InvalidRequestError
from launcher.clouds.lambda_.api import CLOUD, LambdaAPI

DESCRIPTION = "launcher: task ports"


def port_ranges(ports: tuple[str, ...]) -> list[tuple[int, int]]:
    """"8080" / "8000-8010" -> (lo, hi). Raises InvalidRequestError."""
    out = []
    for p in ports:
        lo, _, hi = str(p).partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise InvalidRequestError(f"ports: {p!r} is not a port or a range", cloud=CLOUD) from None
        if not 1 <= a <= b <= 65535:
            raise InvalidRequestError(f"ports: {p!r} is out of 1-65535", cloud=CLOUD)
        out.append((a, b))
    return out


def _covers(rule: dict[str, Any], lo: int, hi: int) -> bool:
    rng = rule.get("port_range") or [0, 0]
    return (rule.get("protocol") in ("tcp", "all") and rule.get("source_network") == "0.0.0.0/0"
            and int(rng[0]) <= lo and hi <= int(rng[1]))


def open_ports(api: LambdaAPI, ports: tuple[str, ...], region: str) -> None:
    """Make sure each port is open (see the module docstring). Raises CloudError."""
    wanted = port_ranges(ports)
    if not wanted:
        return
    rules = list(api.call("GET", "firewall-rules", action="list firewall rules",
                          region=region) or [])
    missing = [(lo, hi) for lo, hi in wanted if not any(_covers(r, lo, hi) for r in rules)]
    if not missing:
        return
    rules += [{"protocol": "tcp", "port_range": [lo, hi], "source_network": "0.0.0.0/0",
               "description": DESCRIPTION} for lo, hi in missing]
    api.call("PUT", "firewall-rules", {"data": rules}, action="update firewall rules",
             region=region)
