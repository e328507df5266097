"""httpx, imported for the client without the parts it never uses.

`import httpx` also imports its own command-line tool (`httpx._main`: click, rich,
pygments) whenever those are installed, and httpcore imports `trio` whenever that is
installed; together about a quarter of a second on every remote CLI command. The
client speaks plain synchronous HTTP, so both imports are refused while httpx loads
(each falls back as it does when the package is missing; `httpx.main` then only says
that the httpx CLI is unavailable) and allowed again right after, so anything else in
the process may still import them.
"""

from __future__ import annotations

import sys
from types import ModuleType

_SKIPPED = ("httpx._main", "trio")


def load_httpx() -> ModuleType:
    if "httpx" in sys.modules:
        return sys.modules["httpx"]
    refused = [name for name in _SKIPPED if name not in sys.modules]
    for name in refused:
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
    try:
        import httpcore  # noqa: F401 - httpx imports it lazily, at the first request
        import httpx
    finally:
        for name in refused:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    return httpx
