"""`launcher dashboard`: the dashboard over this machine's own LAUNCHER_HOME (embedded
mode), on 127.0.0.1, with no API server or user tokens needed.

It serves the same app as `launcher api start` but without the managed-jobs controller
(the embedded controller daemon keeps that job). Access: a random session token that
lives only in this process (never stored), and a one-time login code carried by the URL
printed on the first line of output; opening that URL once exchanges the code for the
session cookie (the code then stops working), so a URL left in a terminal's scrollback
or browser history cannot be replayed. The session acts as an admin named `local`: the
home's owner sees every cluster and job, as the embedded CLI does."""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Callable

from launcher.errors import UsageError
from launcher.server.dashboard.session import LOCAL_USER as LOCAL_USER  # noqa: F401


def _check_port(port: int) -> None:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise UsageError(f"--port {port}: 127.0.0.1:{port} cannot be used ({exc.strerror}); "
                             "pick another port with --port.") from None


def serve(port: int, *, open_browser: bool, out: Callable[[str], None],
          say: Callable[[str], None]) -> int:
    """Serve until interrupted. `out` gets the one-time URL (first line), `say` notes."""
    from launcher.server.process import _require_extra

    _require_extra()
    import uvicorn

    from launcher.server.app import create_app

    if not 0 < port < 65536:
        raise UsageError(f"--port takes a port number 1-65535, got {port}.")
    _check_port(port)
    app = create_app(run_controller=False)
    app.state.local_session = "lk_local-" + secrets.token_urlsafe(32)
    code = secrets.token_urlsafe(24)
    app.state.login_codes = {code}
    url = f"http://127.0.0.1:{port}/dashboard/login?once={code}"
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", access_log=False))
    out(url)
    say("The dashboard of this machine's launcher home (the URL works once; Ctrl-C stops).")

    if open_browser:
        def opener() -> None:
            import time
            import webbrowser

            while not server.started and not server.should_exit:
                time.sleep(0.05)  # uvicorn has no started event to wait on
            if server.started and not webbrowser.open(url):
                say("No browser could be opened here: open the URL above yourself.")

        threading.Thread(target=opener, daemon=True, name="open-browser").start()
    server.run()
    return 0
