"""AWS for tests: moto's in-process server, a test VPC inside the netns lab, and bodies.

Fixtures (imported by tests/clouds/aws/conftest.py; import them the same way elsewhere):

- `moto_server` (session): `ThreadedMotoServer` on the lab's gateway address
  (10.123.X.1: our own bridge, reachable from the host and from inside every node
  namespace, e.g. for nodes writing checkpoints to S3), or on 127.0.0.1 when there
  are no network namespaces. Warmed up once (moto's first EC2 call costs ~1.3 s).
- `aws_moto` (function): moto reset; `AWS_ENDPOINT_URL`, test credentials and
  `AWS_DEFAULT_REGION` set; in each region of `SUBNETS` a VPC tagged Name=launcher-test
  with CIDR = the lab's /24 and one /28 subnet per AZ carved from it (moto hands out
  private IPs in order from subnet+4, e.g. 10.123.X.68, .69, ...; a terminated
  instance's IP is reused); the AMI SSM parameters the product resolves, pointing at
  an AMI moto knows; `$LAUNCHER_HOME/config.yaml` with
  `aws: {use_internal_ips: true, ssh_user: root, vpc_name: launcher-test}`.
  Yields an `AWSFake` without bodies: for tests that need EC2 only.
- `aws_cloud` (function, needs network namespaces): `aws_moto` plus a `CloudBodies`
  watcher, so every pending/running instance has an sshd node at its private IP with
  its key pair's public key authorized for root. Yields the `AWSFake`, with
  `.bodies`, `.preempt(ids)`, `.leaks()`.

Only the lab's addresses are ever handed out: the fixture refuses (test error) any
instance whose private IP lies outside the lab's /24 (e.g. moto's default VPC,
172.31.0.0/16, which the product must not use when `vpc_name` is set). And while
`aws_cloud` is active, every connect this process makes is checked (`ConnectGuard`,
a sys.audit hook): one to anything but loopback and the lab fails the test.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tests.cloud_bodies import CloudBodies
    from tests.netns import NetnsLab

ACCOUNT = "123456789012"  # moto's default account
VPC_NAME = "launcher-test"
REGION = "us-east-1"
# AZ -> offset of its /28 inside the lab's /24 (.64/26 and .128/25 are reserved for
# instances; automatic lab nodes keep .10-.63). Only AZs that offer m6i.large in moto.
SUBNETS: dict[str, dict[str, int]] = {
    "us-east-1": {
        "us-east-1a": 64,  # use1-az6
        "us-east-1b": 80,  # use1-az1
        "us-east-1c": 96,  # use1-az2
        "us-east-1d": 112,  # use1-az4
        "us-east-1f": 128,  # use1-az5
    },
    "us-west-2": {"us-west-2a": 144, "us-west-2b": 160, "us-west-2c": 176, "us-west-2d": 192},
    "us-east-2": {"us-east-2a": 208, "us-east-2b": 224, "us-east-2c": 240},
}
SUBNET_PREFIX = 28
RESERVED_FOR_INSTANCES = (".64/26", ".128/25")
# the public parameters the product resolves (launcher/clouds/aws/images.py names them)
AMI_PARAMETERS = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
    "/aws/service/deeplearning/ami/arm64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
    "/aws/service/canonical/ubuntu/server/22.04/stable/current/amd64/hvm/ebs-gp2/ami-id",
    "/aws/service/canonical/ubuntu/server/22.04/stable/current/arm64/hvm/ebs-gp2/ami-id",
)
TEST_AMI = "ami-12c6146b"  # in moto's bundled images, every region
LIVE_STATES = ("pending", "running")
SPOT_TERMINATION = "Server.SpotInstanceTermination"
CLUSTER_TAG = "launcher-cluster"  # on everything per cluster (launcher/clouds/aws/tags.py)


def ami_parameters() -> list[str]:
    """AMI_PARAMETERS plus any `/aws/service/...` constant the product's images.py has."""
    names = list(AMI_PARAMETERS)
    with contextlib.suppress(ImportError):
        from launcher.clouds.aws import images

        for value in vars(images).values():
            if isinstance(value, str) and value.startswith("/aws/service/") and value not in names:
                names.append(value)
    return names


