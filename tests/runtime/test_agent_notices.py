"""Interruption-notice sources against local HTTP fakes in each cloud's real wire shape.

No cloud metadata service is reachable here, so each fake answers as the real one
does, including the parts that make a careless client fail: EC2's IMDSv2 refuses a
request without a session token (401), GCE refuses one without
`Metadata-Flavor: Google` (403), Azure IMDS refuses one without `Metadata: true`
(400). The last test runs the real agent daemon against the AWS fake and checks
that the running job gets SIGTERM from a spot instance-action.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from launcher.runtime import agent as core
from launcher.runtime import agent_notices as notices
from launcher.runtime.agent_client import default_notice_sources


class MetadataFake:
    """One HTTP server playing EC2 IMDSv2, the GCE metadata server and Azure IMDS."""

    TOKEN = "AQAEAFake-imds-token=="

    def __init__(self) -> None:
        self.aws_action: dict | None = None
        self.gcp_preempted = False
        self.azure_events: list[dict] = []
        self.azure_vm = "vm-head"
        self.requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: object) -> None:
                pass

            def _send(self, status: int, body: str, ctype: str = "text/plain") -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:  # noqa: N802
                fake.requests.append(f"PUT {self.path}")
                if self.path == "/latest/api/token" and self.headers.get(
                        "X-aws-ec2-metadata-token-ttl-seconds"):
                    self._send(200, fake.TOKEN)
                else:
                    self._send(400, "")

            def do_GET(self) -> None:  # noqa: N802
                fake.requests.append(f"GET {self.path}")
                if self.path.startswith("/latest/"):
                    if self.headers.get("X-aws-ec2-metadata-token") != fake.TOKEN:
                        return self._send(401, "")
                    if self.path == "/latest/meta-data/spot/instance-action":
                        if fake.aws_action is None:
                            return self._send(404, "<?xml version=\"1.0\"?><Error>Not Found</Error>",
                                              "text/html")
                        return self._send(200, json.dumps(fake.aws_action))
                    return self._send(404, "")
                if self.path.startswith("/computeMetadata/"):
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403, "Missing Metadata-Flavor:Google header.")
                    if self.path == "/computeMetadata/v1/instance/preempted":
                        return self._send(200, "TRUE" if fake.gcp_preempted else "FALSE")
                    return self._send(404, "")
                if self.path.startswith("/metadata/"):
                    if self.headers.get("Metadata") != "true":
                        return self._send(400, json.dumps(
                            {"error": "Bad request. Required metadata header not specified"}),
                            "application/json")
                    if self.path.startswith("/metadata/instance/compute/name"):
                        return self._send(200, fake.azure_vm)
                    if self.path.startswith("/metadata/scheduledevents"):
                        return self._send(200, json.dumps(
                            {"DocumentIncarnation": len(fake.azure_events),
                             "Events": fake.azure_events}), "application/json")
                return self._send(404, "")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[MetadataFake]:
    f = MetadataFake()
    try:
        yield f
    finally:
        f.close()


@pytest.fixture
def agent_db(tmp_path: Path) -> Iterator[tuple[core.Paths, object]]:
    home = tmp_path / "agent-home"
    home.mkdir()
    paths = core.Paths(str(home))
    conn = core.connect(paths)
    try:
        yield paths, conn
    finally:
        conn.close()


def test_aws_imdsv2_spot_instance_action(fake: MetadataFake, agent_db: tuple,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", fake.url + "/")
    src = notices.AwsImdsNotices(*agent_db)
    assert src.poll() == []  # 404: nothing scheduled
    assert "PUT /latest/api/token" in fake.requests  # IMDSv2: token first
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 100))
    fake.aws_action = {"action": "terminate", "time": when}
    [n] = src.poll()
    assert n["rank"] == 0 and n["source"] == "aws-imds"
    assert 95 <= n["grace_seconds"] <= 101
    assert "terminate" in n["detail"]
    assert src.poll() == []  # the same notice is handed out once ...
    again = notices.AwsImdsNotices(*agent_db)
    assert again.poll() == []  # ... also by a restarted daemon
    tokens = sum(1 for r in fake.requests if r.startswith("PUT"))
    assert tokens == 2  # one per poller: the token is reused between polls


def test_gcp_preempted_flag(fake: MetadataFake, agent_db: tuple,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GCE_METADATA_HOST", fake.url.removeprefix("http://"))
    src = notices.GcpMetadataNotices(*agent_db)
    assert src.poll() == []
    fake.gcp_preempted = True
    [n] = src.poll()
    assert n["grace_seconds"] == notices.GCP_SPOT_GRACE_S and n["source"] == "gcp-metadata"
    assert src.poll() == []


def test_azure_scheduled_events_preempt_for_this_vm_only(
        fake: MetadataFake, agent_db: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_AZURE_IMDS_ENDPOINT", fake.url)
    src = notices.AzureScheduledEvents(*agent_db)
    assert src.poll() == []
    import datetime

    soon = format_datetime(datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=40),
                           usegmt=True)
    base = {"ResourceType": "VirtualMachine", "EventStatus": "Scheduled", "NotBefore": soon,
            "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}
    fake.azure_events = [
        {**base, "EventId": "A1", "EventType": "Freeze", "Resources": ["vm-head"]},
        {**base, "EventId": "B2", "EventType": "Preempt", "Resources": ["vm-other"]},
    ]
    assert src.poll() == []  # a freeze, and another VM's eviction, are not ours
    fake.azure_events.append({**base, "EventId": "C3", "EventType": "Preempt",
                              "Resources": ["vm-head"]})
    [n] = src.poll()
    assert n["source"] == "azure-scheduled-events" and "C3" in n["detail"]
    assert 35 <= n["grace_seconds"] <= 41
    assert src.poll() == []


def test_unreachable_endpoint_reports_once_then_backs_off(
        agent_db: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("GCE_METADATA_HOST", f"127.0.0.1:{port}")
    src = notices.GcpMetadataNotices(*agent_db)
    with pytest.raises(RuntimeError, match="backing off"):
        src.poll()
    first = src.interval
    assert src.poll() == []  # later failures of the streak are quiet ...
    assert src.interval is not None and first is not None and src.interval > first  # ... slower


def test_clouds_map_to_their_notice_source() -> None:
    assert default_notice_sources("aws") == ["aws-imds"]
    assert default_notice_sources("gcp") == ["gcp-metadata"]
    assert default_notice_sources("azure") == ["azure-scheduled-events"]
    assert default_notice_sources("local") == ["local-file"]
    assert default_notice_sources("ssh") == ["local-file"]
    assert set(notices.CLOUD_NOTICE_SOURCES.values()) <= set(notices.NOTICE_SOURCES)


def test_daemon_relays_an_aws_spot_notice_to_the_job(fake: MetadataFake, tmp_path: Path) -> None:
    from tests.runtime.test_agent import Agent, _wait_log

    agent = Agent(tmp_path / "cluster", num_nodes=2)
    agent.env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = fake.url
    config = agent.nodes_config()
    config["notice_sources"] = ["aws-imds"]
    agent.doc("setup", stdin=json.dumps(config))
    try:
        job = agent.submit("trap 'echo got-term; exit 0' TERM; echo up; sleep 60 & wait",
                           num_nodes=2)
        _wait_log(agent, job, "up", 2)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 120))
        sent = time.time()
        fake.aws_action = {"action": "terminate", "time": when}
        rec = agent.wait_status(job, timeout=30)
        assert rec["status"] == "FAILED" and rec["reason"].startswith("preempted")
        assert rec["notice"]["source"] == "aws-imds"
        assert rec["ended_at"] - sent < 2 * notices.AwsImdsNotices.base_interval + 3
        lines, _ = agent.logs(job)
        assert sum(1 for ln in lines if "got-term" in ln) == 2  # every rank got SIGTERM
        assert not any(e["kind"] == "notice_source_error" for e in agent.events())
    finally:
        agent.close()
