"""Azure Blob end to end against the Blob REST fake (tests/blob_fake.py, 127.0.0.1, SAS
signatures verified with the account key): the node-side tool (bucket_sync.py +
blob_stdlib.py, as a node runs it, with the SAS file the client ships), file mounts and
storage mounts launched for real on the local cloud, the checkpoint store at the agent
level."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.api.launch import launch
from launcher.clouds.azure import storage as azure_storage
from launcher.clouds.local import LocalCloud
from launcher.runtime import blob_stdlib
from launcher.runtime.execution import FileMountError
from launcher.task.model import Task
from tests.blob_fake import ACCOUNT, BlobFake, blob  # noqa: F401 - the fixture
from tests.checkpoint_view import committed
from tests.runtime.test_agent import RUNTIME_DIR, Agent
from tests.runtime.test_gcs_storage import _until


def _node(home: Path, fake: BlobFake, containers: tuple[str, ...],
          checkpoints: tuple[str, ...] = ()) -> Path:
    """A node home as storage_nodes.install_on_nodes makes it (scripts + SAS file; the
    `checkpoints` containers' SAS may delete)."""
    d = home / ".launcher-storage"
    d.mkdir(parents=True, exist_ok=True)
    for name in ("bucket_sync.py", "s3_stdlib.py", "gcs_stdlib.py", "blob_stdlib.py",
                 "checkpoint_sync.py", "http_stdlib.py"):
        shutil.copy(RUNTIME_DIR / name, d / name)
    entries = azure_storage.node_entries({f"{fake.account}/{c}" for c in containers},
                                         {f"{fake.account}/{c}" for c in checkpoints})
    (d / "azure_sas.json").write_text(json.dumps(entries))
    return d / "bucket_sync.py"


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AZURE_STORAGE")}
    env["HOME"] = str(home)  # the node has no key: only the shipped SAS
    return subprocess.run([sys.executable, "-I", "-S", str(home / ".launcher-storage" /
                                                           "bucket_sync.py"), *args],
                          env=env, capture_output=True, text=True, timeout=60)


def test_download_save_paging_both_uri_forms(blob: BlobFake, tmp_path: Path) -> None:  # noqa: F811
    blob.create("data")
    for name in ("p/a.txt", "p/d/b.txt", "p/d/c.txt", "p/../../evil.txt", "one.json"):
        blob.put("data", name, name.encode())
    home = tmp_path / "node"
    _node(home, blob, ("data", "ckpt", "nope"))
    res = _run(home, "download", f"az://{blob.account}/data/p", "~/data")
    assert res.returncode == 0, res.stderr
    assert "downloaded 3 file(s)" in res.stdout and "(stdlib Azure Blob client)" in res.stdout
    assert (home / "data" / "d" / "c.txt").read_text() == "p/d/c.txt"  # page 2 of 2
    assert not (tmp_path / "evil.txt").exists()
    res = _run(home, "download", f"https://{blob.account}.blob.core.windows.net/data/one.json",
               "~/one.json")  # the https form, same endpoint from the SAS file
    assert res.returncode == 0 and (home / "one.json").read_text() == "one.json", res.stderr
    blob.create("ckpt")
    ck = home / "ck"
    ck.mkdir()
    (ck / "x.txt").write_text("1")
    uri = f"az://{blob.account}/ckpt/run"
    assert "saved 1 file(s)" in _run(home, "save", "~/ck", uri).stdout
    assert _run(home, "save", "~/ck", uri).stdout == ""  # unchanged
    (ck / "x.txt").write_text("22")
    assert "saved 1 file(s)" in _run(home, "save", "~/ck", uri).stdout
    assert committed(blob.keys("ckpt"), lambda k: blob.read("ckpt", k), "run") == {
        "x.txt": "22"}
    bad = _run(home, "download", f"az://{blob.account}/nope/p", "~/x")
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1
    assert "HTTP 404: ContainerNotFound: The specified container does not exist." in bad.stderr


def test_block_upload_and_sas_scope(blob: BlobFake, tmp_path: Path,  # noqa: F811
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    blob.create("big")
    blob.create("other")
    monkeypatch.setenv("LAUNCHER_AZURE_BLOCK_THRESHOLD", "1000")
    client = blob_stdlib.BlobClient(azure_storage.node_entries({f"{blob.account}/big"}))
    client.block_size = 256 * 1024
    data = os.urandom(600 * 1024)
    (tmp_path / "f.bin").write_bytes(data)
    client.upload_file(str(tmp_path / "f.bin"), f"{blob.account}/big", "ck/f.bin")
    assert blob.blobs["big"]["ck/f.bin"][0] == data
    assert sum(r.endswith(" block") for r in blob.requests) == 3  # 3 blocks + 1 list
    client.download_file(f"{blob.account}/big", "ck/f.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == data
    # the node's SAS is the container's: another container with it is refused by Azure
    entries = azure_storage.node_entries({f"{blob.account}/big"})
    stolen = blob_stdlib.BlobClient({f"{blob.account}/other": entries[f"{blob.account}/big"]})
    with pytest.raises(blob_stdlib.BlobError, match="403: AuthenticationFailed"):
        stolen.list(f"{blob.account}/other", "")


@pytest.fixture
def _cleanup(launcher_home: Path) -> Iterator[None]:
    yield
    root = launcher_home / "local"
    if root.exists():
        for cdir in root.iterdir():
            LocalCloud().terminate(cdir.name)


def test_blob_mounts_on_the_local_cloud(blob: BlobFake, tmp_path: Path,  # noqa: F811
                                        _cleanup: None) -> None:
    blob.create("data")
    blob.put("data", "train/a.txt", b"alpha\n")
    blob.put("data", "train/sub/b.txt", b"beta\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "hello.txt").write_text("hello\n")
    path = tmp_path / "task.yaml"
    path.write_text(f"""resources: {{infra: local}}
num_nodes: 2
file_mounts:
  ~/data: az://{blob.account}/data/train
  ~/a.txt: https://{blob.account}.blob.core.windows.net/data/train/a.txt
  ~/code:
    name: fresh-code
    source: ./src
    store: azure
    mode: COPY
setup: cat ~/data/a.txt ~/data/sub/b.txt ~/a.txt ~/code/hello.txt
run: "true"
""")
    setup_lines: list[str] = []
    events: list[str] = []
    result = launch(Task.from_yaml(str(path)), "azm", on_setup_line=setup_lines.append,
                    on_event=events.append)
    assert result.exit_code == 0
    assert blob.keys("fresh-code") == ["hello.txt"]
    assert any(f"Created bucket az://{blob.account}/fresh-code" in e for e in events)
    for rank in (0, 1):
        assert [ln for ln in setup_lines if ln.startswith(f"(setup {rank})")] == [
            f"(setup {rank}) {t}" for t in ("alpha", "beta", "alpha", "hello")]
        sas = LocalCloud().node_dir("azm", rank) / ".launcher-storage" / "azure_sas.json"
        doc = json.loads(sas.read_text())
        assert sorted(doc) == [f"{blob.account}/data", f"{blob.account}/fresh-code"]
        assert doc[f"{blob.account}/data"]["endpoint"] == blob.endpoint
        assert "sp=racwl" in doc[f"{blob.account}/data"]["sas"]  # no delete
        assert doc[f"{blob.account}/data"]["expires_at"] > time.time() + 6 * 86400
        assert stat.S_IMODE(sas.stat().st_mode) == 0o600
        assert blob.key not in sas.read_text()  # the account key stays on the client


def test_blob_mount_without_a_key_is_refused_before_provisioning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("launcher.clouds.azure.session.local_credentials_source", lambda: None)
    path = tmp_path / "task.yaml"
    path.write_text("resources: {infra: local}\nfile_mounts:\n  ~/d: az://acct/c/x\n"
                    "run: 'true'\n")
    with pytest.raises(FileMountError, match=r"file_mounts\.~/d.*storage account 'acct'"):
        launch(Task.from_yaml(str(path)), "aznokey")
    assert not LocalCloud().node_dir("aznokey", 0).exists()


STORE = f"az://{ACCOUNT}/ckpt/run/task-1"


@pytest.fixture
def agent2(tmp_path: Path, blob: BlobFake) -> Iterator[Agent]:  # noqa: F811
    blob.create("ckpt")
    a = Agent(tmp_path / "cluster", num_nodes=2)
    for node in a.nodes:
        _node(node, blob, ("ckpt",), checkpoints=("ckpt",))
    a.setup()
    try:
        yield a
    finally:
        a.close()


def test_agent_restores_saves_periodically_and_at_exit(agent2: Agent, blob: BlobFake) -> None:  # noqa: F811
    blob.put("ckpt", "run/task-1/step.txt", b"41\n")
    run = ('echo "restored $(cat $LAUNCHER_CHECKPOINT_DIR/step.txt)"; '
           'echo $((42 + LAUNCHER_NODE_RANK)) > "$LAUNCHER_CHECKPOINT_DIR/rank-$LAUNCHER_NODE_RANK.txt"; '
           "sleep 1.5; echo done > \"$LAUNCHER_CHECKPOINT_DIR/end-$LAUNCHER_NODE_RANK.txt\"")
    spec = {"run": run, "num_nodes": 2, "checkpoint_dir": "ckpt", "checkpoint_store": STORE,
            "checkpoint_save_seconds": 0.5}
    job = int(agent2.doc("submit", stdin=json.dumps(spec))["job_id"])
    def view() -> dict[str, str]:
        return committed(blob.keys("ckpt"), lambda k: blob.read("ckpt", k), "run/task-1")

    _until(lambda: "rank-1.txt" in view())
    assert agent2.job(job)["status"] == "RUNNING"
    assert agent2.wait_status(job)["status"] == "SUCCEEDED"
    assert sorted(view()) == ["end-0.txt", "end-1.txt", "rank-0.txt", "rank-1.txt", "step.txt"]
    lines, _ = agent2.logs(job)
    for rank in (0, 1):
        assert f"(rank {rank}) restored 41" in lines


def test_plan_accepts_s3_gs_and_azure_and_refuses_the_rest(tmp_path: Path,
                                                          blob: BlobFake) -> None:  # noqa: F811
    from launcher.runtime.storage_nodes import plan_bucket_copies

    def task(mounts: str) -> Task:
        path = tmp_path / "t.yaml"
        path.write_text(f"resources: {{infra: local}}\nfile_mounts:\n{mounts}run: 'true'\n")
        return Task.from_yaml(str(path))

    copies = plan_bucket_copies(task(
        "  ~/a: s3://b/x\n  ~/b: gs://b/y\n  ~/c: az://acct/cont/z\n"
        "  ~/d: https://acct.blob.core.windows.net/cont/w\n"
        "  ~/e: {name: made-here, store: azure, mode: COPY}\n"))
    assert [(c.store, c.create_bucket) for c in copies] == [
        ("s3", None), ("gcs", None), ("azure", None), ("azure", None),
        ("azure", f"{blob.account}/made-here")]
    assert copies[-1].uri == f"az://{blob.account}/made-here"
    with pytest.raises(FileMountError, match=r"file_mounts\.~/r.*r2 buckets"):
        plan_bucket_copies(task("  ~/r: r2://b/x\n"))
    with pytest.raises(FileMountError, match=r"file_mounts\.~/c.*names no bucket"):
        plan_bucket_copies(task("  ~/c: az://acct\n"))


def test_without_a_key_a_user_delegation_sas_from_entra_id(
        blob: BlobFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from types import SimpleNamespace

    from tests.blob_fake import BEARER

    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING",  # the endpoint only: no key
                       f"AccountName={blob.account};BlobEndpoint={blob.endpoint}")
    scopes: list[str] = []

    class Credential:  # DefaultAzureCredential's interface
        def get_token(self, scope: str) -> SimpleNamespace:
            scopes.append(scope)
            return SimpleNamespace(token=BEARER, expires_on=int(time.time()) + 3600)

    monkeypatch.setattr(azure_storage, "_credential", Credential)
    assert azure_storage.ensure_bucket(f"{blob.account}/ud") is True  # bearer auth
    assert azure_storage.ensure_bucket(f"{blob.account}/ud") is False
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.txt").write_text("x")
    assert azure_storage.upload_dir(str(tmp_path / "src"), f"{blob.account}/ud") == (1, 1)
    entries = azure_storage.node_entries({f"{blob.account}/ud"})
    sas = entries[f"{blob.account}/ud"]["sas"]
    assert "skoid=" in str(sas) and "sp=racwl" in str(sas)
    assert blob_stdlib.BlobClient(entries).list(f"{blob.account}/ud", "") == {
        "f.txt": (1, pytest.approx(time.time(), abs=5))}
    assert scopes and set(scopes) == {"https://storage.azure.com/.default"}