@dataclass
class Leaks:
    """What a cluster may leave behind; all empty after a clean `down`."""

    instances: list[str] = field(default_factory=list)  # pending/running instance ids
    eips: list[str] = field(default_factory=list)  # allocation ids (or public IPs)
    placement_groups: list[str] = field(default_factory=list)
    security_groups: list[str] = field(default_factory=list)  # per-cluster (CLUSTER_TAG)
    nodes: list[str] = field(default_factory=list)  # instance ids that still have a body

    def empty(self) -> bool:
        return not (
            self.instances
            or self.eips
            or self.placement_groups
            or self.security_groups
            or self.nodes
        )


@dataclass
class MotoServer:
    endpoint: str
    host: str
    server: Any


class AWSFake:
    """moto's EC2 seen through its in-process backends, plus the bodies of its instances."""

    def __init__(self, server: MotoServer, lab_subnet: str) -> None:
        self.server = server
        self.endpoint = server.endpoint
        self.subnet = lab_subnet  # the lab's /24 = every test VPC's CIDR
        self.regions = list(SUBNETS)
        self.vpcs: dict[str, str] = {}  # region -> vpc id
        self.subnets: dict[str, str] = {}  # AZ -> subnet id
        self.subnet_cidrs: dict[str, str] = {}  # AZ -> CIDR
        self.bodies: CloudBodies | None = None

    # ---- clients and backends ---------------------------------------------------------

    def client(self, service: str = "ec2", region: str = REGION) -> Any:
        import boto3

        return boto3.client(service, region_name=region, endpoint_url=self.endpoint)

    @staticmethod
    def ec2_backend(region: str) -> Any:
        from moto.ec2.models import ec2_backends

        return ec2_backends[ACCOUNT][region]

    def _instances(self, region: str) -> list[Any]:
        backend = self.ec2_backend(region)
        for _ in range(20):  # moto's dicts change under us while the server works
            try:
                return [i for r in list(backend.reservations.values()) for i in list(r.instances)]
            except RuntimeError:
                continue
        return [i for r in list(backend.reservations.values()) for i in list(r.instances)]

    @staticmethod
    def touched_regions() -> list[str]:
        """Every region whose EC2 moto has built so far (any the product touched), so an
        instance outside the test VPCs is seen, and refused a body, wherever it is."""
        from moto.ec2.models import ec2_backends

        for _ in range(20):
            try:
                return list(ec2_backends[ACCOUNT].keys())
            except RuntimeError:  # a region built concurrently
                continue
        return list(SUBNETS)

    def instance(self, instance_id: str) -> Any:
        for region in self.touched_regions():
            for inst in self._instances(region):
                if inst.id == instance_id:
                    return inst
        raise KeyError(instance_id)

    # ---- setup ----------------------------------------------------------------------

    def seed(self) -> None:
        """The test VPCs, subnets and AMI parameters (after a moto reset). Written into
        moto's backends directly (setup, not under test: ~10x faster than over HTTP)."""
        net = ipaddress.ip_network(self.subnet)
        for region, zones in SUBNETS.items():
            backend = self.ec2_backend(region)
            vpc = backend.create_vpc(self.subnet)
            backend.create_tags([vpc.id], {"Name": VPC_NAME})
            self.vpcs[region] = vpc.id
            for az, offset in zones.items():
                cidr = f"{net.network_address + offset}/{SUBNET_PREFIX}"
                sub = backend.create_subnet(vpc.id, cidr, availability_zone=az)
                backend.create_tags([sub.id], {"Name": f"{VPC_NAME}-{az}"})
                self.subnets[az] = sub.id
                self.subnet_cidrs[az] = cidr
            self._seed_ssm(region)

    def _seed_ssm(self, region: str) -> None:
        # AWS (and moto) refuse put_parameter for /aws/...: public parameters are AWS's
        # own, so they go straight into moto's store, as AWS publishes them
        from moto.core.utils import utcnow
        from moto.ssm.models import Parameter, ssm_backends

        params = ssm_backends[ACCOUNT][region]._parameters
        for name in ami_parameters():
            params[name] = [
                Parameter(  # type: ignore[abstract]
                    account_id=ACCOUNT,
                    name=name,
                    value=TEST_AMI,
                    parameter_type="String",
                    description=None,
                    allowed_pattern=None,
                    keyid=None,
                    last_modified_date=utcnow(),
                    version=1,
                    data_type="aws:ec2:image",
                )
            ]

    # ---- what the bodies need -----------------------------------------------------------

    def list_instances(self) -> list[tuple[str, str | None, str | None]]:
        """Live (pending/running) instances: (id, private IP, key pair's public key)."""
        out = []
        for region in self.touched_regions():
            backend = self.ec2_backend(region)
            for inst in self._instances(region):
                if inst._state.name not in LIVE_STATES:
                    continue
                key = None
                if inst.key_name:
                    pair = backend.key_pairs.get(inst.key_name)
                    key = pair.public_key if pair is not None else None
                out.append((inst.id, inst.private_ip, key))
        return out

    # ---- what tests do ------------------------------------------------------------------

    def preempt(self, instance_ids: list[str]) -> None:
        """Spot interruption, as EC2 reports it: the bodies die at once, and the instances
        are terminated with StateReason Server.SpotInstanceTermination."""
        from moto.ec2.models.instances import StateReason

        if self.bodies is not None:
            self.bodies.kill(instance_ids)
        for iid in instance_ids:
            inst = self.instance(iid)
            backend = self.ec2_backend(inst.region_name)
            backend.terminate_instances([iid])
            inst.state_reason = StateReason(
                f"{SPOT_TERMINATION}: Spot instance termination", SPOT_TERMINATION
            )
            inst._reason = "Spot instance termination"

    def instances(self, states: tuple[str, ...] = LIVE_STATES) -> list[Any]:
        """moto's instance objects in these states, every test region."""
        return [
            i
            for region in self.touched_regions()
            for i in self._instances(region)
            if i._state.name in states
        ]

    def leaks(self) -> Leaks:
        """What exists now that a torn-down cluster must not leave: pending/running
        instances, Elastic IPs, placement groups, per-cluster (tagged) security groups,
        live bodies."""
        leaks = Leaks(instances=[i.id for i in self.instances()])
        for region in self.touched_regions():
            backend = self.ec2_backend(region)
            leaks.eips += [
                a.allocation_id or a.public_ip for a in list(getattr(backend, "addresses", []))
            ]
            groups = getattr(backend, "placement_groups", {})
            leaks.placement_groups += [str(g) for g in list(groups)]
            for by_vpc in list(backend.groups.values()):
                for sg in list(by_vpc.values()):
                    if any(t.get("key") == CLUSTER_TAG for t in sg.get_tags()):
                        leaks.security_groups.append(f"{sg.name} ({sg.id})")
        if self.bodies is not None:
            leaks.nodes = sorted(self.bodies.live_nodes())
        return leaks

    def live_instances(self) -> dict[str, int]:
        """Counts of `leaks()`: {"instances", "eips", "placement_groups",
        "security_groups", "nodes"} (placement groups: moto 5.2 has none of its own;
        tests/moto_placement_groups.py adds them to the fixtures' moto)."""
        leaks = self.leaks()
        return {k: len(v) for k, v in vars(leaks).items()}


