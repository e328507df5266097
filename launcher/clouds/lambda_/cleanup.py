"""What launcher adds to a Lambda account once and `down` leaves (`launcher clouds cleanup
lambda` deletes it): the SSH key it registered (`launcher-<fingerprint>`, cloud.py) and the
inbound firewall rules it added for tasks' `ports:` (description `launcher: task ports`,
firewall.py; rules of the whole account, open to the world). Both are account-wide and
in use while any instance of the account uses the key, or any launcher instance lives
(the rules open ports for every instance: which task opened which is not recorded).
"""

from __future__ import annotations

import json
import re
from typing import Any

from launcher.clouds.base import Leftover
from launcher.clouds.lambda_.api import CLOUD, LambdaAPI
from launcher.clouds.lambda_.firewall import DESCRIPTION

SSH_KEY = "SSH key"
FIREWALL_RULE = "firewall rule"
_KEY_NAME = re.compile(r"launcher-[0-9a-f]{12}\Z")
_NAME = re.compile(r"^launcher-(.+)-(\d+)$")
_GONE = ("terminating", "terminated")


def _why(ids: list[str]) -> str | None:
    if not ids:
        return None
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    return f"used by instance(s) {', '.join(ids[:3])}{more}"


def _rule_name(rule: dict[str, Any]) -> str:
    lo, hi = (rule.get("port_range") or [0, 0])[:2]
    ports = str(lo) if lo == hi else f"{lo}-{hi}"
    return f"{rule.get('protocol')} {ports} from {rule.get('source_network')}"


def leftovers(api: LambdaAPI) -> list[Leftover]:
    """The account's launcher SSH keys and `ports:` firewall rules."""
    live = [i for i in api.call("GET", "instances", action="list instances") or []
            if i.get("status") not in _GONE]
    out = []
    for key in api.call("GET", "ssh-keys", action="list SSH keys") or []:
        name = str(key.get("name") or "")
        if _KEY_NAME.match(name):
            users = sorted(str(i["id"]) for i in live if name in (i.get("ssh_key_names") or []))
            out.append(Leftover(CLOUD, SSH_KEY, name, str(key["id"]), None, _why(users)))
    ours = sorted(str(i["id"]) for i in live if _NAME.match(str(i.get("name") or "")))
    rules = api.call("GET", "firewall-rules", action="list firewall rules") or []
    for rule in rules:
        if rule.get("description") == DESCRIPTION:
            out.append(Leftover(CLOUD, FIREWALL_RULE, _rule_name(rule),
                                json.dumps(rule, sort_keys=True), None, _why(ours)))
    return out


def delete(api: LambdaAPI, item: Leftover) -> None:
    """Delete one listed key (gone already is fine), or drop one rule from the list."""
    if item.kind == SSH_KEY:
        api.delete(f"ssh-keys/{item.id}", action=f"delete SSH key {item.name}")
        return
    wanted = json.loads(item.id)
    rules = list(api.call("GET", "firewall-rules", action="list firewall rules") or [])
    kept = [r for r in rules if r != wanted]
    if len(kept) != len(rules):
        api.call("PUT", "firewall-rules", {"data": kept}, action="update firewall rules")
