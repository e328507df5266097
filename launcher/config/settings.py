"""The user's settings: `$LAUNCHER_HOME/config.yaml` (default `~/.launcher/config.yaml`).

Loaded on demand, parsed once per process (cached by file mtime), typed. A
malformed file raises `ConfigError` naming the field (`ssh_node_pools.lab.hosts[1].port`).
A missing file is an empty config. Sections:

    ssh_node_pools:          # machines you already have (the `ssh` cloud)
      POOL:
        user: root           # required (or per host)
        identity_file: ~/.ssh/id_ed25519   # default: the launcher key in $LAUNCHER_HOME/keys
        port: 22
        gpus: {H100: 8}      # what each host has (optional)
        checkpoint_dir: /shared/ckpt       # a path every host shares (optional)
        cpus: 64             # per host, optional (lets tasks asking for cpus/memory match)
        memory_gib: 512
        fabric: infiniband   # optional: the interconnect between the hosts (catalog FABRICS)
        hosts: [10.0.0.11, {host: 10.0.0.12, port: 2222, user: ubuntu, host_key: "ssh-ed25519 AAAA..."}]

One pool = one region of the `ssh` cloud. All hosts of a pool share one identity file.

    catalog:                 # how `launcher catalog refresh` reads each cloud's prices
      aws:
        regions: [us-east-1, us-west-2]   # default: the regions of the bundled catalog
        price_list_url: https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current
        price_list_format: csv            # csv (streamed, the default) or json

    aws:                     # how the `aws` cloud provisions (every key optional)
      use_internal_ips: false   # reach nodes on their private IPs (VPN / peered VPC):
                                # no public IP, no Elastic IP
      ssh_user: ubuntu          # the login user of the image
      vpc_name: my-vpc          # the VPC tagged Name=my-vpc (default: the default VPC)
      vpc_id: vpc-0123456789abcdef0   # or the VPC by id (not both)
      security_group_name: launcher   # the per-region group nodes share
      ssh_cidr: 0.0.0.0/0       # where SSH (22) is allowed from
      iam_instance_profile: my-role   # attached to every node (name or ARN), e.g.
                                      # for S3 access through the role

    gcp:                     # how the `gcp` cloud provisions (every key optional; docs/gcp.md)
      project: my-project       # default: GOOGLE_CLOUD_PROJECT, the ADC file, gcloud config
      use_internal_ips: false   # reach nodes on their private IPs (no external IP)
      ssh_user: gcpuser         # the login user written into the `ssh-keys` metadata
      network: default          # the VPC network nodes join (firewall rule created once)
      subnetwork: null          # a subnetwork name in the placement's region (custom VPCs)
      ssh_cidr: 0.0.0.0/0       # where SSH (22) is allowed from
      api_endpoint: null        # another Compute API endpoint (private endpoint, proxy);
                                # CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE also sets it

    azure: {...}             # how the `azure` cloud provisions (launcher/config/azure.py)
    nebius: {...}            # how the `nebius` cloud provisions (launcher/config/nebius.py)
    runpod: {...}            # how the `runpod` cloud provisions (launcher/config/runpod.py)
    lambda: {...}            # `lambda` and `vast` (launcher/config/gpu_clouds.py)
    vast: {...}
    slurm: {clusters: {...}} # Slurm clusters (the `slurm` cloud, launcher/config/slurm.py)
    kubernetes: {...}        # Kubernetes contexts (the `kubernetes` cloud, launcher/config/kubernetes.py)

    jobs:                    # managed jobs
      checkpoint_store: s3://my-bucket/checkpoints   # default store for tasks (not on the
                                # local cloud or an SSH pool) that ask for a checkpoint
                                # without one; also gs://BUCKET/..., az://ACCOUNT/CONTAINER/...
                                # or https://ACCOUNT.blob.core.windows.net/CONTAINER/...
      checkpoint_save_interval: 5m   # how often nodes upload LAUNCHER_CHECKPOINT_DIR
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.config.azure import AzureSettings, parse_azure
from launcher.config.gpu_clouds import LambdaSettings, VastSettings, parse_lambda, parse_vast
from launcher.config.kubernetes import KubernetesSettings, parse_kubernetes
from launcher.config.nebius import NebiusSettings, parse_nebius
from launcher.config.runpod import RunPodSettings, parse_runpod
from launcher.config.slurm import SlurmSettings, parse_slurm
from launcher.errors import ConfigError

_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


def launcher_home() -> Path:
    """`$LAUNCHER_HOME`, else `~/.launcher`, made absolute (node homes and the agent's
    autostop command are derived from it and must not depend on the cwd). Not created.

    The one definition of where launcher keeps its state; every module asks here."""
    env = os.environ.get("LAUNCHER_HOME")
    return (Path(env).expanduser() if env else Path.home() / ".launcher").absolute()


def config_path() -> Path:
    return launcher_home() / "config.yaml"


@dataclass(frozen=True)
class SSHHost:
    host: str
    port: int
    user: str
    host_key: str | None = None  # "ssh-ed25519 AAAA...": pin this instead of learning it

    @property
    def address(self) -> str:
        """`host:port`, the key this host is known by."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class SSHNodePool:
    name: str
    hosts: tuple[SSHHost, ...]
    identity_file: str | None = None  # expanded path; None = the launcher's own user key
    gpus: dict[str, int] = field(default_factory=dict)  # accelerator -> count per host
    checkpoint_dir: str | None = None
    cpus: float | None = None
    memory_gib: float | None = None
    fabric: str | None = None


