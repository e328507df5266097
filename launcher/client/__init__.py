"""The remote side of the CLI: when logged in to a server (`launcher api login`), the
stateful verbs go there over HTTP (`remote.RemoteBackend`), with the same calls and
return types as the embedded `launcher.api.backend.EmbeddedBackend`.

`backend()` is the one place that chooses. Nothing here imports the server package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from launcher.api.backend import Backend
    from launcher.client.login import Login
    from launcher.client.remote import RemoteBackend


def backend() -> Backend:
    """The remote backend when this home is logged in to a server, else the embedded one."""
    from launcher.client.login import load_login

    login = load_login()
    if login is None:
        from launcher.api.backend import EmbeddedBackend

        return EmbeddedBackend()
    return remote_for(login)


def remote_for(login: Login) -> RemoteBackend:
    """The backend of `login`: its certificate pinned, its SSH tunnel (re)opened first."""
    from launcher.client.remote import RemoteBackend

    if login.tunnel:
        from launcher.client import tunnel

        tunnel.ensure(tunnel.TunnelSpec.from_dict(login.tunnel))
    pin = ((login.tls_cert_pem, login.tls_fingerprint)
           if login.tls_cert_pem and login.tls_fingerprint else None)
    return RemoteBackend(login.endpoint, login.token, pin=pin)
