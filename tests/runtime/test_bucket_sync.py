"""The node-side bucket tool against moto's S3 server: boto3 path, and the opt-in `aws`
CLI backend (`LAUNCHER_S3_BACKEND=cli`; the default without boto3, the stdlib client,
is tested in test_s3_stdlib.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.checkpoint_view import committed
from tests.moto_s3 import S3Server, s3  # noqa: F401 - the fixture

SCRIPT = Path(__file__).resolve().parents[2] / "launcher" / "runtime" / "bucket_sync.py"


def _run(*args: str, home: Path, no_site: bool = False) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, HOME=str(home))
    argv = [sys.executable, *(["-S"] if no_site else []), str(SCRIPT), *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def bucket(s3: S3Server) -> S3Server:  # noqa: F811
    c = s3.client()
    c.create_bucket(Bucket="bs-bkt")
    c.put_object(Bucket="bs-bkt", Key="p/a.txt", Body=b"a")
    c.put_object(Bucket="bs-bkt", Key="p/d/b.txt", Body=b"bb")
    c.put_object(Bucket="bs-bkt", Key="p/../../evil.txt", Body=b"x")  # never outside DEST
    c.put_object(Bucket="bs-bkt", Key="one.json", Body=b"{}")
    return s3


def test_download_prefix_and_single_object(bucket: S3Server, tmp_path: Path) -> None:
    res = _run("download", "s3://bs-bkt/p", "~/data", home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "downloaded 2 file(s), 3 bytes" in res.stdout
    assert (tmp_path / "data" / "d" / "b.txt").read_text() == "bb"
    assert not (tmp_path / "evil.txt").exists() and not list(tmp_path.glob("../evil.txt"))
    again = _run("download", "s3://bs-bkt/p", "~/data", home=tmp_path)
    assert "downloaded 0 file(s)" in again.stdout  # unchanged files are skipped
    assert _run("download", "s3://bs-bkt/one.json", "cfg.json", home=tmp_path).returncode == 0
    assert (tmp_path / "cfg.json").read_text() == "{}"


def test_save_uploads_changes_only_and_restores_the_last_save(bucket: S3Server,
                                                              tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    (ck / "sub").mkdir(parents=True)
    (ck / "step.txt").write_text("1")
    (ck / "sub" / "w.bin").write_bytes(b"\0" * 10)
    first = _run("save", "ck", "s3://bs-bkt/run/t1", home=tmp_path)
    assert "saved 2 file(s), 11 bytes" in first.stdout, first.stderr
    assert _run("save", "ck", "s3://bs-bkt/run/t1", home=tmp_path).stdout == ""  # silent
    (ck / "sub" / "w.bin").unlink()
    (ck / "step.txt").write_text("22")
    assert "saved 1 file(s)" in _run("save", "ck", "s3://bs-bkt/run/t1", home=tmp_path).stdout
    # a file deleted on the node stays in the store ("sync without delete")
    assert committed(bucket.keys("bs-bkt", "run/"), lambda k: bucket.read("bs-bkt", k),
                     "run/t1") == {"step.txt": "22", "sub/w.bin": "\0" * 10}
    shutil.rmtree(ck)
    res = _run("restore", "s3://bs-bkt/run/t1", "ck", home=tmp_path)
    assert res.returncode == 0 and "node save 2" in res.stdout, res.stderr
    assert (ck / "step.txt").read_text() == "22"


def test_errors_are_one_line_and_exit_1(bucket: S3Server, tmp_path: Path) -> None:
    res = _run("restore", "s3://no-such-bucket/x", "ck", home=tmp_path)
    assert res.returncode == 1 and "bucket sync error" in res.stderr
    assert "NoSuchBucket" in res.stderr and "Traceback" not in res.stderr
    assert _run("restore", "r2://b/x", "ck", home=tmp_path).returncode == 1
    assert _run("frobnicate", "a", "b", home=tmp_path).returncode == 2


@pytest.mark.skipif(shutil.which("aws") is None, reason="no aws CLI here")
def test_aws_cli_backend_on_request(bucket: S3Server, tmp_path: Path) -> None:
    storage = tmp_path / ".launcher-storage"
    storage.mkdir()
    script = storage / "bucket_sync.py"
    shutil.copy(SCRIPT, script)
    # the endpoint comes from the client-written config.json, as on a node
    (storage / "config.json").write_text(json.dumps({"AWS_ENDPOINT_URL": bucket.url}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")}
    env["HOME"] = str(tmp_path)
    env["LAUNCHER_S3_BACKEND"] = "cli"
    res = subprocess.run([sys.executable, "-S", str(script), "download", "s3://bs-bkt/p", "d"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "(aws CLI)" in res.stdout
    assert (tmp_path / "d" / "a.txt").read_text() == "a"
