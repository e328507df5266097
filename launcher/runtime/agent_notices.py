"""Interruption-notice sources of the head-node agent. STDLIB ONLY (shipped to nodes).

A notice says "this node is going away in N seconds". The daemon polls every
source named in nodes.json's "notice_sources" and relays each new notice to the
running job as SIGTERM (see agent_daemon._on_notice), so the job can write a last
checkpoint, and records it so the managed-jobs controller can start the
replacement early.

Sources, by the name the client writes into nodes.json:
- "local-file": notice-rank-N.json files dropped into the agent home by
  `launcher local preempt --notice S` (woken by inotify; no polling interval).
- "aws-imds": EC2 instance metadata, IMDSv2 (PUT /latest/api/token, then
  GET /latest/meta-data/spot/instance-action: 404 while nothing is scheduled, else
  {"action": "terminate"|"stop"|"hibernate", "time": "2017-09-18T08:22:00Z"}).
  Endpoint from AWS_EC2_METADATA_SERVICE_ENDPOINT, as botocore reads it.
- "gcp-metadata": GET /computeMetadata/v1/instance/preempted with
  "Metadata-Flavor: Google", "TRUE" once the VM is being preempted (Spot and
  preemptible VMs get 30 s). Host from GCE_METADATA_HOST, as google-auth reads it.
- "azure-scheduled-events": GET /metadata/scheduledevents?api-version=2020-07-01
  with "Metadata: true"; an event of EventType "Preempt" whose Resources name this
  VM (or any, when the VM's name cannot be read) with NotBefore as the deadline
  (Spot VMs get at least 30 s). Endpoint from LAUNCHER_AZURE_IMDS_ENDPOINT.

A metadata source reports notices for the node the agent runs on: rank 0.
Every source hands out each notice once; the daemon keeps running if a source
raises (it records the error), and an unreachable endpoint backs its own polling
off so a node off that cloud costs nothing.
"""

from __future__ import annotations

import json
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Protocol

    from launcher.runtime import agent as core
else:
    try:
        from . import agent as core
    except ImportError:  # on the node: a sibling of agent.py
        import agent as core

    Protocol = object

HTTP_TIMEOUT_S = 1.0
MAX_BACKOFF_S = 120.0
GCP_SPOT_GRACE_S = 30.0
AZURE_SPOT_GRACE_S = 30.0
AWS_SPOT_GRACE_S = 120.0


class NoticeSource(Protocol):
    """`poll` returns new notice dicts ({"rank", "grace_seconds", "received_at",
    "source", "detail"}), each once. `interval` is how often to poll in seconds;
    None = cheap enough to poll on every daemon wake-up."""

    name: str
    interval: float | None

    def poll(self) -> list[dict]: ...


def _notice(rank: int, grace: float, source: str, detail: str) -> dict:
    return {"rank": rank, "grace_seconds": max(0.0, float(grace)), "received_at": time.time(),
            "source": source, "detail": detail}


class LocalFileNotices:
    """notice-rank-N.json files in the agent home (written by `launcher local preempt
    --notice S`, atomically: temp file + rename). Content: {"grace_seconds": S, ...}.
    A file is handled once per (name, mtime, size); the seen set survives restarts."""

    name = "local-file"
    interval: float | None = None

    def __init__(self, paths: core.Paths, conn: core.sqlite3.Connection) -> None:
        self.paths = paths
        self.conn = conn
        seen = core.get_setting(conn, "notices_seen")
        self.seen: set[str] = set(seen) if isinstance(seen, list) else set()

    def poll(self) -> list[dict]:
        found: list[dict] = []
        try:
            names = os.listdir(self.paths.home)
        except FileNotFoundError:
            return found
        for name in names:
            m = core._NOTICE_FILE.match(name)
            if not m:
                continue
            path = self.paths.p(name)
            try:
                st = os.stat(path)
                key = f"{name}:{st.st_mtime_ns}:{st.st_size}"
                if key in self.seen:
                    continue
                with open(path) as f:
                    doc = json.load(f)
            except (OSError, ValueError):
                continue  # vanished or half-written: look again on the next wake
            grace = doc.get("grace_seconds") if isinstance(doc, dict) else None
            if isinstance(grace, bool) or not isinstance(grace, int | float):
                grace = 0.0
            self.seen.add(key)
            detail = str(doc.get("detail", "")) if isinstance(doc, dict) else ""
            found.append(_notice(int(m.group(1)), float(grace), self.name, detail))
        if found:
            core.put_setting(self.conn, "notices_seen", sorted(self.seen))
        return found


class HttpStatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def http_request(url: str, headers: dict[str, str], method: str = "GET") -> tuple[int, str]:
    """One metadata request with a short timeout. Returns (status, body) for 2xx and 404;
    raises HttpStatusError for other statuses, OSError when unreachable."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return 404, ""
        raise HttpStatusError(err.code) from None


class _MetadataPoller:
    """Shared polling discipline: a base interval, doubled after each failure up to
    MAX_BACKOFF_S (only the first failure of a streak is raised, so the daemon records
    it once), and each notice handed out once per key (kept in the agent's settings)."""

    name = "metadata"
    base_interval = 2.0
    endpoint_env = ""  # the variable that overrides the endpoint (tests, proxies)
    default_endpoint = "http://169.254.169.254"

    def __init__(self, paths: core.Paths, conn: core.sqlite3.Connection) -> None:
        self.paths = paths
        self.conn = conn
        self.base = self.endpoint_from(os.environ.get(self.endpoint_env) or self.default_endpoint)
        self.interval: float | None = self.base_interval
        self.failures = 0
        seen = core.get_setting(conn, f"notices_seen_{self.name}")
        self.seen: set[str] = set(seen) if isinstance(seen, list) else set()

    @staticmethod
    def endpoint_from(value: str) -> str:
        """A base URL without a trailing slash; a bare host[:port] means http."""
        value = value.rstrip("/")
        return value if "://" in value else f"http://{value}"

    def check(self) -> tuple[str, float, str] | None:
        """(key, grace seconds, detail) of a pending interruption, else None."""
        raise NotImplementedError

    def poll(self) -> list[dict]:
        try:
            found = self.check()
        except (OSError, HttpStatusError, ValueError) as exc:
            self.failures += 1
            self.interval = min(MAX_BACKOFF_S, self.base_interval * (2 ** self.failures))
            if self.failures == 1:
                raise RuntimeError(f"metadata endpoint unusable ({exc}); backing off") from None
            return []
        self.failures = 0
        self.interval = self.base_interval
        if found is None or found[0] in self.seen:
            return []
        key, grace, detail = found
        self.seen.add(key)
        core.put_setting(self.conn, f"notices_seen_{self.name}", sorted(self.seen))
        return [_notice(0, grace, self.name, detail)]


def _seconds_until(deadline_epoch: float | None, default: float) -> float:
    if deadline_epoch is None:
        return default
    return max(0.0, deadline_epoch - time.time())


class AwsImdsNotices(_MetadataPoller):
    """EC2 spot interruption notices over IMDSv2 (token first, then instance-action)."""

    name = "aws-imds"
    endpoint_env = "AWS_EC2_METADATA_SERVICE_ENDPOINT"  # as botocore reads it

    def __init__(self, paths: core.Paths, conn: core.sqlite3.Connection) -> None:
        super().__init__(paths, conn)
        self.token: str | None = None
        self.token_expires = 0.0

    def _token(self) -> str:
        if self.token is None or time.monotonic() > self.token_expires:
            status, body = http_request(
                f"{self.base}/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": "21600"}, method="PUT")
            if status != 200 or not body:
                raise HttpStatusError(status)
            self.token, self.token_expires = body.strip(), time.monotonic() + 21000
        return self.token

    def check(self) -> tuple[str, float, str] | None:
        headers = {"X-aws-ec2-metadata-token": self._token()}
        try:
            status, body = http_request(
                f"{self.base}/latest/meta-data/spot/instance-action", headers)
        except HttpStatusError as err:
            if err.status == 401:  # token expired early (e.g. the instance was stopped)
                self.token = None
            raise
        if status == 404:
            return None
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("instance-action is not a JSON object")
        action, when = str(doc.get("action", "")), str(doc.get("time", ""))
        deadline = _parse_iso8601(when)
        grace = _seconds_until(deadline, AWS_SPOT_GRACE_S)
        return f"{action}@{when}", grace, f"spot instance-action {action} at {when}"