@dataclass(frozen=True)
class CatalogSource:
    """Where `launcher catalog refresh` reads one cloud's prices (None = the default)."""

    regions: tuple[str, ...] | None = None
    price_list_url: str | None = None
    price_list_format: str | None = None


@dataclass(frozen=True)
class AWSSettings:
    """The `aws:` section (see the module docstring)."""

    use_internal_ips: bool = False
    ssh_user: str = "ubuntu"
    vpc_name: str | None = None
    vpc_id: str | None = None
    security_group_name: str = "launcher"
    ssh_cidr: str = "0.0.0.0/0"
    iam_instance_profile: str | None = None


@dataclass(frozen=True)
class GCPSettings:
    """The `gcp:` section (see the module docstring)."""

    project: str | None = None
    use_internal_ips: bool = False
    ssh_user: str = "gcpuser"
    network: str = "default"
    subnetwork: str | None = None
    ssh_cidr: str = "0.0.0.0/0"
    api_endpoint: str | None = None


@dataclass(frozen=True)
class JobsSettings:
    """The `jobs:` section: `checkpoint_store` (an s3://, gs:// or Azure Blob URI, or None),
    `checkpoint_save_interval` in seconds (None = the agent's default, 300) and
    `deadline_tick` in seconds (how often the DEADLINE strategy's policy decides; None =
    the controller's default, 60), and from `controller:` `max_parallel_launches`,
    `agent_check_workers` and `cloud_poll_interval` (docs/managed-jobs.md, "Scale")."""

    checkpoint_store: str | None = None
    checkpoint_save_interval: float | None = None
    deadline_tick: float | None = None
    # `jobs.controller:` the managed-jobs controller's scale settings (None: its defaults)
    max_parallel_launches: int | None = None
    agent_check_workers: int | None = None
    cloud_poll_interval: float | None = None


