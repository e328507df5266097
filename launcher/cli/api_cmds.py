"""`launcher api ...` (the server: start, stop, status, logs, cancel; the client:
login, logout, info) and `launcher users ...` (tokens and roles). Thin: the server's
process management is launcher.server.process (no FastAPI import here), the calls
go through `launcher.client.backend()`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from launcher.cli.app import app, print_json

if TYPE_CHECKING:
    from launcher.client.remote import RemoteBackend

api_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                      help="The API server: run it here, or log in to one.")
users_app = typer.Typer(rich_markup_mode=None, no_args_is_help=True,
                        help="The API server's users and their tokens.")
app.add_typer(api_app, name="api")
app.add_typer(users_app, name="users")


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@app.command("dashboard")
def dashboard_cmd(
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.")] = 46591,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Only print the URL.")] = False,
) -> int:
    """The web dashboard of this machine's launcher home, on 127.0.0.1: prints a one-time
    login URL (first line) and opens the browser when it can. Ctrl-C stops it. A server
    you are logged in to serves its own at its URL's /dashboard."""
    from launcher.server.local_dashboard import serve

    return serve(port, open_browser=not no_browser, out=_out, say=_say)


@api_app.command("start")
def start_cmd(
    host: Annotated[str, typer.Option("--host", help="Address to listen on (non-loopback needs TLS).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 46590,
    foreground: Annotated[bool, typer.Option("--foreground", help="Run in this terminal (Ctrl-C stops).")] = False,
    tls_cert: Annotated[str | None, typer.Option("--tls-cert", help="PEM certificate (HTTPS).")] = None,
    tls_key: Annotated[str | None, typer.Option("--tls-key", help="PEM private key (HTTPS).")] = None,
    insecure_behind_proxy: Annotated[bool, typer.Option("--insecure-behind-proxy", help="Allow a non-loopback bind without TLS (only behind a TLS-terminating proxy).")] = False,
) -> int:
    """Start the API server on this home (returns once it answers). The managed-jobs
    controller runs inside it, so jobs recover while your laptop is closed."""
    from launcher.server import process

    started = process.start(host, port, foreground=foreground, tls_cert=tls_cert,
                            tls_key=tls_key, insecure_behind_proxy=insecure_behind_proxy)
    url = started.info.url
    if started.admin_token is not None:
        _out(f"First admin token (shown once; store it now): {started.admin_token}")
        _say(f"Log in with: launcher api login -e {url} --token <the token above>")
    if foreground:
        _say(f"API server at {url} (Ctrl-C stops it).")
        return process.run_foreground(host, port, tls_cert, tls_key)
    _say(f"API server running at {url} (pid {started.info.pid}); log: {started.info.log}")
    return 0


@api_app.command("stop")
def stop_cmd() -> int:
    """Stop the API server on this home. Managed jobs keep running on their clusters;
    the next `api start` resumes them."""
    from launcher.server import process

    before = process.stop()
    _say("No API server was running on this home." if before is None
         else f"Stopped the API server (pid {before.pid}).")
    return 0


@api_app.command("status")
def status_cmd(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> int:
    """Is an API server running on this home, and where; on a team server (state DB on
    PostgreSQL), every replica sharing the DB and how many managed jobs each holds."""
    import time
    from dataclasses import asdict

    from launcher.api.jobs import server_replicas
    from launcher.server import process

    info = process.status()
    replicas = server_replicas()
    if as_json:
        print_json({**asdict(info), "replicas": replicas})
    else:
        if info.running:
            _out(f"API server running at {info.url} (pid {info.pid}, launcher {info.version}); "
                 f"home {info.home}; log {info.log}")
        else:
            _out(f"No API server running on this home ({info.home}).")
        if replicas is not None:
            from launcher.state.dburl import configured_url, mask_url

            _out(f"Replicas sharing the state DB at {mask_url(configured_url() or '')}: "
                 f"{len(replicas)}")
            now = time.time()
            for r in replicas:
                _out(f"  {r['id']}  host {r['host']} pid {r['pid']}  "
                     f"{r['jobs']} job(s) held  heartbeat {max(0.0, now - float(r['heartbeat_at'])):.0f} s ago")
    return 0 if info.running else 1


@api_app.command("logs")
def logs_cmd(
    request_id: Annotated[str | None, typer.Argument(metavar="[REQ]", help="A request's log (from the server you are logged in to) instead of the server's own.")] = None,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines of the server log.")] = 50,
) -> int:
    """The server's log on this home, or (REQ) follow a request's log until it ends."""
    if request_id is None:
        from launcher.server.process import tail_log

        for line in tail_log(lines):
            _out(line)
        return 0
    remote = _remote()
    row = remote.request_follow(request_id, _out, _say)  # output to stdout, progress stderr
    _say(f"Request {request_id}: {row['status']}.")
    if row["status"] == "FAILED" and row.get("error"):
        _say(f"Error: {row['error']['message']}")
        return int(row["error"].get("exit_code") or 1)
    if row["status"] == "CANCELLED":
        return 130
    result = row.get("result")  # a launch/exec that followed its job: the job's exit code
    return int(result.get("exit_code") or 0) if isinstance(result, dict) else 0


@api_app.command("cancel")
def cancel_cmd(request_id: Annotated[str, typer.Argument(metavar="REQ")]) -> int:
    """Cancel a request (a managed job it already submitted is cancelled too)."""
    row = _remote().request_cancel(request_id)
    _say(f"Request {request_id}: cancel requested ({row['status']}).")
    return 0


def _remote() -> RemoteBackend:
    from launcher.client import backend
    from launcher.client.remote import RemoteBackend
    from launcher.errors import UsageError

    b = backend()
    if not isinstance(b, RemoteBackend):
        raise UsageError("Not logged in to a server: `launcher api login -e URL --token T`.")
    return b


@api_app.command("login")
def login_cmd(
    endpoint: Annotated[str, typer.Option("--endpoint", "-e", help="The server's URL.")],
    token: Annotated[str | None, typer.Option("--token", help="Your token (asked for when not given).")] = None,
    tls_fingerprint: Annotated[str | None, typer.Option("--tls-fingerprint", help="SHA-256 of a self-signed server certificate to pin (what `api deploy` printed).")] = None,
) -> int:
    """Send this machine's commands to a server (endpoint and token stored 0600)."""
    from launcher.client import remote_for
    from launcher.client.login import Login, normalize_endpoint, save_login

    url = normalize_endpoint(endpoint)
    pem = fp = None
    if tls_fingerprint is not None:
        from launcher.client.pinning import fetch_certificate, normalize_fingerprint

        fp = normalize_fingerprint(tls_fingerprint)
        pem = fetch_certificate(url, fp)
    if token is None:
        token = typer.prompt("Token", hide_input=True, err=True)
    login = Login(url, token.strip(), tls_fingerprint=fp, tls_cert_pem=pem)
    info = remote_for(login).info()  # refuse a bad token, endpoint or certificate now
    from launcher.client import tunnel

    tunnel.stop()  # a deployed server's SSH tunnel, if this home had one, is not needed now
    path = save_login(login)
    _say(f"Logged in to {url} as {info['user']} ({info['role']}); saved in {path}.")
    return 0


@api_app.command("logout")
def logout_cmd() -> int:
    """Forget the server: commands run on this machine again (an SSH tunnel to a
    deployed server is closed; the server keeps running)."""
    from launcher.client import tunnel
    from launcher.client.login import forget_login

    tunnel.stop()

    _say("Logged out; commands run on this machine." if forget_login() else "Not logged in.")
    return 0


@api_app.command("info")
def info_cmd(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> int:
    """Who you are on the server, its version and the clouds it can use."""
    remote = _remote()
    info = remote.info()
    if as_json:
        print_json(info)
        return 0
    from launcher import __version__

    _out(f"Server {remote.endpoint}: launcher {info['version']} (this client {__version__})")
    _out(f"You: {info['user']} ({info['role']})")
    enabled = [n for n, c in info["clouds"].items() if c["enabled"]]
    _out(f"Enabled clouds: {', '.join(enabled) or 'none'}")
    return 0


@users_app.command("create")
def users_create_cmd(
    name: Annotated[str, typer.Argument(help="User name.")],
    role: Annotated[str, typer.Option("--role", help="admin or user.")] = "user",
    as_json: Annotated[bool, typer.Option("--json", help="Print {name, role, token}.")] = False,
) -> int:
    """Add a user; prints its token once (only its hash is kept)."""
    from launcher.client import backend

    token = backend().users_create(name, role)
    _token_out(name, role, token, as_json)
    return 0


def _token_out(name: str, role: str | None, token: str, as_json: bool) -> None:
    if as_json:
        print_json({"name": name, "role": role, "token": token})
        return
    _out(token)
    _say(f"Token of {name} (shown once; only its hash is stored).")


@users_app.command("list")
def users_list_cmd(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False) -> int:
    """Every user and their role (never their tokens)."""
    from launcher.client import backend

    users = backend().users_list()
    if as_json:
        print_json(users)
        return 0
    from launcher.cli.table import Table, print_table

    table = Table()
    for col in ("NAME", "ROLE"):
        table.add_column(col)
    for u in users:
        table.add_row(u["name"], u["role"])
    print_table(table)
    return 0


@users_app.command("rotate")
def users_rotate_cmd(
    name: Annotated[str, typer.Argument(help="User name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print {name, token}.")] = False,
) -> int:
    """A new token for NAME; the old one stops working at once."""
    from launcher.client import backend

    _token_out(name, None, backend().users_rotate(name), as_json)
    return 0


@users_app.command("delete")
def users_delete_cmd(name: Annotated[str, typer.Argument(help="User name.")]) -> int:
    """Remove a user; their token stops working at once (their jobs keep running)."""
    from launcher.client import backend

    backend().users_delete(name)
    _say(f"Deleted user {name}.")
    return 0


def _ask(question: str) -> bool:
    """typer.confirm, with no answer (end of input) read as no."""
    import click

    try:
        return bool(typer.confirm(question, default=False, err=True))
    except click.exceptions.Abort:
        _say("")
        return False


@api_app.command("deploy")
def deploy_cmd(
    cloud: Annotated[str | None, typer.Option("--cloud", help="Cloud of the VM (default: the cheapest that fits).")] = None,
    region: Annotated[str | None, typer.Option("--region", help="Region of the VM.")] = None,
    cpus: Annotated[str, typer.Option("--cpus", help="vCPUs of the VM: N or N+ (at least N).")] = "2+",
    with_credentials: Annotated[str | None, typer.Option("--with-credentials", help="Copy these clouds' credential files to the VM, e.g. aws,gcp.")] = None,
    ssh_tunnel: Annotated[bool, typer.Option("--ssh-tunnel", help="Open no port: reach the server through an SSH tunnel.")] = False,
    down: Annotated[bool, typer.Option("--down", help="Remove the deployed server, its VM and everything it made.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (with --down: even when managed jobs are live).")] = False,
) -> int:
    """The API server on a small on-demand CPU VM (TLS with a pinned certificate, or an
    SSH tunnel); this machine ends logged in to it. Run again to upgrade it; --down
    removes it all."""
    from launcher.client import deploy

    if down:
        deploy.undeploy(_say, _ask, yes)
        return 0
    from launcher.client.deploy_credentials import parse_clouds

    opts = deploy.DeployOptions(cloud=cloud, region=region, cpus=cpus,
                                credentials=parse_clouds(with_credentials), ssh_tunnel=ssh_tunnel)
    done = deploy.deploy(opts, _say)
    for line in done.copied:
        _say(f"Copied {line}")
    if done.instance_profile:
        _say(f"AWS credentials: none copied; the VM uses its instance profile "
             f"{done.instance_profile} (aws.iam_instance_profile).")
    verb = "Upgraded" if done.upgraded else "Deployed"
    _say(f"{verb} launcher {done.version} on {done.cloud} {done.region} ({done.instance_type}, "
         f"${done.hourly_cost:.3f}/h), running under {done.mode}.")
    if done.fingerprint:
        _say(f"TLS certificate SHA-256 (pinned): {done.fingerprint}")
        _say(f"Others log in with: launcher api login -e {done.endpoint} "
             f"--tls-fingerprint {done.fingerprint} --token <their token>")
    else:
        _say("Reached through an SSH tunnel (no port open); each command re-opens it on demand.")
    _out(f"Logged in to {done.endpoint} as admin.")
    return 0
