"""Secrets and file modes at rest (issue 8, item 4), on the real local cloud through the
real CLI run under umask 000: after a managed job with `--secret` has finished, no file
under LAUNCHER_HOME (node homes of the local cloud included) holds the secret's bytes,
and every file and directory there is private."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import subprocess
from pathlib import Path

from launcher.api import jobs as api
from launcher.jobs import job_secrets
from launcher.jobs.state_machine import ManagedJobStatus
from launcher.jobs.store import JobStore

from .test_e2e_local import CLI, _preempt, _running_attempt, _wait, fast_controller  # noqa: F401

RUN = ("python3 -c \"import os, hashlib, time; "
       "print('digest', hashlib.sha256(os.environ['API_TOKEN'].encode()).hexdigest(), "
       "flush=True); time.sleep(float(os.environ['HOLD_S']))\"")


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The CLI as a user with umask 000 runs it."""
    return subprocess.run(
        CLI + list(args), capture_output=True, text=True, timeout=timeout,
        preexec_fn=lambda: os.umask(0), env=dict(os.environ),
    )


def _task(tmp_path: Path, hold_s: float, workdir: Path | None = None) -> str:
    path = tmp_path / "secret-task.yaml"
    path.write_text(
        "name: secretive\n"
        + (f"workdir: {workdir}\n" if workdir else "") +
        "resources:\n  infra: local\n  use_spot: true\n"
        f"envs:\n  HOLD_S: '{hold_s}'\n"
        "secrets:\n  API_TOKEN: null\n"
        f"run: |\n  {RUN}\n"
    )
    return str(path)


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every regular file under `root` whose bytes contain `needle` (`strings -r`)."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                if needle in f.read():
                    found.append(p)
    return found


def loose_modes(root: Path) -> list[str]:
    """Entries under `root` (and root) that group or others may access."""
    loose = []
    for dirpath, dirs, files in os.walk(root):
        for p in [dirpath] if dirpath == str(root) else []:
            if stat.S_IMODE(os.lstat(p).st_mode) & 0o077:
                loose.append(f"{p} {stat.S_IMODE(os.lstat(p).st_mode):o}")
        for name in (*dirs, *files):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
                loose.append(f"{p} {stat.S_IMODE(st.st_mode):o}")
    return loose


def test_managed_job_secret_never_rests_in_the_home(tmp_path: Path, launcher_home: Path) -> None:
    launcher_home.rmdir()  # the CLI creates it, under umask 000
    value = f"uniq-{secrets.token_hex(12)}"
    digest = hashlib.sha256(value.encode()).hexdigest()
    out = _cli("jobs", "launch", "-y", "-d", "--secret", f"API_TOKEN={value}",
               _task(tmp_path, hold_s=1.5))
    assert out.returncode == 0, out.stderr
    [job] = api.jobs_queue()
    first = _running_attempt(job.id, 1)
    # While it runs: the value is kept for a relaunch, in its own private file only.
    kept = job_secrets.secrets_path(launcher_home, job.id)
    assert json.loads(kept.read_text()) == {"API_TOKEN": value}
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    db_files = [p for p in launcher_home.iterdir() if p.name.startswith("state.db")]
    assert db_files and not any(value.encode() in p.read_bytes() for p in db_files)
    _preempt(first)  # the relaunch needs the value again
    _wait(lambda: api.jobs_status(job.id).status in ("SUCCEEDED", "FAILED"), timeout=90,
          what="job end")
    assert api.jobs_status(job.id).status == "SUCCEEDED"
    logs = _cli("jobs", "logs", str(job.id))
    relaunch = logs.stdout.partition("=== attempt 2 (preemption)")[2]
    assert f"digest {digest}" in relaunch, logs.stdout  # the relaunch had the value too
    _wait(lambda: not kept.exists(), what="secrets file deleted")
    api.jobs_controller_stop()
    assert files_holding(launcher_home, value.encode()) == []
    assert stat.S_IMODE(launcher_home.stat().st_mode) == 0o700
    assert loose_modes(launcher_home) == []