# the image the bodies boot is this machine's files with its system python3, which has
# neither boto3 nor the aws CLI — like Canonical's Ubuntu, the default CPU image: node-side
# S3 transfers (launcher/runtime/bucket_sync.py) go through their stdlib S3 client
# (s3_stdlib.py). Nothing is injected into the bodies' environment.


# ---- where this process connects ---------------------------------------------------------


class ConnectGuard:
    """Records every TCP/UDP connect of this process (sys.audit "socket.connect") to an
    address outside loopback and the allowed networks. Audit hooks cannot be removed:
    one hook is installed per process and consults the guards active at the time."""

    _active: list[ConnectGuard] = []
    _installed = False

    def __init__(self, *allowed: str) -> None:
        self.allowed = [ipaddress.ip_network(a) for a in allowed]
        self.violations: list[str] = []

    def __enter__(self) -> ConnectGuard:
        if not ConnectGuard._installed:
            import sys

            sys.addaudithook(ConnectGuard._hook)
            ConnectGuard._installed = True
        ConnectGuard._active.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        ConnectGuard._active.remove(self)

    @staticmethod
    def _hook(event: str, args: tuple[Any, ...]) -> None:
        if event != "socket.connect" or not ConnectGuard._active:
            return
        address = args[1] if len(args) > 1 else None
        if not isinstance(address, tuple) or not address:
            return  # AF_UNIX and the like
        try:
            ip = ipaddress.ip_address(str(address[0]).split("%")[0])
        except ValueError:
            return
        for guard in list(ConnectGuard._active):
            if not ip.is_loopback and not any(ip in net for net in guard.allowed):
                guard.violations.append(f"{address[0]}:{address[1]}")


