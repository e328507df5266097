"""S3 file mounts and storage mounts, launched for real on the local cloud against moto S3.

Local-cloud nodes are processes on this machine with their own homes, so the
node-side copy (bucket_sync.py, run by each node) really downloads from the moto
server on 127.0.0.1; nothing is streamed through the client but a local `source`.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api.launch import launch
from launcher.api.planning import plan
from launcher.clouds.local import LocalCloud
from launcher.runtime.execution import FileMountError
from launcher.task.model import Task
from tests.moto_s3 import S3Server, s3  # noqa: F401 - the fixture

MARK = "file_mounts./data.mode"


@pytest.fixture(autouse=True)
def _cleanup(launcher_home: Path) -> Iterator[None]:
    yield
    root = launcher_home / "local"
    if root.exists():
        for cdir in root.iterdir():
            LocalCloud().terminate(cdir.name)


def _task(tmp_path: Path, body: str) -> Task:
    path = tmp_path / "task.yaml"
    path.write_text("resources: {infra: local}\n" + body)
    return Task.from_yaml(str(path))


def test_s3_file_mount_lands_on_every_node_before_setup(
        s3: S3Server, tmp_path: Path, launcher_home: Path) -> None:  # noqa: F811
    c = s3.client()
    c.create_bucket(Bucket="data-bkt")
    c.put_object(Bucket="data-bkt", Key="train/a.txt", Body=b"alpha\n")
    c.put_object(Bucket="data-bkt", Key="train/sub/b.txt", Body=b"beta\n")
    c.put_object(Bucket="data-bkt", Key="other/x.txt", Body=b"not mine\n")
    c.put_object(Bucket="data-bkt", Key="cfg.json", Body=b"{}\n")
    task = _task(tmp_path, """num_nodes: 2
file_mounts:
  ~/data: s3://data-bkt/train
  ~/cfg.json: s3://data-bkt/cfg.json
setup: cat ~/data/a.txt ~/data/sub/b.txt ~/cfg.json
run: cat ~/data/a.txt
""")
    setup_lines: list[str] = []
    lines: list[str] = []
    result = launch(task, "s3m", on_line=lines.append, on_setup_line=setup_lines.append)
    assert result.exit_code == 0
    for rank in (0, 1):  # setup read the objects on both nodes: they were there before it
        assert [ln for ln in setup_lines if ln.startswith(f"(setup {rank})")] == [
            f"(setup {rank}) alpha", f"(setup {rank}) beta", f"(setup {rank}) {{}}"]
    nodes = [LocalCloud().node_dir("s3m", r) for r in (0, 1)]
    for node in nodes:
        assert not (node / "data" / "x.txt").exists()  # only the prefix was copied
        creds = node / ".aws" / "credentials"  # the client's keys, private to the node user
        assert "aws_access_key_id = testing" in creds.read_text()
        assert stat.S_IMODE(creds.stat().st_mode) == 0o600
        assert s3.url in (node / ".launcher-storage" / "config.json").read_text()


def test_storage_mount_with_local_source_is_uploaded_then_copied(
        s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "hello.txt").write_text("hello from the laptop\n")
    (src / "pkg" / "mod.py").write_text("X = 1\n")
    task = _task(tmp_path, """num_nodes: 2
file_mounts:
  ~/code:
    name: fresh-code-bkt
    source: ./src
    mode: COPY
  ~/out:
    name: fresh-out-bkt
    store: s3
    mode: COPY
