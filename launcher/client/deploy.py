"""`launcher api deploy`: the API server on a small on-demand CPU VM, in one command;
`launcher api deploy --down` removes it all. (docs/api-server.md, "Deploy".)

Deploy, step by step (each named in the error that ends it):
1. Check the options and the credential files to copy (nothing provisioned yet).
2. Build a wheel of the running launcher (launcher.client.deploy_wheel).
3. Provision the VM through launcher's own launch path, on this machine: a cluster
   named `launcher-api`, on-demand, `--cpus` (default 2+) and no GPU, the cheapest
   placement that fits or where `--cloud/--region` say, with the API port opened to
   the world (TLS) unless `--ssh-tunnel` (no port opened).
4. Over SSH: upload the wheel; install it with the `[server]` extra in a venv
   (`~/.launcher-api/venv`, with a Python >= 3.11, installing one with apt when the
   image lacks it); copy this home's config.yaml (how the server launches) and the
   credential files `--with-credentials` names.
5. On the VM, `python -m launcher.server.deploy_vm install` (launcher.server.deploy_vm)
   makes the server's home, its first admin with the token generated here (sent on
   stdin, never in a command line or a file), a self-signed certificate, and the
   service (systemd, or a nohup'ed supervisor where systemd is not PID 1); it prints
   the certificate, whose SHA-256 the client pins.
6. Log in: the endpoint, the token and the pinned certificate (or the SSH tunnel) are
   saved as this home's login (launcher.client.login), after one authenticated call
   through them.

Failure at any step (Ctrl-C too) of a first deploy takes the `launcher-api` cluster
down (its VM, disks, addresses and security groups), so nothing is left behind, and
raises DeployError with one paragraph. A re-run on a home logged in to its deployment
upgrades it: the same VM, the new wheel, the service restarted (jobs keep running and
the new server resumes them); its failure leaves the VM as it is, to retry.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.errors import ClusterNotFoundError, LauncherError, UsageError

if TYPE_CHECKING:
    from launcher.client.login import Login
    from launcher.clouds.base import ClusterInfo
    from launcher.runtime.runner import CommandRunner

CLUSTER = "launcher-api"
REMOTE_PORT = 46590
DEFAULT_MEMORY = "2+"  # GiB: the server, its controller and pip's install fit with room
BASE = ".launcher-api"  # on the VM, under the SSH user's home
Say = Callable[[str], None]

# Installs the wheel in ~/.launcher-api/venv. $W: the wheel's path under ~.
INSTALL_SCRIPT = r"""
set -e
B="$HOME/.launcher-api"; W="$HOME/$W"
pick() {
  for p in python3.13 python3.12 python3.11 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
      echo "$p"; return 0
    fi
  done
  return 1
}
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
apt_install() {
  command -v apt-get >/dev/null 2>&1 || { echo "no Python >= 3.11 with venv on this VM and no apt-get to install one" >&2; return 1; }
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 || {
    $SUDO apt-get update -qq >/dev/null && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }
}
if [ ! -x "$B/venv/bin/python" ]; then
  rm -rf "$B/venv"
  PY=$(pick) || { apt_install python3.11 python3.11-venv; PY=python3.11; }
  if ! "$PY" -m venv "$B/venv" >"$B/venv.log" 2>&1; then
    rm -rf "$B/venv"
    apt_install "$($PY -c 'import sys; print("python%d.%d-venv" % sys.version_info[:2])')"
    "$PY" -m venv "$B/venv"
  fi
fi
"$B/venv/bin/python" -m pip install --disable-pip-version-check -q "$W[server]"
"$B/venv/bin/python" -m pip install --disable-pip-version-check -q --no-deps --force-reinstall "$W"
"$B/venv/bin/python" -c 'import launcher, fastapi, uvicorn, cryptography; print(launcher.__version__)'
"""


class DeployError(LauncherError):
    """A deploy (or --down) that failed; its message is the one paragraph to show."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class DeployOptions:
    cloud: str | None = None
    region: str | None = None
    cpus: str = "2+"
    credentials: tuple[str, ...] = ()
    ssh_tunnel: bool = False


@dataclass(frozen=True)
class Deployed:
    endpoint: str
    cloud: str
    region: str
    instance_type: str
    hourly_cost: float
    mode: str  # "systemd" | "supervisor"
    fingerprint: str | None  # the pinned certificate's SHA-256 (None with --ssh-tunnel)
    copied: tuple[str, ...]  # "cloud: local path -> ~/remote path"
    instance_profile: str | None
    upgraded: bool
    version: str


