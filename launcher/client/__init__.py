"""The remote side of the CLI: when logged in to a server (`launcher api login`), the
stateful verbs go there over HTTP (`remote.RemoteBackend`), with the same calls and
return types as the embedded `launcher.api.backend.EmbeddedBackend`.

`backend()` is the one place that chooses. Nothing here imports the server package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.backend import Backend


def backend() -> Backend:
    """The remote backend when this home is logged in to a server, else the embedded one."""
    from launcher.client.login import load_login

    login = load_login()
    if login is None:
        from launcher.api.backend import EmbeddedBackend

        return EmbeddedBackend()
    from launcher.client.remote import RemoteBackend

    return RemoteBackend(login.endpoint, login.token)
