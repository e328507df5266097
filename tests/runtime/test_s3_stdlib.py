"""The node-side stdlib S3 client (launcher/runtime/s3_stdlib.py) and bucket_sync.py on a
bare node: run with `python3 -S -I` (boto3 cannot be imported — asserted), no `aws` on
PATH, against moto's real S3 server; SigV4 checked against botocore's own signer, and
moto's signature checking (its auth mode) rejecting a wrong secret; instance-role
credentials from a local fake of the IMDSv2 metadata service."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from launcher.runtime import s3_stdlib
from tests.moto_s3 import S3Server, s3  # noqa: F401 - the fixture

RUNTIME = Path(__file__).resolve().parents[2] / "launcher" / "runtime"
ODD_KEYS = ("data/a b.txt", "data/x+y.bin", "data/ünï/çødé.txt", "data/deep/er/z=1&q:.txt")


def _node(home: Path, url: str) -> Path:
    """A node's ~/.launcher-storage as the client installs it; returns the script."""
    storage = home / ".launcher-storage"
    storage.mkdir(parents=True, exist_ok=True)
    for name in ("bucket_sync.py", "s3_stdlib.py", "checkpoint_sync.py"):
        shutil.copy(RUNTIME / name, storage / name)
    (storage / "config.json").write_text(json.dumps({"AWS_ENDPOINT_URL": url}))
    return storage / "bucket_sync.py"


