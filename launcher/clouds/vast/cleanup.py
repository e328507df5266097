"""The SSH key launcher registers on a Vast account once (cloud.py `_ensure_key`), which
`down` leaves: found and deleted on demand (`launcher clouds cleanup vast`). A key is
launcher's when it is this machine's launcher user key, or any key launcher generated
(its comment `launcher-user`). Vast puts every account key on every new instance, so the
key stays while the account has any instance at all.
"""

from __future__ import annotations

import contextlib
from typing import Any

from launcher.clouds.base import Leftover
from launcher.clouds.vast.api import CLOUD, NotFound, VastAPI

SSH_KEY = "SSH key"
COMMENT = "launcher-user"  # launcher.runtime.keys.ensure_user_key's


def _ours(text: str, mine: list[str]) -> bool:
    fields = text.split()
    return bool(fields) and (fields[:2] == mine or fields[2:] == [COMMENT])


def _my_key() -> list[str]:
    """The first two fields of this machine's launcher user key ([] when there is none:
    nothing is created here)."""
    from launcher.runtime.keys import keys_dir

    path = keys_dir() / "id_ed25519.pub"
    try:
        return path.read_text(encoding="utf-8").split()[:2]
    except OSError:
        return []


def leftovers(api: VastAPI, instances: list[dict[str, Any]]) -> list[Leftover]:
    """The account's launcher SSH keys; `instances`: the account's, which keep them."""
    listed = api.call("GET", "ssh/", action="list SSH keys")
    keys = listed if isinstance(listed, list) else (listed or {}).get("keys") or []
    mine = _my_key()
    ids = sorted(str(i.get("id")) for i in instances)
    why = None
    if ids:
        more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
        why = (f"the account has instance(s) {', '.join(ids[:3])}{more} (Vast puts account "
               "keys on every instance)")
    out = []
    for key in keys:
        text = str(key.get("public_key") or key.get("key") or "") if isinstance(key, dict) else ""
        if _ours(text, mine):
            short = " ".join(text.split()[:2])
            out.append(Leftover(CLOUD, SSH_KEY, f"{short[:24]}...{short[-8:]} ({key['id']})",
                                str(key["id"]), None, why))
    return out


def delete(api: VastAPI, item: Leftover) -> None:
    """Delete one listed key; one gone already is fine."""
    with contextlib.suppress(NotFound):
        api.call("DELETE", f"ssh/{item.id}/", action=f"delete SSH key {item.id}")