setup: cat ~/code/hello.txt && test -d ~/out
run: cat ~/code/pkg/mod.py
""")
    events: list[str] = []
    setup_lines: list[str] = []
    result = launch(task, "s3u", on_event=events.append, on_setup_line=setup_lines.append)
    assert result.exit_code == 0
    assert s3.keys("fresh-code-bkt") == ["hello.txt", "pkg/mod.py"]  # created + uploaded
    assert s3.keys("fresh-out-bkt") == []  # name only: created empty
    assert any("Created bucket s3://fresh-code-bkt" in e for e in events)
    assert sorted(setup_lines) == ["(setup 0) hello from the laptop",
                                   "(setup 1) hello from the laptop"]
    for rank in (0, 1):
        node = LocalCloud().node_dir("s3u", rank)
        assert (node / "code" / "pkg" / "mod.py").read_text() == "X = 1\n"


@pytest.mark.parametrize("mode", ["MOUNT", "MOUNT_CACHED", None])
def test_mount_mode_is_refused_at_launch_and_planned_by_dry_runs(tmp_path: Path,
                                                                 mode: str | None) -> None:
    line = f"    mode: {mode}\n" if mode else ""  # no mode = SkyPilot's default, MOUNT
    task = _task(tmp_path, "file_mounts:\n  /data:\n    source: s3://some-bkt/x\n" + line
                 + "run: echo hi\n")
    with pytest.raises(FileMountError) as err:
        launch(task, "mnt")
    text = str(err.value)
    # the mode's own line, or (SkyPilot's default, not written) the mount's line
    assert f"task.yaml:{5 if mode else 3}, field '{MARK}'" in text
    assert f"mode {mode or 'MOUNT'} would mount" in text
    assert "FUSE" in text and "mode: COPY" in text
    assert not (LocalCloud().node_dir("mnt", 0)).exists()  # refused before provisioning
    p = plan(task)  # what --dryrun and `launcher cost` do: planned, not refused
    assert p.chosen is not None


def test_dryrun_cli_accepts_mount_mode_and_other_stores(tmp_path: Path,
                                                        launcher_home: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("resources: {infra: local}\nfile_mounts:\n  /a: {source: s3://b1/x}\n"
                    "  /b: {name: bkt-two, store: gcs, mode: MOUNT_CACHED}\n  /c: gs://b3/y\n"
                    "run: echo hi\n")
    env = dict(os.environ, LAUNCHER_HOME=str(launcher_home))
    probe = ("import atexit, sys; atexit.register(lambda: print('boto3 imported' if 'boto3' in "
             "sys.modules else 'no boto3', file=sys.stderr)); "
             "from launcher.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", probe, "launch", str(path), "--dryrun"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().endswith("no boto3")  # planning buckets needs no SDK


def test_other_stores_are_planned_but_refused_at_launch(tmp_path: Path) -> None:
    task = _task(tmp_path, "file_mounts:\n  /data:\n    name: my-r2-bkt\n    store: r2\n"
                 "    mode: COPY\nrun: echo hi\n")
    assert plan(task).chosen is not None
    with pytest.raises(FileMountError, match=r"file_mounts\./data\.store.*store 'r2'"):
        launch(task, "r2")


def test_node_credentials_instance_role_and_ssh_hosts_own_files(
        s3: S3Server, launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from launcher.clouds.base import ProvisionRequest
    from launcher.runtime.execution import close_runners, open_runners
    from launcher.runtime.storage_nodes import install_on_nodes

    cluster = LocalCloud().provision(ProvisionRequest("cr", "local", "local", None, "local", 2,
                                                      False))
    homes = [Path(n.local_root or "") for n in cluster.nodes]
    (homes[0] / ".aws").mkdir()
    (homes[0] / ".aws" / "credentials").write_text("[default]\nmine = 1\n")
    runners = open_runners(cluster)
    try:
        install_on_nodes(runners, "ssh")  # an SSH pool host keeps its own credentials
        assert (homes[0] / ".aws" / "credentials").read_text() == "[default]\nmine = 1\n"
        assert "aws_secret_access_key = testing" in (homes[1] / ".aws" / "credentials"
                                                     ).read_text()
        from launcher.config.settings import LauncherConfig

        if not hasattr(LauncherConfig(), "aws"):  # the provisioner's `aws:` config section
            return
        (launcher_home / "config.yaml").write_text("aws:\n  iam_instance_profile: node-role\n")
        (homes[1] / ".aws" / "credentials").unlink()
        install_on_nodes(runners, "aws")  # the instance role: no keys copied
        assert not (homes[1] / ".aws" / "credentials").exists()
        assert (homes[1] / ".launcher-storage" / "bucket_sync.py").exists()
    finally:
        close_runners(runners)