@dataclass(frozen=True)
class LauncherConfig:
    ssh_node_pools: dict[str, SSHNodePool] = field(default_factory=dict)
    catalog: dict[str, CatalogSource] = field(default_factory=dict)
    jobs: JobsSettings = field(default_factory=JobsSettings)
    aws: AWSSettings = field(default_factory=AWSSettings)
    azure: AzureSettings = field(default_factory=AzureSettings)
    gcp: GCPSettings = field(default_factory=GCPSettings)
    nebius: NebiusSettings = field(default_factory=NebiusSettings)
    runpod: RunPodSettings = field(default_factory=RunPodSettings)
    lambda_: LambdaSettings = field(default_factory=LambdaSettings)  # the `lambda:` section
    vast: VastSettings = field(default_factory=VastSettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    # `db: postgresql://...`: the state DB of a team server (launcher/state/engine.py);
    # None: the SQLite file in LAUNCHER_HOME. LAUNCHER_DB_URL overrides it.
    db: str | None = None


_SECTIONS = ("db", "ssh_node_pools", "catalog", "aws", "azure", "gcp", "nebius", "runpod", "jobs",
             "lambda", "vast", "slurm", "kubernetes")
_GCP_KEYS = ("project", "use_internal_ips", "ssh_user", "network", "subnetwork", "ssh_cidr",
             "api_endpoint")
_AWS_KEYS = ("use_internal_ips", "ssh_user", "vpc_name", "vpc_id", "security_group_name",
             "ssh_cidr", "iam_instance_profile")
_CATALOG_KEYS = ("regions", "price_list_url", "price_list_format")
_POOL_KEYS = (
    "user",
    "identity_file",
    "port",
    "gpus",
    "checkpoint_dir",
    "cpus",
    "memory_gib",
    "fabric",
    "hosts",
)
_HOST_KEYS = ("host", "port", "user", "host_key")

_cache: tuple[str, tuple[int, int, int], LauncherConfig] | None = None


def load_config() -> LauncherConfig:
    """The parsed config (cached while the file is unchanged). Raises ConfigError."""
    global _cache
    path = config_path()
    try:
        st = path.stat()
        mtime = (st.st_mtime_ns, st.st_size, st.st_ino)
    except FileNotFoundError:
        return LauncherConfig()
    if _cache is not None and _cache[0] == str(path) and _cache[1] == mtime:
        return _cache[2]
    config = parse_config(path.read_text(encoding="utf-8"), source=str(path))
    _cache = (str(path), mtime, config)
    return config


def parse_config(text: str, source: str = "config.yaml") -> LauncherConfig:
    """Parse config YAML text. Raises ConfigError naming the offending field."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from exc
    if data is None:
        return LauncherConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of sections at the top level.")
    _no_unknown(data, _SECTIONS, "", source)
    jobs = _parse_jobs(data.get("jobs"), source)
    pools_raw = data.get("ssh_node_pools") or {}
    if not isinstance(pools_raw, dict):
        raise ConfigError(f"{source}: field 'ssh_node_pools' must be a mapping of pool names.")
    pools = {}
    for name, body in pools_raw.items():
        pools[str(name)] = _parse_pool(str(name), body, source)
    return LauncherConfig(jobs=jobs, ssh_node_pools=pools, catalog=_parse_catalog(data.get("catalog"), source),
                          aws=_parse_aws(data.get("aws"), source),
                          azure=parse_azure(data.get("azure"), source),
                          nebius=parse_nebius(data.get("nebius"), source),
                          runpod=parse_runpod(data.get("runpod"), source),
                          gcp=_parse_gcp(data.get("gcp"), source),
                          lambda_=parse_lambda(data.get("lambda"), source),
                          vast=parse_vast(data.get("vast"), source),
                          slurm=parse_slurm(data.get("slurm"), source),
                          kubernetes=parse_kubernetes(data.get("kubernetes"), source),
                          db=_parse_db(data.get("db"), source))


def _parse_db(value: Any, source: str) -> str | None:
    """`db:`: a database URL (postgresql://user:password@host:port/name), or absent."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _err(source, "db", "must be a database URL such as "
                   "postgresql://user:password@host:5432/launcher")
    return value.strip()


def _parse_aws(body: Any, source: str) -> AWSSettings:
    import ipaddress

    if body is None:
        return AWSSettings()
    if not isinstance(body, dict):
        raise _err(source, "aws", "expected a mapping (use_internal_ips, ssh_user, ...).")
    _no_unknown(body, _AWS_KEYS, "aws", source)
    internal = body.get("use_internal_ips", False)
    if not isinstance(internal, bool):
        raise _err(source, "aws.use_internal_ips", f"expected true or false, got {internal!r}.")

    def opt(key: str) -> str | None:
        value = body.get(key)
        return None if value is None else _str(value, f"aws.{key}", source)

    vpc_name, vpc_id = opt("vpc_name"), opt("vpc_id")
    if vpc_name and vpc_id:
        raise _err(source, "aws.vpc_id", "set vpc_name or vpc_id, not both.")
    if vpc_id and not vpc_id.startswith("vpc-"):
        raise _err(source, "aws.vpc_id", f"expected a VPC id (vpc-...), got {vpc_id!r}.")
    cidr = opt("ssh_cidr") or "0.0.0.0/0"
    try:
        ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise _err(source, "aws.ssh_cidr", f"expected a CIDR (e.g. 203.0.113.0/24), got {cidr!r}.") from None
    group = opt("security_group_name") or "launcher"
    if group.lower().startswith("sg-"):
        raise _err(source, "aws.security_group_name", "a group name may not start with 'sg-'.")
    return AWSSettings(
        use_internal_ips=internal,
        ssh_user=opt("ssh_user") or "ubuntu",
        vpc_name=vpc_name,
        vpc_id=vpc_id,
        security_group_name=group,
        ssh_cidr=cidr,
        iam_instance_profile=opt("iam_instance_profile"),
    )


def _parse_gcp(body: Any, source: str) -> GCPSettings:
    import ipaddress

    if body is None:
        return GCPSettings()
    if not isinstance(body, dict):
        raise _err(source, "gcp", "expected a mapping (project, use_internal_ips, ssh_user, ...).")
    _no_unknown(body, _GCP_KEYS, "gcp", source)
    internal = body.get("use_internal_ips", False)
    if not isinstance(internal, bool):
        raise _err(source, "gcp.use_internal_ips", f"expected true or false, got {internal!r}.")

    def opt(key: str) -> str | None:
        value = body.get(key)
        return None if value is None else _str(value, f"gcp.{key}", source)

    cidr = opt("ssh_cidr") or "0.0.0.0/0"
    try:
        ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise _err(source, "gcp.ssh_cidr", f"expected a CIDR (e.g. 203.0.113.0/24), got {cidr!r}.") from None
    endpoint = opt("api_endpoint")
    if endpoint and not endpoint.startswith(("http://", "https://")):
        raise _err(source, "gcp.api_endpoint", f"expected an http(s) URL, got {endpoint!r}.")
    return GCPSettings(
        project=opt("project"),
        use_internal_ips=internal,
        ssh_user=opt("ssh_user") or "gcpuser",
        network=opt("network") or "default",
        subnetwork=opt("subnetwork"),
        ssh_cidr=cidr,
        api_endpoint=endpoint,
    )


def _parse_catalog(body: Any, source: str) -> dict[str, CatalogSource]:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise _err(source, "catalog", "expected a mapping of cloud names.")
    out: dict[str, CatalogSource] = {}
    for cloud, entry in body.items():
        where = f"catalog.{cloud}"
        if not isinstance(entry, dict):
            raise _err(source, where, "expected a mapping (regions, price_list_url, ...).")
        _no_unknown(entry, _CATALOG_KEYS, where, source)
        regions = entry.get("regions")
        if regions is not None:
            if not isinstance(regions, list) or not regions:
                raise _err(source, f"{where}.regions", "expected a non-empty list of regions.")
            regions = tuple(_str(r, f"{where}.regions", source) for r in regions)
        url = entry.get("price_list_url")
        if url is not None:
            url = _str(url, f"{where}.price_list_url", source)
            if not url.startswith(("http://", "https://")):
                raise _err(source, f"{where}.price_list_url", f"expected an http(s) URL, got {url!r}.")
        fmt = entry.get("price_list_format")
        if fmt is not None and fmt not in ("csv", "json"):
            raise _err(source, f"{where}.price_list_format", f"expected csv or json, got {fmt!r}.")
        out[str(cloud)] = CatalogSource(regions=regions, price_list_url=url, price_list_format=fmt)
    return out


def _err(source: str, field_path: str, message: str) -> ConfigError:
    return ConfigError(f"{source}: field '{field_path}': {message}")


def _no_unknown(d: dict[Any, Any], allowed: tuple[str, ...], prefix: str, source: str) -> None:
    for key in d:
        if key not in allowed:
            where = f"{prefix}.{key}" if prefix else str(key)
            raise _err(source, where, f"unknown field (expected one of: {', '.join(allowed)}).")


def _str(value: Any, where: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(source, where, f"expected a non-empty string, got {value!r}.")
    return value.strip()


def _port(value: Any, where: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise _err(source, where, f"expected a port number 1-65535, got {value!r}.")
    return value


def _parse_pool(name: str, body: Any, source: str) -> SSHNodePool:
    where = f"ssh_node_pools.{name}"
    if not _POOL_NAME.match(name):
        raise _err(source, where, "pool names use letters, digits, '.', '_' and '-'.")
    if not isinstance(body, dict):
        raise _err(source, where, "expected a mapping with 'hosts' and 'user'.")
    _no_unknown(body, _POOL_KEYS, where, source)
    user = _str(body["user"], f"{where}.user", source) if "user" in body else None
    ident = body.get("identity_file")
    identity = (
        os.path.expanduser(_str(ident, f"{where}.identity_file", source))
        if ident is not None
        else None
    )
    port = _port(body.get("port", 22), f"{where}.port", source)
    gpus: dict[str, int] = {}
    gpus_raw = body.get("gpus")
    if isinstance(gpus_raw, str) and gpus_raw.strip():  # "H100:8" / "H100", as in task YAML
        acc_name, _, n = gpus_raw.strip().partition(":")
        try:
            gpus_raw = {acc_name.strip(): int(n) if n.strip() else 1}
        except ValueError:
            raise _err(source, f"{where}.gpus",
                       f"expected ACCELERATOR:COUNT (e.g. H100:8), got {gpus_raw!r}.") from None
    if gpus_raw is not None:
        if not isinstance(gpus_raw, dict) or len(gpus_raw) != 1:
            raise _err(
                source, f"{where}.gpus",
                "expected one accelerator and its count, e.g. H100:8 or {H100: 8}."
            )
        for acc, count in gpus_raw.items():
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise _err(source, f"{where}.gpus.{acc}", f"expected a count >= 1, got {count!r}.")
            gpus[str(acc)] = count
    ckpt = body.get("checkpoint_dir")
    checkpoint_dir = _str(ckpt, f"{where}.checkpoint_dir", source) if ckpt is not None else None
    hosts_raw = body.get("hosts")
    if not isinstance(hosts_raw, list) or not hosts_raw:
        raise _err(source, f"{where}.hosts", "expected a non-empty list of hosts.")
    hosts = []
    seen: set[tuple[str, int]] = set()
    for i, entry in enumerate(hosts_raw):
        hw = f"{where}.hosts[{i}]"
        if isinstance(entry, str):
            entry = {"host": entry}
        if not isinstance(entry, dict):
            raise _err(source, hw, f"expected a host name or a mapping, got {entry!r}.")
        _no_unknown(entry, _HOST_KEYS, hw, source)
        if "host" not in entry:
            raise _err(source, f"{hw}.host", "missing.")
        host = _str(entry["host"], f"{hw}.host", source)
        h_port = _port(entry.get("port", port), f"{hw}.port", source)
        h_user = _str(entry["user"], f"{hw}.user", source) if "user" in entry else user
        if h_user is None:
            raise _err(source, f"{where}.user", "missing (set it for the pool or for each host).")
        host_key = None
        if entry.get("host_key") is not None:
            host_key = _str(entry["host_key"], f"{hw}.host_key", source)
            if len(host_key.split()) < 2:
                raise _err(
                    source, f"{hw}.host_key", "expected '<type> <base64>' as in known_hosts."
                )
        if (host, h_port) in seen:
            raise _err(source, hw, f"{host}:{h_port} is listed twice.")
        seen.add((host, h_port))
        hosts.append(SSHHost(host, h_port, h_user, host_key))
    return SSHNodePool(
        name=name,
        hosts=tuple(hosts),
        identity_file=identity,
        gpus=gpus,
        checkpoint_dir=checkpoint_dir,
        cpus=_positive(body.get("cpus"), f"{where}.cpus", source),
        memory_gib=_positive(body.get("memory_gib"), f"{where}.memory_gib", source),
        fabric=_fabric(body.get("fabric"), f"{where}.fabric", source),
    )


def _positive(value: Any, where: str, source: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise _err(source, where, f"expected a positive number, got {value!r}.")
    return float(value)


def _fabric(value: Any, where: str, source: str) -> str | None:
    from launcher.task.resources import FABRICS

    if value is None:
        return None
    if value not in FABRICS:
        raise _err(source, where, f"expected one of {', '.join(FABRICS)}, got {value!r}.")
    return str(value)


_JOBS_KEYS = ("checkpoint_store", "checkpoint_save_interval", "deadline_tick", "controller")
_CONTROLLER_KEYS = ("max_parallel_launches", "agent_check_workers", "cloud_poll_interval")
# The stores nodes sync (launcher/runtime/storage_nodes.py): bucket (and Azure account /
# container) names as each service allows them.
_STORE_PATTERNS = (
    r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?\Z",
    r"gs://[a-z0-9][a-z0-9._\-]{1,220}[a-z0-9](/.*)?\Z",
    r"az://[a-z0-9]{3,24}/[a-z0-9](?!.*--)[a-z0-9\-]{1,61}[a-z0-9](/.*)?\Z",
    r"https://[a-z0-9]{3,24}\.blob\.core\.windows\.net/[a-z0-9](?!.*--)[a-z0-9\-]{1,61}"
    r"[a-z0-9](/.*)?\Z",
)


def _parse_jobs(body: Any, source: str) -> JobsSettings:
    if body is None:
        return JobsSettings()
    if not isinstance(body, dict):
        raise _err(source, "jobs", "expected a mapping (checkpoint_store, checkpoint_save_interval, "
                   "deadline_tick).")
    _no_unknown(body, _JOBS_KEYS, "jobs", source)
    store = body.get("checkpoint_store")
    if store is not None:
        store = _str(store, "jobs.checkpoint_store", source).strip()
        if not any(re.match(pattern, store) for pattern in _STORE_PATTERNS):
            raise _err(source, "jobs.checkpoint_store",
                       "expected a bucket URI the nodes can sync: s3://BUCKET/PREFIX, "
                       "gs://BUCKET/PREFIX, az://ACCOUNT/CONTAINER/PREFIX or https://ACCOUNT"
                       f".blob.core.windows.net/CONTAINER/PREFIX; got {store!r}.")
    interval = body.get("checkpoint_save_interval")
    seconds = None
    if interval is not None:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(interval))
        if isinstance(interval, bool) or m is None or float(m.group(1)) <= 0:
            raise _err(source, "jobs.checkpoint_save_interval",
                       f"expected a duration like 300, 90s, 5m or 1h, got {interval!r}.")
        seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    tick = None
    if body.get("deadline_tick") is not None:
        raw = body["deadline_tick"]
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(raw))
        if isinstance(raw, bool) or m is None or float(m.group(1)) <= 0:
            raise _err(source, "jobs.deadline_tick",
                       f"expected a duration like 60, 30s or 2m, got {raw!r}.")
        tick = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    return JobsSettings(checkpoint_store=store, checkpoint_save_interval=seconds,
                        deadline_tick=tick, **_parse_controller(body.get("controller"), source))


def _parse_controller(body: Any, source: str) -> dict[str, Any]:
    """`jobs.controller:` -> JobsSettings' controller fields (absent ones left out)."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise _err(source, "jobs.controller", "expected a mapping (max_parallel_launches, "
                   "agent_check_workers, cloud_poll_interval).")
    _no_unknown(body, _CONTROLLER_KEYS, "jobs.controller", source)
    out: dict[str, Any] = {}
    for key in ("max_parallel_launches", "agent_check_workers"):
        raw = body.get(key)
        if raw is None:
            continue
        if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= 1024:
            raise _err(source, f"jobs.controller.{key}",
                       f"expected a whole number from 1 to 1024, got {raw!r}.")
        out[key] = raw
    raw = body.get("cloud_poll_interval")
    if raw is not None:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([sm]?)\s*", str(raw))
        seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60}[m.group(2)] if m else 0.0
        if isinstance(raw, bool) or not 0.1 <= seconds <= 600:
            raise _err(source, "jobs.controller.cloud_poll_interval",
                       f"expected a duration from 0.1 s to 10 m, like 1, 2s or 1m; got {raw!r}.")
        out["cloud_poll_interval"] = seconds
    return out