# ---- fixtures ---------------------------------------------------------------------------


def _lab_or_none(request: pytest.FixtureRequest) -> NetnsLab | None:
    try:
        lab: NetnsLab = request.getfixturevalue("netns_lab")
    except pytest.skip.Exception:
        return None
    return lab if lab.netns_mode else None


@pytest.fixture(scope="session")
def moto_server(request: pytest.FixtureRequest) -> Iterator[MotoServer]:
    """moto's server, in this process, on the lab's gateway (or 127.0.0.1), with EC2
    placement groups added (tests/moto_placement_groups.py)."""
    from moto.server import ThreadedMotoServer

    from tests import moto_placement_groups

    moto_placement_groups.install()

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    lab = _lab_or_none(request)
    host = lab.gateway if lab is not None else "127.0.0.1"
    if lab is not None:
        for suffix in RESERVED_FOR_INSTANCES:
            lab.reserve(lab.prefix + suffix)
    server = ThreadedMotoServer(ip_address=host, port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    moto = MotoServer(endpoint=f"http://{host}:{port}", host=host, server=server)
    # moto builds its EC2 backend (images, instance types) on first use: once per session
    import boto3

    boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=moto.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).describe_vpcs()
    try:
        yield moto
    finally:
        server.stop()


@pytest.fixture
def aws_moto(
    request: pytest.FixtureRequest,
    moto_server: MotoServer,
    launcher_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[AWSFake]:
    """A fresh moto (test VPCs, AMI parameters) and the product configured for it."""
    from moto.moto_api._internal.models import moto_api_backend

    moto_api_backend.reset()  # terminated instances pile up and slow describes
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(launcher_home / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(launcher_home / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never probe 169.254.169.254
    lab = _lab_or_none(request)
    fake = AWSFake(moto_server, lab.subnet if lab is not None else "10.123.255.0/24")
    fake.seed()
    config = launcher_home / "config.yaml"
    body: dict[str, Any] = yaml.safe_load(config.read_text()) if config.exists() else {}
    body = body or {}
    body["aws"] = {"use_internal_ips": True, "ssh_user": "root", "vpc_name": VPC_NAME}
    config.write_text(yaml.safe_dump(body))
    yield fake  # the next test's reset clears what this one made


@pytest.fixture
def aws_cloud(request: pytest.FixtureRequest, aws_moto: AWSFake) -> Iterator[AWSFake]:
    """`aws_moto` plus a body (sshd node) for every pending/running instance."""
    from tests.cloud_bodies import CloudBodies

    lab = _lab_or_none(request)
    if lab is None:
        pytest.skip("AWS bodies need network-namespace sshd nodes (netns lab unavailable)")
    bodies = CloudBodies(lab, aws_moto.list_instances, name="aws").start()
    aws_moto.bodies = bodies
    try:
        with ConnectGuard(lab.subnet) as guard:  # this process reaches the lab only
            yield aws_moto
    finally:
        aws_moto.bodies = None
        bodies.close()  # kills every node; raises if an instance was refused
    assert not guard.violations, f"connected outside the lab: {sorted(set(guard.violations))}"
