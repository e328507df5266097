"""The checkpoint protocol (launcher/runtime/checkpoint_sync.py) on every store backend the
nodes use: the stdlib S3 client and boto3 against moto's S3 server, the stdlib GCS client
against the GCS fake, the stdlib Blob client against the Blob fake (with the SAS a node
gets). Saves skip temporary files and files written while they upload, commit with a
manifest written last, collect superseded saves; restores read exactly one committed save
per writer."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launcher.clouds.azure import storage as azure_storage
from launcher.runtime import blob_stdlib, bucket_sync, checkpoint_sync, gcs_stdlib, s3_stdlib
from launcher.runtime.checkpoint_sync import NodeState, restore, save
from tests.blob_fake import BlobFake, blob  # noqa: F401 - the fixture
from tests.checkpoint_view import committed
from tests.gcs_fake import GCSFake, gcs  # noqa: F401 - the fixture
from tests.moto_s3 import S3Server, s3  # noqa: F401 - the fixture

PREFIX = "run/t1/"


@dataclass
class Store:
    """One backend: the node-side client, its bucket name, and the fake's own view."""

    name: str
    client: Any
    bucket: str
    listing: Callable[[], list[str]]
    read: Callable[[str], str]
    put: Callable[[str, bytes], None]

    def view(self) -> dict[str, str]:
        return committed(self.listing(), self.read, PREFIX)


@pytest.fixture(params=["s3-stdlib", "s3-boto3", "gcs", "azure"])
def store(request: pytest.FixtureRequest) -> Store:
    kind = request.param
    if kind.startswith("s3"):
        server: S3Server = request.getfixturevalue("s3")
        server.client().create_bucket(Bucket="ck-bkt")
        client: Any = (s3_stdlib.S3Client() if kind == "s3-stdlib"
                  else bucket_sync._Boto3(bucket_sync._boto3_client()))
        return Store(kind, client, "ck-bkt", lambda: server.keys("ck-bkt"),
                     lambda k: server.read("ck-bkt", k),
                     lambda k, b: server.client().put_object(Bucket="ck-bkt", Key=k, Body=b))
    if kind == "gcs":
        fake: GCSFake = request.getfixturevalue("gcs")
        fake.create_bucket("ck")
        return Store(kind, gcs_stdlib.GCSClient(), "ck", lambda: fake.keys("ck"),
                     lambda k: fake.read("ck", k), lambda k, b: fake.put("ck", k, b))
    bfake: BlobFake = request.getfixturevalue("blob")
    bfake.create("ck")
    bucket = f"{bfake.account}/ck"
    client = blob_stdlib.BlobClient(azure_storage.node_entries({bucket}, {bucket}))
    return Store(kind, client, bucket, lambda: bfake.keys("ck"), lambda k: bfake.read("ck", k),
                 lambda k, b: bfake.put("ck", k, b))


