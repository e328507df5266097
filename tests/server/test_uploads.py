"""Uploads through the server: a launch with a workdir and a file mount runs on the
uploaded copies, unchanged content is not sent again, an upload over the limit is
refused naming the path, and one user's uploads are out of another's reach."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from tests.server.conftest import Server, cli


def _workdir(tmp: Path) -> Path:
    wd = tmp / "proj"
    wd.mkdir()
    (wd / "hello.txt").write_text("hello from the workdir\n")
    (wd / "sub").mkdir()
    (wd / "sub" / "run.sh").write_text("echo script ran\n")
    (wd / "sub" / "run.sh").chmod(0o755)
    (wd / ".gitignore").write_text("secret.env\n")
    (wd / "secret.env").write_text("LEAK=1\n")  # ignored: never uploaded
    return wd


def _task(tmp: Path, wd: Path, mount_src: Path, name: str = "t.yaml") -> str:
    target = tmp / "mounted.txt"  # a local node: its file mount lands on this machine
    path = tmp / name
    path.write_text(
        f"name: up\nworkdir: {wd}\nfile_mounts:\n  {target}: {mount_src}\n"
        "resources:\n  infra: local\n"
        f"run: |\n  cat hello.txt; sub/run.sh; ls -a; cat {target}\n")
    return str(path)


def _stored_lines(server: Server, user: str) -> list[str]:
    log = (server.home / "server" / "server.log").read_text()
    return [ln for ln in log.splitlines() if f"uploads: {user} stored" in ln]


def _stored_bytes(server: Server, user: str) -> int:
    """Bytes of file content the server received from `user` (its log says each batch)."""
    return sum(int(ln.rsplit(", ", 1)[1].split()[0]) for ln in _stored_lines(server, user))


def test_launch_runs_on_uploaded_files_and_sends_them_once(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice")
    wd = _workdir(tmp_path)
    mount = tmp_path / "data.txt"
    mount.write_text("mounted file\n")
    task = _task(tmp_path, wd, mount)

    first = cli(alice, "launch", task, "-y", "-c", "up1")
    assert first.rc == 0, first.err
    assert "hello from the workdir" in first.out and "script ran" in first.out
    assert "mounted file" in first.out
    assert "secret.env" not in first.out  # .gitignore'd: not uploaded, not on the node
    assert "Uploaded 4 of 4 file(s)" in first.err  # hello, run.sh, .gitignore, data.txt
    sent = _stored_bytes(server, "alice")
    assert sent == sum(len(p.read_bytes()) for p in (
        wd / "hello.txt", wd / "sub" / "run.sh", wd / ".gitignore", mount))
    # the server keeps them under alice's uploads only
    assert (server.home / "server" / "uploads" / "alice").is_dir()
    assert not (server.home / "server" / "uploads" / "bob").exists()

    # the same files again (another launch and an exec): no content is sent
    again = cli(alice, "launch", task, "-y", "-c", "up1")
    assert again.rc == 0, again.err
    assert "Uploaded 0 of 4 file(s), 0 bytes (4 already on the server)" in again.err
    assert "hello from the workdir" in again.out
    ex = cli(alice, "exec", "up1", task)
    assert ex.rc == 0 and "script ran" in ex.out, ex.err
    assert _stored_bytes(server, "alice") == sent  # nothing more received

    # one changed file: only that one is sent
    (wd / "hello.txt").write_text("changed\n")
    changed = cli(alice, "launch", task, "-y", "-c", "up1")
    assert changed.rc == 0 and "changed" in changed.out, changed.err
    assert "Uploaded 1 of 4 file(s), 8 bytes (3 already on the server)" in changed.err
    assert _stored_bytes(server, "alice") == sent + 8
    cli(alice, "down", "up1", "-y")


def test_upload_over_the_limit_is_refused_naming_the_path(server: Server, tmp_path: Path) -> None:
    alice = server.client("alice")
    wd = tmp_path / "big"
    wd.mkdir()
    (wd / "weights.bin").write_bytes(b"\0" * 150_000)  # LAUNCHER_API_MAX_UPLOAD is 100000
    task = tmp_path / "big.yaml"
    task.write_text(f"workdir: {wd}\nresources:\n  infra: local\nrun: ls\n")
    r = cli(alice, "launch", str(task), "-y", "-c", "big")
    assert r.rc == 2, r.err
    assert f"workdir: {wd} is 146.5 KiB (150000 bytes)" in r.err
    assert "upload limit" in r.err and "Traceback" not in r.err
    assert _stored_lines(server, "alice") == []
    # the server checks too (a client that does not): the same paragraph
    manifest = {"roots": [{"field": "workdir", "key": None, "source": str(wd), "is_dir": True,
                           "files": [["weights.bin", 150_000, "0" * 64, 0o644, None]]}]}
    resp = httpx.post(f"{server.url}/uploads/missing", json={"manifest": manifest},
                      headers={"Authorization": f"Bearer {server.tokens['alice']}"})
    assert resp.status_code == 400
    assert f"workdir: {wd} is 146.5 KiB (150000 bytes)" in resp.json()["error"]["message"]


def test_a_user_cannot_reach_another_users_uploads(server: Server, tmp_path: Path) -> None:
    from launcher.client.remote import RemoteBackend
    from launcher.task.model import Task

    wd = _workdir(tmp_path)
    task = Task.from_dict({"workdir": str(wd), "resources": {"infra": "local"}, "run": "ls"})
    alice = RemoteBackend(server.url, server.tokens["alice"])
    manifest = alice.upload(task)
    assert manifest is not None
    trees = server.home / "server" / "uploads" / "alice" / "trees"
    alice.call("POST", "/jobs/feasible", json={"task": task.to_dict(), "uploads": manifest})
    [tree] = [p for p in trees.iterdir() if not p.name.startswith(".")]
    assert oct((server.home / "server" / "uploads" / "alice").stat().st_mode & 0o777) == "0o700"

    bob = RemoteBackend(server.url, server.tokens["bob"])
    digests = sorted({f[2] for r in manifest["roots"] for f in r["files"]})
    # bob is told alice's content is missing (his store is his own; nothing leaks)
    assert bob.call("POST", "/uploads/missing", json={"manifest": manifest})["missing"] == digests
    # bob cannot launch from alice's manifest without sending the content himself
    body = {"task": task.to_dict(), "uploads": manifest}
    r = httpx.post(f"{server.url}/jobs/feasible", json=body,
                   headers={"Authorization": f"Bearer {server.tokens['bob']}"})
    assert r.status_code == 400 and "was not uploaded" in r.json()["error"]["message"]
    # nor name alice's copy (or any server path) as his workdir
    for path in (str(tree / "0"), os.path.expanduser("~")):
        theirs = {"task": {**task.to_dict(), "workdir": path}}
        r = httpx.post(f"{server.url}/jobs/feasible", json=theirs,
                       headers={"Authorization": f"Bearer {server.tokens['bob']}"})
        assert r.status_code == 400, r.text
        assert "was not uploaded" in r.json()["error"]["message"]
    assert not (server.home / "server" / "uploads" / "bob" / "trees").exists() or \
        not any(p for p in (server.home / "server" / "uploads" / "bob" / "trees").iterdir()
                if not p.name.startswith("."))
    assert json.loads(json.dumps(manifest))  # the manifest is plain JSON