def _bare_env(home: Path, **extra: str) -> dict[str, str]:
    """No aws CLI on PATH, no endpoint variable (config.json has it), HOME = the node."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_ENDPOINT_URL", "PYTHON", "LAUNCHER_S3"))}
    empty = home / "empty-bin"
    empty.mkdir(exist_ok=True)
    env.update(HOME=str(home), PATH=str(empty), AWS_EC2_METADATA_DISABLED="true")
    env.update(extra)
    return env


def _bare(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-S", "-I", str(script), *args], env=env,
                          capture_output=True, text=True, timeout=120, cwd=env["HOME"])


def test_bare_interpreter_has_no_boto3_and_no_aws_cli(tmp_path: Path) -> None:
    env = _bare_env(tmp_path)
    res = subprocess.run([sys.executable, "-S", "-I", "-c", "import boto3"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and "No module named 'boto3'" in res.stderr
    assert shutil.which("aws", path=env["PATH"]) is None


@pytest.mark.parametrize("key", ["plain", "a b+c/é.txt", "x/y=1&z:.bin", "~t/(1)*!'"])
@pytest.mark.parametrize("body", [b"", b"<Complete/>"])
def test_signature_matches_botocore(key: str, body: bytes) -> None:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    params = {"partNumber": "3", "uploadId": "a/b+c=", "uploads": ""}
    path = s3_stdlib.uri_encode(f"/bkt/{key}", True)
    url = f"http://127.0.0.1:9000{path}?{s3_stdlib.canonical_query(params)}"
    req = AWSRequest(method="POST", url=url, data=body,
                     headers={"Content-Type": "application/xml"})
    when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        S3SigV4Auth(Credentials("AKID", "SECRET", "TOKEN"), "s3", "eu-west-3").add_auth(req)
    mine = s3_stdlib.sign("POST", path, params,
                          {"host": "127.0.0.1:9000", "Content-Type": "application/xml"},
                          hashlib.sha256(body).hexdigest(),
                          s3_stdlib.Credentials("AKID", "SECRET", "TOKEN"), "eu-west-3",
                          "20260102T030405Z")
    assert mine["authorization"] == req.headers["Authorization"]
    assert mine["x-amz-security-token"] == "TOKEN"


def test_bucket_sync_without_boto3_round_trips(s3: S3Server, tmp_path: Path) -> None:  # noqa: F811
    c = s3.client()
    c.create_bucket(Bucket="bare-bkt")
    for i, key in enumerate(ODD_KEYS):
        c.put_object(Bucket="bare-bkt", Key=key, Body=f"v{i}".encode())
    home = tmp_path / "node"
    script = _node(home, s3.url)
    env = _bare_env(home, LAUNCHER_S3_MULTIPART_THRESHOLD=str(5 * 1024 * 1024))

    res = _bare(script, env, "download", "s3://bare-bkt/data", "~/d")
    assert res.returncode == 0, res.stderr
    assert "downloaded 4 file(s)" in res.stdout and "(stdlib S3 client)" in res.stdout
    for i, key in enumerate(ODD_KEYS):
        assert (home / "d" / key[len("data/"):]).read_text() == f"v{i}"
    assert "downloaded 0 file(s)" in _bare(script, env, "download", "s3://bare-bkt/data",
                                          "~/d").stdout
    assert _bare(script, env, "download", "s3://bare-bkt/data/x+y.bin", "one").returncode == 0
    assert (home / "one").read_text() == "v1"

    ck = home / "ck"
    (ck / "sub dir").mkdir(parents=True)
    big = os.urandom(11 * 1024 * 1024 + 17)  # > threshold: 3 parts
    (ck / "sub dir" / "model+1.pt").write_bytes(big)
    (ck / "état.json").write_text('{"step": 1}')
    res = _bare(script, env, "save", "ck", "s3://bare-bkt/run/t1")
    assert res.returncode == 0 and "saved 2 file(s)" in res.stdout, res.stderr
    key = next(k for k in s3.keys("bare-bkt", "run/t1/") if k.endswith("/sub dir/model+1.pt"))
    head = c.head_object(Bucket="bare-bkt", Key=key)
    assert head["ETag"].strip('"').endswith("-3") and head["ContentLength"] == len(big)
    assert c.get_object(Bucket="bare-bkt", Key=key)["Body"].read() == big
    assert _bare(script, env, "save", "ck", "s3://bare-bkt/run/t1").stdout == ""

    shutil.rmtree(ck)
    res = _bare(script, env, "restore", "s3://bare-bkt/run/t1", "ck")
    assert res.returncode == 0 and "restored 2 file(s)" in res.stdout, res.stderr
    assert (ck / "sub dir" / "model+1.pt").read_bytes() == big
    assert (ck / "état.json").read_text() == '{"step": 1}'
    assert not [p for p in ck.rglob(".bucket-sync-*")]

    res = _bare(script, env, "restore", "s3://no-such-bucket/x", "ck")
    assert res.returncode == 1 and "NoSuchBucket" in res.stderr
    assert "Traceback" not in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_listing_pages_with_continuation_tokens(s3: S3Server) -> None:  # noqa: F811
    c = s3.client()
    c.create_bucket(Bucket="page-bkt")
    keys = {f"p/{i:03d} +é" for i in range(23)} | {"other/x"}
    for k in keys:
        c.put_object(Bucket="page-bkt", Key=k, Body=b"x")
    client = s3_stdlib.S3Client(endpoint=s3.url, page_size=5)
    calls: list[dict[str, str]] = []
    real = client._request

    def spy(method: str, bucket: str, key: str = "", params: dict | None = None, **kw):  # type: ignore[no-untyped-def]
        calls.append(dict(params or {}))
        return real(method, bucket, key, params=params, **kw)

    with mock.patch.object(client, "_request", side_effect=spy):
        listed = client.list("page-bkt", "p/")
    assert set(listed) == {k for k in keys if k.startswith("p/")}
    assert len(calls) == 5 and "continuation-token" in calls[-1]
    assert all(size == 1 for size, _ in listed.values())


def test_credentials_file_profile_and_session_token(s3: S3Server, tmp_path: Path,  # noqa: F811
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    s3.client().create_bucket(Bucket="cred-bkt")
    s3.client().put_object(Bucket="cred-bkt", Key="k/v.txt", Body=b"ok")
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = DEF\naws_secret_access_key = defsecret\n\n"
        "[team]\naws_access_key_id = TEAM\naws_secret_access_key = teamsecret\n"
        "aws_session_token = TEAMTOKEN\n")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    assert s3_stdlib.resolve_credentials().access_key == "DEF"
    monkeypatch.setenv("AWS_PROFILE", "team")
    creds = s3_stdlib.resolve_credentials()
    assert (creds.access_key, creds.secret_key, creds.token) == ("TEAM", "teamsecret",
                                                                 "TEAMTOKEN")
    signed = s3_stdlib.sign("GET", "/b/k", {}, {"host": "h"}, s3_stdlib.EMPTY_SHA256, creds,
                            "us-east-1", "20260102T030405Z")
    assert signed["x-amz-security-token"] == "TEAMTOKEN"
    assert "x-amz-security-token" in signed["authorization"].split("SignedHeaders=")[1]
    # and the whole node path with them (the file is what the client writes to nodes)
    script = _node(tmp_path, s3.url)
    env = _bare_env(tmp_path)
    res = _bare(script, env, "restore", "s3://cred-bkt/k", "out")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "out" / "v.txt").read_text() == "ok"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")  # env wins over the file
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
    assert s3_stdlib.resolve_credentials().access_key == "ENVKEY"


@pytest.fixture
def moto_auth(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:  # noqa: F811
    """moto checking signatures (its auth mode) for an IAM user's key; yields the key."""
    import boto3
    import moto.settings

    iam = boto3.client("iam", endpoint_url=s3.url, region_name="us-east-1")
    iam.create_user(UserName="node")
    iam.put_user_policy(UserName="node", PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName="node")["AccessKey"]
    s3.client().create_bucket(Bucket="auth-bkt")
    # at the bucket's root: moto's auth mode mis-verifies a query value with "/" (a
    # `prefix=ck/` listing fails for boto3 as well); botocore's signer covers that above
    s3.client().put_object(Bucket="auth-bkt", Key="step.txt", Body=b"7")
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
    yield key["AccessKeyId"], key["SecretAccessKey"]


