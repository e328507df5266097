"""gs:// end to end against the GCS JSON API fake (tests/gcs_fake.py, 127.0.0.1):
the node-side tool (bucket_sync.py + gcs_stdlib.py, run as a node runs it), file mounts
and storage mounts launched for real on the local cloud, and the checkpoint store at the
agent level (the real agent daemon and rank programs)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from launcher.api.launch import launch
from launcher.clouds.local import LocalCloud
from launcher.runtime import gcs_stdlib
from launcher.task.model import Task
from tests.checkpoint_view import committed
from tests.gcs_fake import GCSFake, gcs  # noqa: F401 - the fixture
from tests.runtime.test_agent import RUNTIME_DIR, Agent

SCRIPT = Path(__file__).resolve().parents[2] / "launcher" / "runtime" / "bucket_sync.py"


def _node(home: Path) -> Path:
    """A node home with the shipped scripts, as storage_nodes.install_on_nodes makes it."""
    d = home / ".launcher-storage"
    d.mkdir(parents=True, exist_ok=True)
    for name in ("bucket_sync.py", "s3_stdlib.py", "gcs_stdlib.py", "http_stdlib.py",
                 "checkpoint_sync.py"):
        shutil.copy(RUNTIME_DIR / name, d / name)
    return d / "bucket_sync.py"


def _run(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ, HOME=str(home), **env)
    for k in [k for k, v in env.items() if v == ""]:
        full.pop(k)
    return subprocess.run([sys.executable, "-I", "-S", str(_node(home)), *args], env=full,
                          capture_output=True, text=True, timeout=60)


def test_download_save_paging_and_shipped_token(gcs: GCSFake, tmp_path: Path) -> None:  # noqa: F811
    gcs.create_bucket("bkt")
    for name in ("p/a.txt", "p/d/b.txt", "p/d/c.txt", "p/../../evil.txt", "one.json"):
        gcs.put("bkt", name, name.encode())
    home = tmp_path / "node"
    # the token the client shipped (no env token on the node; no metadata server)
    _node(home)
    (home / ".launcher-storage" / "gcs_token.json").write_text(json.dumps(
        {"access_token": gcs.token, "expires_at": time.time() + 3600}))
    env = {"LAUNCHER_GCS_TOKEN": "", "GCE_METADATA_HOST": "127.0.0.1:9"}
    res = _run(home, "download", "gs://bkt/p", "~/data", **env)
    assert res.returncode == 0, res.stderr
    assert "downloaded 3 file(s)" in res.stdout and "(stdlib GCS client)" in res.stdout
    assert (home / "data" / "d" / "c.txt").read_text() == "p/d/c.txt"  # page 2 of 2
    assert not (tmp_path / "evil.txt").exists()
    res = _run(home, "download", "gs://bkt/one.json", "~/one.json", **env)
    assert res.returncode == 0 and (home / "one.json").read_text() == "one.json"
    assert _run(home, "download", "gs://bkt/p", "~/data", **env).stdout.count("0 file(s)")
    ck = home / "ck"
    ck.mkdir()
    (ck / "x.txt").write_text("1")
    assert "saved 1 file(s)" in _run(home, "save", "~/ck", "gs://bkt/run", **env).stdout
    assert _run(home, "save", "~/ck", "gs://bkt/run", **env).stdout == ""  # unchanged
    (ck / "x.txt").write_text("22")
    assert "saved 1 file(s)" in _run(home, "save", "~/ck", "gs://bkt/run", **env).stdout
    assert committed(gcs.keys("bkt"), lambda k: gcs.read("bkt", k), "run") == {"x.txt": "22"}
    bad = _run(home, "download", "gs://nope/p", "~/x", **env)  # one readable line, exit 1
    assert bad.returncode == 1 and "HTTP 404" in bad.stderr and len(bad.stderr.splitlines()) == 1
    (home / ".launcher-storage" / "gcs_token.json").unlink()
    denied = _run(home, "restore", "gs://bkt/p", "~/y", **env)
    assert denied.returncode == 1 and "HTTP 401" in denied.stderr


def test_resumable_upload_in_chunks(gcs: GCSFake, tmp_path: Path,  # noqa: F811
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    gcs.create_bucket("big")
    monkeypatch.setenv("LAUNCHER_GCS_RESUMABLE_THRESHOLD", "1000")
    client = gcs_stdlib.GCSClient()
    client.chunk_size = 256 * 1024
    data = os.urandom(600 * 1024)
    (tmp_path / "f.bin").write_bytes(data)
    client.upload_file(str(tmp_path / "f.bin"), "big", "ck/f.bin")
    assert gcs.objects["big"]["ck/f.bin"][0] == data
    assert sum(r.startswith("PUT /upload") for r in gcs.requests) == 3  # 3 chunks
    client.download_file("big", "ck/f.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == data


@pytest.fixture
def _cleanup(launcher_home: Path) -> Iterator[None]:
    yield
    root = launcher_home / "local"
    if root.exists():
        for cdir in root.iterdir():
            LocalCloud().terminate(cdir.name)


def test_gs_mounts_on_the_local_cloud(gcs: GCSFake, tmp_path: Path,  # noqa: F811
                                      _cleanup: None) -> None:
    gcs.create_bucket("data-bkt")
    gcs.put("data-bkt", "train/a.txt", b"alpha\n")
    gcs.put("data-bkt", "train/sub/b.txt", b"beta\n")
    gcs.put("data-bkt", "cfg.json", b"{}\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "hello.txt").write_text("hello\n")
    path = tmp_path / "task.yaml"
    path.write_text("""resources: {infra: local}
