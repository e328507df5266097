"""`python -m launcher.server --host H --port P [--tls-cert C --tls-key K]`: the server
in the foreground (what `launcher api start` runs detached). Prefer `launcher api start`:
it checks the bind, creates the first admin and waits until the server answers."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m launcher.server")
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tls-cert")
    p.add_argument("--tls-key")
    a = p.parse_args(argv)
    return serve(a.host, a.port, a.tls_cert, a.tls_key)


def serve(host: str, port: int, tls_cert: str | None, tls_key: str | None) -> int:
    import uvicorn

    from launcher.server.app import create_app
    from launcher.state import files as state_files

    state_files.private_umask()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(create_app(), host=host, port=port, ssl_certfile=tls_cert, ssl_keyfile=tls_key,
                log_level="info", access_log=False, timeout_graceful_shutdown=5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
