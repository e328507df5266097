"""The client imports httpx without httpx's CLI and without trio (launcher/client/http.py),
and leaves both importable afterwards."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
from launcher.client import remote
import httpx
assert "httpx._main" not in sys.modules, "httpx's CLI was imported"
assert "trio" not in sys.modules, "trio was imported"
assert remote.httpx is httpx
r = httpx.Response(200, json={"ok": True})
assert r.json() == {"ok": True}
import importlib.util
for name in ("trio", "httpx._main"):  # refused only while httpx loaded
    assert sys.modules.get(name, 0) is not None, name
print("ok")
"""


def test_client_http_import_skips_httpx_cli_and_trio() -> None:
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