@dataclass
class _Progress:
    step: str = "checking the options"
    cluster_made: bool = False
    done: list[str] = field(default_factory=list)

    @contextlib.contextmanager
    def at(self, step: str) -> Iterator[None]:
        self.step = step
        yield
        self.done.append(step)


def check_cpus(cpus: str) -> str:
    if not re.fullmatch(r"\d+(\.\d+)?\+?", cpus.strip()) or float(cpus.rstrip("+")) < 1:
        raise UsageError(f"--cpus {cpus!r}: give a number of vCPUs, e.g. 2 or 2+ (at least).")
    return cpus.strip()


def _task(opts: DeployOptions) -> Any:
    from launcher.task.model import Task

    resources: dict[str, Any] = {"cpus": opts.cpus, "memory": DEFAULT_MEMORY, "use_spot": False}
    if opts.cloud:
        resources["cloud"] = opts.cloud
    if opts.region:
        resources["region"] = opts.region
    if not opts.ssh_tunnel:
        resources["ports"] = [str(REMOTE_PORT)]
    return Task.from_dict({"name": CLUSTER, "resources": resources})


def _cluster_exists() -> bool:
    from launcher.state.db import StateDB

    with StateDB() as db:
        return db.get_cluster(CLUSTER) is not None


def _cluster_info() -> ClusterInfo:
    from launcher.state.db import StateDB

    with StateDB() as db:
        return db.cluster_info(CLUSTER)


def _head_runner(info: ClusterInfo) -> CommandRunner:
    from launcher.runtime.node_runner import runner_for

    return runner_for(info, info.head)


def _run(runner: CommandRunner, what: str, command: str, *, env: dict[str, str] | None = None,
         stdin: str | None = None, timeout: float = 900) -> str:
    result = runner.run(command, env=env, stdin=stdin, timeout=timeout)
    if not result.ok:
        last = " / ".join(ln.strip() for ln in result.tail(6).splitlines() if ln.strip())
        raise LauncherError(f"{what} exited {result.returncode} ({last or 'no output'})")
    return result.stdout


def _deployment_of(login: Login | None) -> dict[str, Any] | None:
    return login.deployment if login is not None and login.deployment else None


def deploy(opts: DeployOptions, say: Say) -> Deployed:
    """Deploy (or upgrade) the server; this home ends logged in to it. Raises
    DeployError (one paragraph) after removing whatever a first deploy had made."""
    from launcher.client.deploy_credentials import credential_files, instance_profile
    from launcher.client.login import load_login

    check_cpus(opts.cpus)
    prior = load_login()
    upgrading = _deployment_of(prior) is not None
    if prior is not None and not upgrading:
        raise UsageError(f"This home is logged in to the server at {prior.endpoint}; "
                         "`launcher api logout` first (the deploy provisions from here).")
    if not upgrading and _cluster_exists():
        raise UsageError(f"A cluster named {CLUSTER} already exists on this home but no "
                         "deployment is logged in: take it down first (`launcher down "
                         f"{CLUSTER}`), then deploy again.")
    creds = credential_files(opts.credentials, opts.cloud)
    profile = (instance_profile("aws") if opts.cloud == "aws" and "aws" in opts.credentials
               else None)
    progress = _Progress()
    try:
        return _deploy(opts, say, prior if upgrading else None, creds, profile, progress)
    except BaseException as exc:
        raise _failed(exc, progress, upgrading) from None


def _failed(exc: BaseException, progress: _Progress, upgrading: bool) -> DeployError:
    interrupted = isinstance(exc, KeyboardInterrupt)
    reason = "interrupted (Ctrl-C)" if interrupted else (str(exc).strip() or type(exc).__name__)
    first, _, details = reason.partition("\n")  # e.g. a failed launch's attempts table
    head = f"launcher api deploy failed while {progress.step}: {first}"
    if not head.endswith((".", ")")):
        head += "."
    if upgrading:
        tail = (f" The deployed VM ({CLUSTER}) was left as it was, so its jobs keep running; "
                "run `launcher api deploy` again to retry the upgrade.")
    else:
        tail = _clean_up()
    return DeployError(head + tail + (f"\n{details}" if details else ""),
                       130 if interrupted else 1)


def _clean_up() -> str:
    """Take down whatever the failed first deploy made; the sentence that says so."""
    from launcher.api import clusters

    try:
        clusters.down(CLUSTER)
    except ClusterNotFoundError:
        return " Nothing was left behind (no VM had been recorded)."
    except BaseException as exc:  # noqa: BLE001 - reported, the user must finish it
        return (f" Taking the {CLUSTER} cluster down failed too ({exc}); run `launcher down "
                f"{CLUSTER}` to remove what it made.")
    return (f" Everything it had made was removed: the {CLUSTER} cluster is down (its VM, "
            "disk, addresses and firewall rules).")