class GcpMetadataNotices(_MetadataPoller):
    """GCE preemption: instance/preempted turns TRUE when a Spot/preemptible VM is reclaimed."""

    name = "gcp-metadata"
    endpoint_env = "GCE_METADATA_HOST"  # as google-auth reads it: host[:port]
    default_endpoint = "metadata.google.internal"

    def check(self) -> tuple[str, float, str] | None:
        status, body = http_request(f"{self.base}/computeMetadata/v1/instance/preempted",
                                    {"Metadata-Flavor": "Google"})
        if status == 404 or body.strip().upper() != "TRUE":
            return None
        # One preemption per VM life: key it by the boot, so a restarted VM can be noticed again.
        return f"preempted@{_boot_id()}", GCP_SPOT_GRACE_S, "instance/preempted is TRUE"


class AzureScheduledEvents(_MetadataPoller):
    """Azure Scheduled Events: a 'Preempt' event for this VM, NotBefore = the deadline."""

    name = "azure-scheduled-events"
    endpoint_env = "LAUNCHER_AZURE_IMDS_ENDPOINT"

    def __init__(self, paths: core.Paths, conn: core.sqlite3.Connection) -> None:
        super().__init__(paths, conn)
        self.vm_name: str | None = None

    def _own_name(self) -> str | None:
        if self.vm_name is None:
            try:
                status, body = http_request(
                    f"{self.base}/metadata/instance/compute/name"
                    "?api-version=2021-02-01&format=text", {"Metadata": "true"})
            except (OSError, HttpStatusError):
                return None
            self.vm_name = body.strip() if status == 200 and body.strip() else None
        return self.vm_name

    def check(self) -> tuple[str, float, str] | None:
        status, body = http_request(f"{self.base}/metadata/scheduledevents?api-version=2020-07-01",
                                    {"Metadata": "true"})
        if status == 404:
            return None
        doc = json.loads(body)
        events = doc.get("Events") if isinstance(doc, dict) else None
        if not isinstance(events, list):
            raise ValueError("scheduledevents has no Events list")
        me = self._own_name()
        for ev in events:
            if not isinstance(ev, dict) or ev.get("EventType") != "Preempt":
                continue
            resources = ev.get("Resources")
            if me and isinstance(resources, list) and resources and me not in resources:
                continue
            not_before = str(ev.get("NotBefore") or "")
            grace = _seconds_until(_parse_rfc1123(not_before), AZURE_SPOT_GRACE_S)
            event_id = str(ev.get("EventId", "")) or not_before
            return event_id, grace, f"scheduled event Preempt {event_id} not before {not_before}"
        return None


def _parse_iso8601(text: str) -> float | None:
    import datetime

    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _parse_rfc1123(text: str) -> float | None:
    if not text:
        return None
    import email.utils

    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown-boot"


NOTICE_SOURCES = {
    cls.name: cls
    for cls in (LocalFileNotices, AwsImdsNotices, GcpMetadataNotices, AzureScheduledEvents)
}

# Which source watches a cloud's nodes (the client writes it into nodes.json).
CLOUD_NOTICE_SOURCES = {
    "local": "local-file",
    "aws": "aws-imds",
    "gcp": "gcp-metadata",
    "azure": "azure-scheduled-events",
}