def _write(path: Path, text: str, mtime_ns: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def _save(store: Store, src: Path, writer: str = "rank-0", client: Any = None
          ) -> checkpoint_sync.SaveResult:
    return save(client or store.client, store.bucket, PREFIX, str(src),
                NodeState(str(src), "store://ck", home=str(src.parent)), writer)


def _uri(store: Store) -> str:
    scheme = {"gcs": "gs", "azure": "az"}.get(store.name, "s3")
    return f"{scheme}://{store.bucket}/{PREFIX}"


def _restore(store: Store, dest: Path, client: Any = None) -> checkpoint_sync.RestoreResult:
    c = client or store.client

    def legacy() -> tuple[int, int]:
        return bucket_sync._download(c, _uri(store), str(dest), False, checkpoint=True)

    return restore(c, store.bucket, PREFIX, str(dest),
                   NodeState(str(dest), "store://ck", home=str(dest.parent)), legacy)


class _Spy:
    """The store's client, with a hook called after each upload or before each download."""

    def __init__(self, inner: Any, after_upload: Callable[[str, str], None] | None = None,
                 before_download: Callable[[str], None] | None = None) -> None:
        self.inner, self.name = inner, inner.name
        self.after_upload, self.before_download = after_upload, before_download

    def list(self, bucket: str, prefix: str) -> dict[str, tuple[int, float]]:
        return dict(self.inner.list(bucket, prefix))

    def upload_file(self, path: str, bucket: str, key: str) -> None:
        self.inner.upload_file(path, bucket, key)
        if self.after_upload is not None:
            self.after_upload(path, key)

    def download_file(self, bucket: str, key: str, path: str) -> None:
        if self.before_download is not None:
            self.before_download(key)
        self.inner.download_file(bucket, key, path)

    def delete(self, bucket: str, key: str) -> None:
        self.inner.delete(bucket, key)


def test_temporary_files_are_never_saved(store: Store, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    for name in ("model.pt", "step.json.tmp", ".count.json.123.tmp", "shard.partial",
                 "sub/part-2.partial", "sub/ok.bin"):
        _write(ck / name, name)
    res = _save(store, ck)
    assert res.count == 2 and res.seq == 1
    assert store.view() == {"model.pt": "model.pt", "sub/ok.bin": "sub/ok.bin"}
    assert not [k for k in store.listing() if k.endswith((".tmp", ".partial"))]


def test_a_file_written_during_its_upload_waits_for_the_next_save(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ck = tmp_path / "ck"
    _write(ck / "model.pt", "v1")
    _write(ck / "opt.pt", "o1")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert "saved 2 file(s)" in bucket_sync._save(store.client, str(ck), _uri(store))
    _write(ck / "model.pt", "v2-half")
    _write(ck / "opt.pt", "o2")

    def writer_still_busy(path: str, key: str) -> None:  # the job appends while we read
        if path.endswith("model.pt"):
            with open(path, "a") as f:
                f.write("-rest")

    spy = _Spy(store.client, after_upload=writer_still_busy)
    monkeypatch.setenv("HOME", str(tmp_path))  # bucket_sync keeps its state under ~
    summary = bucket_sync._save(spy, str(ck), _uri(store))
    assert summary.startswith("saved 1 file(s), 2 bytes") and "save 2" in summary
    assert "1 file(s) changed while being uploaded and wait for the next save: model.pt" \
        in summary
    # the committed save keeps the last complete copy of model.pt, never the torn one
    assert store.view() == {"model.pt": "v1", "opt.pt": "o2"}
    assert "saved 1 file(s)" in bucket_sync._save(store.client, str(ck), _uri(store))
    assert store.view() == {"model.pt": "v2-half-rest", "opt.pt": "o2"}


def test_an_interrupted_save_is_never_restored_and_is_collected(store: Store,
                                                                tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _write(ck / "a.txt", "1")
    _write(ck / "b.txt", "1")
    _save(store, ck)
    _write(ck / "a.txt", "2")
    _write(ck / "b.txt", "2")

    def killed(path: str, key: str) -> None:
        raise KeyboardInterrupt  # the node dies after one upload, before the manifest

    with pytest.raises(KeyboardInterrupt):
        _save(store, ck, client=_Spy(store.client, after_upload=killed))
    torn = [k for k in store.listing() if "/0000000002-" in k]
    assert len(torn) == 1  # one object of save 2 is in the store ...
    back = tmp_path / "back"
    _restore(store, back)  # ... and a restore ignores it: save 1, whole
    assert (back / "a.txt").read_text() == "1" and (back / "b.txt").read_text() == "1"

    assert _save(store, ck).seq == 2  # the next save takes the number and commits
    _write(ck / "a.txt", "3")
    assert _save(store, ck).seq == 3
    keys = store.listing()
    assert torn[0] not in keys  # the interrupted save's object was collected
    manifests = sorted(k for k in keys if "/.launcher/manifests/" in k)
    assert [m.rsplit("/", 1)[1] for m in manifests] == ["0000000002.json", "0000000003.json"]
    objects = {k for k in keys if "/.launcher/objects/" in k}
    assert len(objects) == 3  # a.txt of saves 2 and 3, b.txt of save 2 (still current)
    assert store.view() == {"a.txt": "3", "b.txt": "2"}


def test_a_restore_starts_over_when_a_newer_save_collects_what_it_reads(
        store: Store, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    _write(ck / "w.bin", "1")
    _save(store, ck)
    fired: list[str] = []

    def meanwhile(key: str) -> None:
        if "/.launcher/objects/" in key and not fired:
            fired.append(key)  # two newer saves commit and collect save 1's objects
            for v in ("2", "3"):
                _write(ck / "w.bin", v)
                _save(store, ck)

    back = tmp_path / "back"
    res = _restore(store, back, client=_Spy(store.client, before_download=meanwhile))
    assert fired and fired[0] not in store.listing()
    assert (back / "w.bin").read_text() == "3" and res.saves == ["rank-0 save 3"]


def test_writers_merge_newest_first_and_restored_files_are_not_saved_again(
        store: Store, tmp_path: Path) -> None:
    n0, n1 = tmp_path / "n0" / "ck", tmp_path / "n1" / "ck"
    _write(n0 / "shared.pt", "old", mtime_ns=1_000_000_000_000_000_000)
    _write(n0 / "rank-0.pt", "r0")
    _write(n1 / "shared.pt", "new", mtime_ns=1_000_000_500_000_000_000)
    _write(n1 / "rank-1.pt", "r1")
    _save(store, n0, "rank-0")
    _save(store, n1, "rank-1")
    fresh = tmp_path / "n2" / "ck"
    res = _restore(store, fresh)
    assert sorted(res.saves) == ["rank-0 save 1", "rank-1 save 1"]
    assert {p.name: p.read_text() for p in fresh.iterdir()} == {
        "shared.pt": "new", "rank-0.pt": "r0", "rank-1.pt": "r1"}
    assert (fresh / "shared.pt").stat().st_mtime_ns == 1_000_000_500_000_000_000
    assert _save(store, fresh, "rank-0").count == 0  # all in step with the store already
    _write(fresh / "rank-1.pt", "r1-by-rank-0")  # a changed file is this writer's now
    assert _save(store, fresh, "rank-0").count == 1
    assert store.view()["rank-1.pt"] == "r1-by-rank-0"


def test_a_prefix_saved_before_manifests_is_restored_then_adopted(store: Store,
                                                                 tmp_path: Path) -> None:
    store.put(PREFIX + "count.json", b'{"count": 7}')
    store.put(PREFIX + ".count.json.99.tmp", b'{"cou')
    back = tmp_path / "n" / "ck"
    res = _restore(store, back)
    assert res.saves == [] and res.count == 1
    assert sorted(p.name for p in back.iterdir()) == ["count.json"]
    assert _save(store, back).count == 1  # the first save commits the legacy file too
    again = tmp_path / "m" / "ck"
    _restore(store, again)
    assert (again / "count.json").read_text() == '{"count": 7}'


def test_a_refused_delete_is_reported_and_the_save_stands(
        blob: BlobFake, tmp_path: Path) -> None:  # noqa: F811
    blob.create("ck")
    bucket = f"{blob.account}/ck"
    no_delete = blob_stdlib.BlobClient(azure_storage.node_entries({bucket}))  # racwl
    store = Store("azure", no_delete, bucket, lambda: blob.keys("ck"),
                  lambda k: blob.read("ck", k), lambda k, b: blob.put("ck", k, b))
    ck = tmp_path / "ck"
    for v in "123":
        _write(ck / "x", v)
        res = _save(store, ck)
    assert res.seq == 3 and "AuthorizationPermissionMismatch" in res.gc_error
    assert store.view() == {"x": "3"}