def _deploy(opts: DeployOptions, say: Say, prior: Login | None, creds: list[Any],
            profile: str | None, progress: _Progress) -> Deployed:
    from launcher import __version__
    from launcher.api.launch import launch
    from launcher.client.deploy_wheel import build_wheel
    from launcher.config.settings import config_path

    with tempfile.TemporaryDirectory(prefix="launcher-deploy-") as tmp:
        with progress.at("building a wheel of this launcher"):
            wheel = build_wheel(Path(tmp))
        say(f"Built {wheel.name} ({wheel.stat().st_size // 1024} KiB).")
        with progress.at("provisioning the VM"):
            result = launch(_task(opts), CLUSTER, yes=True, on_event=say,
                            on_setup_line=say)
            info = _cluster_info()
        runner = _head_runner(info)
        try:
            with progress.at("uploading the launcher wheel"):
                runner.put_file(str(wheel), f"~/{BASE}/dist/{wheel.name}", 0o644)
            with progress.at("installing launcher[server] on the VM"):
                say("Installing launcher[server] in ~/.launcher-api/venv on the VM...")
                _run(runner, "the install", INSTALL_SCRIPT,
                     env={"W": f"{BASE}/dist/{wheel.name}"})
            copied: list[str] = []
            with progress.at("copying the configuration and credentials"):
                if config_path().is_file():
                    runner.put_file(str(config_path()), f"~/{BASE}/home/config.yaml", 0o600)
                for c in creds:
                    runner.put_file(str(c.local), f"~/{c.remote}", 0o600)
                    copied.append(f"{c.cloud}: {c.local} -> ~/{c.remote}")
            with progress.at("starting the server"):
                say("Starting the server on the VM...")
                token = prior.token if prior is not None else "lk_" + secrets.token_urlsafe(32)
                host = "127.0.0.1" if opts.ssh_tunnel else "0.0.0.0"
                out = _run(runner, "starting the server",
                           f"{BASE}/venv/bin/python -m launcher.server.deploy_vm install "
                           f"--host {host} --port {REMOTE_PORT}"
                           + ("" if opts.ssh_tunnel else " --tls"),
                           stdin=json.dumps({"admin_token": token}), timeout=180)
                vm = json.loads(out.strip().splitlines()[-1])
        finally:
            runner.close()
    with progress.at("logging in to the deployed server"):
        say(f"Server up ({vm['mode']}); logging in...")
        login = _log_in(info, token, vm, opts, result.cloud, result.region)
    return Deployed(endpoint=login.endpoint, cloud=result.cloud, region=result.region,
                    instance_type=info.instance_type, hourly_cost=result.hourly_cost,
                    mode=str(vm["mode"]), fingerprint=login.tls_fingerprint,
                    copied=tuple(copied), instance_profile=profile,
                    upgraded=prior is not None, version=str(vm.get("version") or __version__))


def _log_in(info: ClusterInfo, token: str, vm: dict[str, Any], opts: DeployOptions,
            cloud: str, region: str) -> Login:
    """Save the login (after one authenticated call through it) and return it."""
    from launcher.client import remote_for, tunnel
    from launcher.client.login import Login, save_login
    from launcher.client.pinning import fingerprint_of_pem

    head = info.head
    address = head.external_ip or head.internal_ip
    deployment = {"cluster": CLUSTER, "cloud": cloud, "region": region, "mode": vm["mode"],
                  "remote_port": REMOTE_PORT, "ssh_tunnel": opts.ssh_tunnel}
    if opts.ssh_tunnel:
        spec = tunnel.TunnelSpec(host=address, ssh_port=head.ssh_port, user=head.ssh_user or "root",
                                 key_path=info.ssh_key_path or "", host_key=head.ssh_host_key,
                                 local_port=tunnel.free_local_port(), remote_port=REMOTE_PORT)
        tunnel.stop()  # an upgrade: the old forward may point at an old port
        login = Login(f"http://127.0.0.1:{spec.local_port}", token, tunnel=spec.to_dict(),
                      deployment=deployment)
    else:
        pem = str(vm["cert_pem"])
        fp = fingerprint_of_pem(pem)
        if fp != vm.get("fingerprint"):
            raise LauncherError("the certificate read over SSH does not match the fingerprint "
                                "the VM computed")
        shown = f"[{address}]" if ":" in address else address
        login = Login(f"https://{shown}:{REMOTE_PORT}", token, tls_fingerprint=fp,
                      tls_cert_pem=pem, deployment=deployment)
    remote_for(login).info()  # through the pin (or the tunnel): refuse a login that fails
    save_login(login)
    return login


