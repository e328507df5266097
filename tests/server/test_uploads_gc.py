"""Garbage collection of uploads (launcher/server/uploads_gc.py): what nobody used for the
retention time and no live managed job names goes; a live job's tree stays however old;
and a running server collects on its own."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

from launcher.jobs.state_machine import ManagedJobStatus
from launcher.jobs.store import JobStore
from launcher.runtime.upload_manifest import build_manifest
from launcher.server.uploads import UploadStore
from launcher.server.uploads_gc import collect
from launcher.task.model import Task
from tests.server.conftest import Server, cli, free_port
from tests.waiting import wait_until

DAY = 86400.0


def _upload(store: UploadStore, tmp: Path, name: str, content: str) -> tuple[Path, list[str]]:
    """Upload a one-file workdir as a client would; (its tree root, its blob digests)."""
    wd = tmp / name
    wd.mkdir()
    (wd / "f.txt").write_text(content)
    task = Task.from_dict({"name": name, "workdir": str(wd), "run": "true"})
    manifest = build_manifest(task)
    digests = [f.sha256 for r in manifest.roots for f in r.files]
    tar_path = tmp / f"{name}.tar"
    with tarfile.open(tar_path, "w") as tar:
        for d in digests:
            info = tarfile.TarInfo(d)
            info.size = len(content.encode())
            tar.addfile(info, io.BytesIO(content.encode()))
    store.ingest_tar(tar_path, 1 << 20)
    (root,) = store.materialize(manifest)
    return root, digests


def _age(path: Path, days: float) -> None:
    then = time.time() - days * DAY
    os.utime(path, (then, then))


def test_unused_uploads_go_and_a_live_jobs_tree_stays(launcher_home: Path, tmp_path: Path) -> None:
    store = UploadStore("alice")
    live_root, live_blobs = _upload(store, tmp_path, "live", "kept while the job lives")
    old_root, old_blobs = _upload(store, tmp_path, "old", "nobody needs this")
    new_root, new_blobs = _upload(store, tmp_path, "new", "uploaded today")
    jobs = JobStore()
    try:
        job = jobs.add_job(name="live", task_yaml=f"workdir: {live_root}\nrun: true\n",
                           task_source=None, strategy="EAGER_NEXT_REGION",
                           max_restarts_on_errors=0, recover_on_exit_codes=())
        for p in (live_root.parent, old_root.parent, *(store.blob_path(b) for b in
                                                        live_blobs + old_blobs)):
            _age(p, 10)
        got = collect(7 * DAY)
        assert (got.trees, got.blobs) == (1, 2), got
        assert live_root.exists() and new_root.exists() and not old_root.parent.exists()
        assert not any(store.blob_path(b).exists() for b in live_blobs + old_blobs)
        assert all(store.blob_path(b).exists() for b in new_blobs)

        # asking whether the server has a blob is a use: it is kept
        _age(store.blob_path(new_blobs[0]), 10)
        assert store.missing(new_blobs) == []
        assert collect(7 * DAY).blobs == 0

        jobs.transition(job.id, ManagedJobStatus.CANCELLED, "done")  # the job ends
        assert collect(7 * DAY).trees == 1 and not live_root.parent.exists()
    finally:
        jobs.close()


def test_a_running_server_collects_on_its_own(tmp_path: Path) -> None:
    home = tmp_path / "server-home"
    home.mkdir(mode=0o700)
    stale = home / "server" / "uploads" / "alice" / "blobs" / "ab" / ("ab" + "0" * 62)
    stale.parent.mkdir(parents=True)
    stale.write_text("stale")
    _age(stale, 30)
    srv = Server(home, free_port(), tmp_path, env={"LAUNCHER_API_UPLOAD_RETENTION_DAYS": "7",
                                                    "LAUNCHER_API_UPLOAD_GC_INTERVAL_S": "0.2"})
    r = srv.start()
    assert r.rc == 0, r.err
    try:
        wait_until(lambda: not stale.exists(), 15, "the stale blob collected")
        fresh = stale.parent / ("ab" + "1" * 62)
        fresh.write_text("fresh")
        time.sleep(0.6)  # a few collection rounds: a fresh blob stays
        assert fresh.exists()
    finally:
        cli(home, "api", "stop")