num_nodes: 2
file_mounts:
  ~/data: gs://data-bkt/train
  ~/cfg.json: gs://data-bkt/cfg.json
  ~/code:
    name: fresh-gcs-code
    source: ./src
    store: gcs
    mode: COPY
setup: cat ~/data/a.txt ~/data/sub/b.txt ~/cfg.json ~/code/hello.txt
run: "true"
""")
    setup_lines: list[str] = []
    events: list[str] = []
    result = launch(Task.from_yaml(str(path)), "gsm", on_setup_line=setup_lines.append,
                    on_event=events.append)
    assert result.exit_code == 0
    assert gcs.keys("fresh-gcs-code") == ["hello.txt"] and gcs.buckets["fresh-gcs-code"] == "proj"
    assert any("Created bucket gs://fresh-gcs-code" in e for e in events)
    for rank in (0, 1):
        assert [ln for ln in setup_lines if ln.startswith(f"(setup {rank})")] == [
            f"(setup {rank}) {t}" for t in ("alpha", "beta", "{}", "hello")]
        store = LocalCloud().node_dir("gsm", rank) / ".launcher-storage"
        token = store / "gcs_token.json"
        assert json.loads(token.read_text())["access_token"] == gcs.token
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        assert gcs.url in (store / "config.json").read_text()
        assert not (LocalCloud().node_dir("gsm", rank) / ".aws").exists()  # no S3: no keys


STORE = "gs://ckpt-bkt/run/task-1"


@pytest.fixture
def agent2(tmp_path: Path, gcs: GCSFake) -> Iterator[Agent]:  # noqa: F811
    gcs.create_bucket("ckpt-bkt")
    a = Agent(tmp_path / "cluster", num_nodes=2)  # after `gcs`: its env reaches the nodes
    for node in a.nodes:
        _node(node)
    a.setup()
    try:
        yield a
    finally:
        a.close()


def _until(cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_agent_restores_saves_periodically_and_at_exit(agent2: Agent, gcs: GCSFake) -> None:  # noqa: F811
    gcs.put("ckpt-bkt", "run/task-1/step.txt", b"41\n")
    run = ('echo "restored $(cat $LAUNCHER_CHECKPOINT_DIR/step.txt)"; '
           'echo $((42 + LAUNCHER_NODE_RANK)) > "$LAUNCHER_CHECKPOINT_DIR/rank-$LAUNCHER_NODE_RANK.txt"; '
           "sleep 1.5; echo done > \"$LAUNCHER_CHECKPOINT_DIR/end-$LAUNCHER_NODE_RANK.txt\"")
    spec = {"run": run, "num_nodes": 2, "checkpoint_dir": "ckpt", "checkpoint_store": STORE,
            "checkpoint_save_seconds": 0.5}
    job = int(agent2.doc("submit", stdin=json.dumps(spec))["job_id"])
    def view() -> dict[str, str]:
        return committed(gcs.keys("ckpt-bkt"), lambda k: gcs.read("ckpt-bkt", k), "run/task-1")

    _until(lambda: "rank-1.txt" in view())
    assert agent2.job(job)["status"] == "RUNNING"  # saved periodically while running
    assert agent2.wait_status(job)["status"] == "SUCCEEDED"
    assert sorted(view()) == ["end-0.txt", "end-1.txt", "rank-0.txt", "rank-1.txt",
                              "step.txt"]  # + at exit
    lines, _ = agent2.logs(job)
    for rank in (0, 1):
        assert f"(rank {rank}) restored 41" in lines


def test_gs_mount_without_google_credentials_is_refused_before_provisioning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.runtime.execution import FileMountError

    for var in ("LAUNCHER_GCS_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setattr("launcher.clouds.gcp.session._is_gce_host", lambda: False)
    path = tmp_path / "task.yaml"
    path.write_text("resources: {infra: local}\nfile_mounts:\n  ~/d: gs://b/x\nrun: 'true'\n")
    with pytest.raises(FileMountError, match=r"file_mounts\.~/d.*Google credentials"):
        launch(Task.from_yaml(str(path)), "gsnocreds")
    assert not (LocalCloud().node_dir("gsnocreds", 0)).exists()