def test_cluster_job_secret_is_dropped_by_the_agent(tmp_path: Path, launcher_home: Path) -> None:
    """A plain `launch` on a cluster that stays up: the head-node agent (its jobs.db is
    in the node's home, under LAUNCHER_HOME) forgets the value once the job ended."""
    value = f"uniq-{secrets.token_hex(12)}"
    work = tmp_path / "work"
    work.mkdir()
    (work / "data.txt").write_text("shared with nobody")
    (work / "data.txt").chmod(0o644)  # synced to the node: private there
    (work / "tool.sh").write_text("true\n")
    (work / "tool.sh").chmod(0o755)
    out = _cli("launch", "-y", "-c", "keep", "--secret", f"API_TOKEN={value}",
               _task(tmp_path, hold_s=0, workdir=work))
    try:
        assert out.returncode == 0, out.stderr
        assert hashlib.sha256(value.encode()).hexdigest() in out.stdout
        synced = list(launcher_home.rglob("tool.sh"))
        assert synced and stat.S_IMODE(synced[0].stat().st_mode) == 0o700
        agent_dbs = list(launcher_home.rglob("jobs.db"))
        assert agent_dbs  # the node's agent DB is under the home, and is scanned
        assert files_holding(launcher_home, value.encode()) == []
        assert loose_modes(launcher_home) == []
    finally:
        _cli("down", "-y", "keep")


def test_cancel_and_every_terminal_status_delete_the_secrets_file(launcher_home: Path) -> None:
    store = JobStore()
    try:
        ids = []
        for _ in range(2):
            row = store.add_job(name="j", task_yaml=json.dumps({"run": "true",
                                "secrets": {"T": None}}), task_source=None, strategy="FAILOVER",
                                max_restarts_on_errors=0, recover_on_exit_codes=(),
                                secrets={"T": "v-123"})
            ids.append(row.id)
            assert store.secrets(row.id) == {"T": "v-123"}
        store.transition(ids[0], ManagedJobStatus.CANCELLED, "cancelled by the user")
        assert store.secrets(ids[0]) is None
        assert not job_secrets.secrets_path(launcher_home, ids[0]).exists()
        # a crash between the end and the deletion: the controller's sweep removes it
        job_secrets.save(launcher_home, ids[0], {"T": "v-123"})
        assert store.forget_ended_secrets() == [ids[0]]
        assert store.secrets(ids[1]) == {"T": "v-123"}  # a live job keeps its values
    finally:
        store.close()


def test_values_written_by_an_older_version_are_moved_out(launcher_home: Path) -> None:
    """A DB whose task_yaml holds secret values (as before): opening it moves a live job's
    values to its file, drops an ended job's, and leaves no trace in the DB file."""
    store = JobStore()
    try:
        rows = [store.add_job(name=f"j{i}", task_yaml=json.dumps(
                    {"run": "true", "secrets": {"T": f"old-secret-{i}"}}), task_source=None,
                    strategy="FAILOVER", max_restarts_on_errors=0, recover_on_exit_codes=())
                for i in range(2)]
        store.transition(rows[1].id, ManagedJobStatus.CANCELLED, "cancelled by the user")
        store._conn.execute("DELETE FROM schema_version WHERE component = 'job-secrets'")
    finally:
        store.close()
    assert b"old-secret-0" in (launcher_home / "state.db").read_bytes() + (
        launcher_home / "state.db-wal").read_bytes() if (launcher_home / "state.db-wal").exists() \
        else b"old-secret-0" in (launcher_home / "state.db").read_bytes()
    store = JobStore()
    try:
        assert json.loads(store.job(rows[0].id).task_yaml)["secrets"] == {"T": None}
        assert store.secrets(rows[0].id) == {"T": "old-secret-0"}
        assert store.secrets(rows[1].id) is None
    finally:
        store.close()
    for i in range(2):
        assert [p for p in files_holding(launcher_home, f"old-secret-{i}".encode())
                if "managed_jobs" not in p] == []