# ---- --down ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveWork:
    jobs: list[tuple[int, str, str]]  # (id, name, status) of managed jobs not finished
    clusters: list[str]  # clusters the server launched that are still up


def live_work(login: Login) -> LiveWork:
    from launcher.client import remote_for
    from launcher.jobs.state_machine import ManagedJobStatus

    remote = remote_for(login)
    jobs = [(j.id, j.name, j.status) for j in remote.jobs_queue(all_users=True)
            if not ManagedJobStatus(j.status).is_terminal]
    rows, _ = remote.status(refresh=False, all_users=True)
    return LiveWork(jobs, [r.name for r in rows])


def undeploy(say: Say, confirm: Callable[[str], bool], yes: bool) -> None:
    """Stop the server, cancel its live managed jobs and take down its clusters (after
    asking, unless `yes`), take the VM down, and log this home out. Raises DeployError."""
    from launcher.client import tunnel
    from launcher.client.login import forget_login, load_login

    login = load_login()
    deployment = _deployment_of(login)
    if deployment is None and not _cluster_exists():
        raise UsageError("Nothing to take down: this home has no deployed server (`launcher "
                         "api deploy` makes one).")
    if login is not None and deployment is None:
        raise UsageError(f"This home is logged in to {login.endpoint}, which it did not "
                         "deploy; `launcher api logout` first.")
    step = "asking the server what still runs"
    try:
        work: LiveWork | None = None
        if login is not None:
            try:
                work = live_work(login)
            except LauncherError as exc:  # a VM that is gone or broken must still go
                if not yes and not confirm(
                        f"The deployed server does not answer ({exc}), so its live jobs "
                        "cannot be checked or cancelled. Take its VM down anyway?"):
                    raise DeployError("Aborted: nothing was removed.", 1) from None
        if login is not None:
            if work is not None and (work.jobs or work.clusters):
                what = ", ".join([f"managed job {i} ({n}, {s})" for i, n, s in work.jobs]
                                 + [f"cluster {c}" for c in work.clusters])
                if not yes and not confirm(
                        f"The deployed server still runs: {what}. Cancel them, take their "
                        "clusters down and remove the server?"):
                    raise DeployError("Aborted: nothing was removed.", 1)
                step = "cancelling the server's managed jobs and clusters"
                _stop_work(login, work, say)
        elif not yes and not confirm(f"This home is not logged in to the {CLUSTER} server, so "
                                     "its live jobs cannot be checked. Remove it anyway?"):
            raise DeployError("Aborted: nothing was removed.", 1)
        step = "stopping the server"
        _stop_server(say)
        step = f"taking the {CLUSTER} cluster down"
        from launcher.api import clusters

        with contextlib.suppress(ClusterNotFoundError):
            clusters.down(CLUSTER)
        say(f"Took the {CLUSTER} cluster down (its VM, disk, addresses and firewall rules).")
    except DeployError:
        raise
    except BaseException as exc:
        reason = "interrupted (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) else str(exc)
        raise DeployError(f"launcher api deploy --down failed while {step}: {reason} Nothing "
                          "after that step was done; run `launcher api deploy --down` again.",
                          130 if isinstance(exc, KeyboardInterrupt) else 1) from None
    tunnel.stop()
    forget_login()
    say("Logged out; commands run on this machine again.")


def _stop_work(login: Login, work: LiveWork, say: Say) -> None:
    from launcher.client import remote_for

    remote = remote_for(login)
    for job_id, _, _ in work.jobs:
        remote.jobs_cancel(job_id)
    for job_id, _, _ in work.jobs:
        remote.jobs_wait(job_id, timeout=600)
        say(f"Cancelled managed job {job_id}.")
    rows, _ = remote.status(refresh=False, all_users=True)  # the jobs' clusters are gone now
    names = [r.name for r in rows]
    for name, err in remote.down_many(names) if names else []:
        if err is not None and not isinstance(err, ClusterNotFoundError):
            raise err
        say(f"Took cluster {name} down.")


def _stop_server(say: Say) -> None:
    """Stop the service on the VM (best effort: the VM goes next either way)."""
    try:
        info = _cluster_info()
    except ClusterNotFoundError:
        return
    runner = _head_runner(info)
    try:
        result = runner.run(f"{BASE}/venv/bin/python -m launcher.server.deploy_vm stop",
                            timeout=60)
        say("Stopped the server." if result.ok else
            f"Could not stop the server cleanly ({result.tail(3)}); the VM goes anyway.")
    except LauncherError as exc:
        say(f"The VM did not answer ({exc}); taking it down anyway.")
    finally:
        runner.close()