def test_wrong_secret_is_a_clear_signature_error(moto_auth: tuple[str, str], s3: S3Server,  # noqa: F811
                                                 tmp_path: Path) -> None:
    key_id, secret = moto_auth
    script = _node(tmp_path, s3.url)
    good = _bare(script, _bare_env(tmp_path, AWS_ACCESS_KEY_ID=key_id,
                                   AWS_SECRET_ACCESS_KEY=secret), "restore", "s3://auth-bkt",
                 "c")
    assert good.returncode == 0, good.stderr
    assert (tmp_path / "c" / "step.txt").read_text() == "7"
    bad = _bare(script, _bare_env(tmp_path, AWS_ACCESS_KEY_ID=key_id,
                                  AWS_SECRET_ACCESS_KEY="not-the-secret"),
                "restore", "s3://auth-bkt", "c2")
    assert bad.returncode == 1
    assert "SignatureDoesNotMatch" in bad.stderr and "HTTP 403" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


class _FakeIMDS(http.server.BaseHTTPRequestHandler):
    token = "tok-123"
    creds: dict[str, str] = {}
    seen: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:  # noqa: N802
        self.seen.append(f"PUT {self.path}")
        ok = self.path == "/latest/api/token" and self.headers.get(
            "X-aws-ec2-metadata-token-ttl-seconds")
        self._send(200 if ok else 400, self.token if ok else "")

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append(f"GET {self.path}")
        if self.headers.get("X-aws-ec2-metadata-token") != self.token:
            return self._send(401, "")  # IMDSv2 only
        base = "/latest/meta-data/iam/security-credentials/"
        if self.path == base:
            return self._send(200, "node-role")
        if self.path == base + "node-role":
            return self._send(200, json.dumps(self.creds))
        return self._send(404, "")


@pytest.fixture
def imds() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeIMDS)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _FakeIMDS.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_instance_role_credentials_from_imdsv2(moto_auth: tuple[str, str], s3: S3Server,  # noqa: F811
                                               imds: str, tmp_path: Path) -> None:
    key_id, secret = moto_auth
    _FakeIMDS.creds = {"Code": "Success", "AccessKeyId": key_id, "SecretAccessKey": secret,
                       "Token": "", "Expiration": "2099-01-01T00:00:00Z"}
    got = s3_stdlib.imds_credentials(imds)
    assert got is not None and got.access_key == key_id and "node-role" in got.source
    assert got.expires is not None and not got.expiring()
    script = _node(tmp_path, s3.url)
    env = _bare_env(tmp_path, AWS_EC2_METADATA_SERVICE_ENDPOINT=imds)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_EC2_METADATA_DISABLED"):
        env.pop(name, None)
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "none")
    res = _bare(script, env, "restore", "s3://auth-bkt", "c")
    assert res.returncode == 0, res.stderr  # moto checked the role's signature
    assert (tmp_path / "c" / "step.txt").read_text() == "7"
    assert "PUT /latest/api/token" in _FakeIMDS.seen
    assert s3_stdlib.imds_credentials("http://127.0.0.1:9", timeout=0.2) is None


class _FakeS3(http.server.BaseHTTPRequestHandler):
    """A bucket in eu-west-1 that first answers SlowDown, then 301 to a wrong region."""

    seen: list[tuple[str, str]] = []
    slowdowns = 1

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        scope = self.headers.get("Authorization", "").split("Credential=")[1].split(",")[0]
        self.seen.append((self.path, scope))
        if _FakeS3.slowdowns:
            _FakeS3.slowdowns -= 1
            return self._send(503, b"<Error><Code>SlowDown</Code><Message>Reduce your "
                                   b"request rate.</Message></Error>", {})
        if "/eu-west-1/" not in scope:
            return self._send(301, b"<Error><Code>PermanentRedirect</Code><Message>Use the "
                                   b"right endpoint.</Message></Error>",
                              {"x-amz-bucket-region": "eu-west-1"})
        ns = "http://s3.amazonaws.com/doc/2006-03-01/"
        body = (f'<ListBucketResult xmlns="{ns}"><IsTruncated>false</IsTruncated>'
                "<Contents><Key>k%20%2B.txt</Key><Size>3</Size>"
                "<LastModified>2026-01-02T03:04:05.000Z</LastModified></Contents>"
                "<EncodingType>url</EncodingType></ListBucketResult>").encode()
        return self._send(200, body, {})

    def _send(self, code: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_region_redirect_and_slowdown_retry() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _FakeS3.seen, _FakeS3.slowdowns = [], 1
    try:
        client = s3_stdlib.S3Client(endpoint=f"http://127.0.0.1:{server.server_address[1]}",
                                    region="us-east-1",
                                    credentials=s3_stdlib.Credentials("AK", "SK"))
        with mock.patch.object(s3_stdlib.time, "sleep"):
            listed = client.list("eu-bkt", "")
        assert listed == {"k +.txt": (3, 1767323045.0)}
        assert [s.split("/")[2] for _, s in _FakeS3.seen] == ["us-east-1", "us-east-1",
                                                              "eu-west-1"]
        client.list("eu-bkt", "")  # the bucket's region is remembered
        assert _FakeS3.seen[-1][1].split("/")[2] == "eu-west-1" and len(_FakeS3.seen) == 4
    finally:
        server.shutdown()
        server.server_close()
