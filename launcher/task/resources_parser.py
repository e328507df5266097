"""Parsers for the `resources:` section of a task (SkyPilot format plus our `network`).

`parse_resources_spec(value, path, origin)` turns the section into a
`ResourcesSpec`; the single-field parsers (`parse_accelerators`, `parse_cpus`,
`parse_memory`, `parse_ports`, `parse_infra`, `parse_network`, ...) are public so
CLI flags (`launcher gpus H100:8 --fabric rdma`) validate the same way. Every
parser raises `TaskValidationError` naming the field path and YAML line.
`job_recovery` and `autostop` live in `resources:` in SkyPilot's format but are
task-wide; they are parsed by `launcher.task.policies` (and our task-wide `health` by
`launcher.task.health`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

from launcher.errors import TaskValidationError
from launcher.task.fields import (
    UNSUPPORTED_NOTE,
    Origin,
    Path,
    check_keys,
    describe,
    did_you_mean,
    expect_bool,
    expect_list,
    expect_mapping,
    expect_positive_number,
    expect_str,
    format_path,
    string_map,
)
from launcher.task.resources import (
    REQUESTABLE_FABRICS,
    AcceleratorChoice,
    AcceleratorRequest,
    NetworkRequest,
    Resources,
    ResourcesSpec,
)

# Cloud names a task may use: SkyPilot's clouds plus our `local`. Whether a cloud
# has catalog rows or a provisioner is the catalog's and registry's business.
KNOWN_CLOUDS = (
    "aws", "azure", "gcp", "lambda", "runpod", "vast", "nebius", "hyperbolic", "mithril",
    "verda", "seeweb", "yotta", "oci", "ibm", "scp", "cudo", "fluidstack", "paperspace",
    "primeintellect", "do", "shadeform", "vsphere", "coreweave", "local", "ssh", "kubernetes", "slurm",
)  # fmt: skip
# Engines a task may not name (none now: Slurm has a backend, launcher/clouds/slurm).
UNSUPPORTED_CLOUDS: tuple[str, ...] = ()
# SkyPilot's short name for a cloud (`infra: k8s/CONTEXT`, `cloud: k8s`).
CLOUD_ALIASES = {"k8s": "kubernetes"}
# Keys that configure a Kubernetes pod (preemption / termination hooks): accepted on a
# resources mapping that names kubernetes (planned only; launcher's pods do not run them).
POD_ONLY_FIELDS = ("preemption", "termination_hook")
DISK_TIERS = ("low", "medium", "high", "ultra", "best")
NETWORK_TIERS = ("standard", "best")

# Keys of one resources mapping (base or alternative entry).
ENTRY_FIELDS = (
    "cloud", "region", "zone", "infra", "accelerators", "gpus", "cpus", "memory", "instance_type",
    "use_spot", "disk_size", "disk_tier", "image_id", "ports", "labels", "max_hourly_cost",
    "network", "network_tier", "job_recovery", "spot_recovery", "autostop", "accelerator_args",
    "health",
)  # fmt: skip
# SkyPilot's TPU options (`resources.accelerator_args`): key -> value type.
ACCELERATOR_ARGS = {"runtime_version": "str", "tpu_vm": "bool", "tpu_name": "str"}
SECTION_FIELDS = (*ENTRY_FIELDS, "any_of", "ordered")
UNSUPPORTED_RESOURCE_FIELDS = (
    "volumes", "ephemeral_storage", "local_disk", "priority",
    "priority_class", "preemption", "termination_hook",
)  # fmt: skip
TOP_LEVEL_ELSEWHERE = {
    "num_nodes": "num_nodes (top level)",
    "envs": "envs (top level)",
    "checkpoint": "checkpoint (top level)",
    "file_mounts": "file_mounts (top level)",
    "run": "run (top level)",
    "setup": "setup (top level)",
}

_ACC_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_. \-]*\Z")  # catalog has "Radeon Pro V520"
_MEMORY_RE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]i?b?)?\s*(\+)?\Z", re.IGNORECASE)
_MEMORY_UNIT_GIB = {"k": 1 / 1024**2, "m": 1 / 1024, "g": 1.0, "t": 1024.0, "p": 1024.0**2}
_PORT_RE = re.compile(r"(\d+)(?:\s*-\s*(\d+))?\Z")


# ------------------------------------------------------------------ accelerators


def parse_accelerator_arg(text: str, field: str = "accelerators") -> AcceleratorChoice:
    """Parse a command-line accelerator ('H100', 'H100:8', 'A100:0.5')."""
    return _parse_choice_text(text, (field,), Origin(source="command line"))


def parse_accelerators(value: object, path: Path, origin: Origin) -> AcceleratorRequest | None:
    """Every SkyPilot form: 'H100:8', {H100: 8}, a set / several-key mapping (any of),
    a list (ordered preference), and the string forms '{A:1, B:1}' / '[A:1, B:1]'."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if len(text) >= 2 and (text[0], text[-1]) in (("{", "}"), ("[", "]")):
            items = [item for item in text[1:-1].split(",") if item.strip()]
            if not items:
                raise origin.error(path, f"'{value}' lists no accelerators.")
            choices = [_parse_choice_text(item, path, origin) for item in items]
            return _request(choices, ordered=text[0] == "[")
        return AcceleratorRequest((_parse_choice_text(text, path, origin),))
    if isinstance(value, Mapping):
        mapping = expect_mapping(value, path, origin)
        if not mapping:
            raise origin.error(path, "the mapping lists no accelerators.")
        choices = [_parse_choice_entry(k, v, path + (k,), origin) for k, v in mapping.items()]
        return _request(choices, ordered=False)
    if isinstance(value, set | frozenset):
        items = sorted(value, key=str)
        if not items:
            raise origin.error(path, "the set lists no accelerators.")
        return _request([_parse_choice_item(item, path, origin) for item in items], ordered=False)
    if isinstance(value, list | tuple):
        if not value:
            raise origin.error(path, "the list names no accelerators.")
        choices = [_parse_choice_item(item, path + (i,), origin) for i, item in enumerate(value)]
        return _request(choices, ordered=True)
    raise origin.error(
        path,
        f"expected an accelerator such as 'H100:8' (or a list / set of them), got {describe(value)}.",
    )


def _request(choices: list[AcceleratorChoice], ordered: bool) -> AcceleratorRequest:
    unique = list(dict.fromkeys(choices))
    return AcceleratorRequest(tuple(unique), ordered=ordered and len(unique) > 1)


def _parse_choice_item(item: object, path: Path, origin: Origin) -> AcceleratorChoice:
    if isinstance(item, str):
        return _parse_choice_text(item, path, origin)
    if isinstance(item, Mapping) and len(item) == 1:
        ((key, count),) = expect_mapping(item, path, origin).items()
        return _parse_choice_entry(key, count, path + (key,), origin)
    raise origin.error(path, f"expected an accelerator such as 'H100:8', got {describe(item)}.")


def _parse_choice_entry(key: str, count: object, path: Path, origin: Origin) -> AcceleratorChoice:
    """One `NAME: COUNT` mapping entry; a null count means the key holds 'NAME[:COUNT]'."""
    if count is None:
        return _parse_choice_text(key, path, origin)
    if isinstance(count, bool) or not isinstance(count, int | float):
        raise origin.error(
            path, f"the count of accelerator '{key}' must be a number, got {describe(count)}."
        )
    if ":" in key:
        raise origin.error(
            path,
            f"give the count either in the name ('{key}') or as the value ({count}), not both.",
        )
    _check_name(key, key, path, origin)
    return AcceleratorChoice(key, _check_count(float(count), f"{key}: {count}", path, origin))


def _parse_choice_text(text: str, path: Path, origin: Origin) -> AcceleratorChoice:
    spec = text.strip()
    if not spec:
        raise origin.error(path, "an accelerator name is empty.")
    parts = [p.strip() for p in spec.split(":")]
    if len(parts) > 2:
        raise origin.error(
            path,
            f"'{spec}' is not NAME or NAME:COUNT (it has {len(parts) - 1} ':'); write e.g. 'H100:8'.",
        )
    _check_name(parts[0], spec, path, origin)
    if len(parts) == 1:
        return AcceleratorChoice(parts[0], 1.0)
    if not parts[1]:
        raise origin.error(path, f"'{spec}' has no count after ':'; write e.g. '{parts[0]}:8'.")
    try:
        count = float(parts[1])
    except ValueError:
        raise origin.error(
            path, f"the count '{parts[1]}' in '{spec}' is not a number; write e.g. '{parts[0]}:8'."
        ) from None
    return AcceleratorChoice(parts[0], _check_count(count, spec, path, origin))


def _check_name(name: str, spec: str, path: Path, origin: Origin) -> None:
    if not name:
        raise origin.error(path, f"'{spec}' has no accelerator name before ':'.")
    if not _ACC_NAME_RE.match(name):
        raise origin.error(
            path,
            f"'{name}' is not an accelerator name (letters, digits, spaces, '-', '_' and '.'; "
            "e.g. 'H100', 'A100-80GB').",
        )


def _check_count(count: float, spec: str, path: Path, origin: Origin) -> float:
    if not math.isfinite(count) or count <= 0:
        raise origin.error(path, f"the accelerator count must be a positive number, got '{spec}'.")
    if count > 1 and not count.is_integer():
        raise origin.error(
            path,
            f"fractional accelerator counts must be below 1 (a share of one GPU), got '{spec}'.",
        )
    return count


# ------------------------------------------------------------- numbers and sizes


def parse_cpus(value: object, path: Path, origin: Origin) -> tuple[float, bool] | None:
    """8, '8' (exactly 8 vCPUs) or '8+' (at least 8) -> (8.0, at_least)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise origin.error(path, f"expected a vCPU count like 8 or '8+', got {describe(value)}.")
    text = str(value).strip()
    at_least = text.endswith("+")
    number = text[:-1].strip() if at_least else text
    try:
        count = float(number)
    except ValueError:
        raise origin.error(
            path, f"'{value}' is not a number of vCPUs; write e.g. 8 (exactly) or '8+' (at least)."
        ) from None
    if not math.isfinite(count) or count <= 0:
        raise origin.error(path, f"the vCPU count must be positive, got '{value}'.")
    return count, at_least


def parse_memory(value: object, path: Path, origin: Origin) -> tuple[float, bool] | None:
    """Memory per node in GiB: 32, '32', '32+', '32GB', '0.5TB+' -> (GiB, at_least)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise origin.error(path, f"expected memory like 32 or '32+' (GiB), got {describe(value)}.")
    text = str(value).strip()
    if text.lower().rstrip("+").endswith("x"):
        raise origin.error(path, f"memory as a multiple of vCPUs ('{value}') {UNSUPPORTED_NOTE}.")
    match = _MEMORY_RE.match(text)
    if match is None:
        raise origin.error(
            path,
            f"'{value}' is not an amount of memory; write GiB like 32 (exactly), '32+' (at least), "
            "or with a unit: '512MB', '1TB+'.",
        )
    unit = (match.group(2) or "g")[0].lower()
    gib = float(match.group(1)) * _MEMORY_UNIT_GIB[unit]
    if gib <= 0:
        raise origin.error(path, f"memory must be positive, got '{value}'.")
    return gib, match.group(3) is not None


def parse_disk_size(value: object, path: Path, origin: Origin) -> int | None:
    """Disk size in GB: 256, '256', '256GB', '1TB' -> whole GB (rounded up)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise origin.error(
            path, f"expected a disk size like 256 (GB) or '1TB', got {describe(value)}."
        )
    match = _MEMORY_RE.match(str(value).strip())
    if match is None or match.group(3):
        raise origin.error(
            path, f"'{value}' is not a disk size; write GB like 256, or '512GB', '1TB'."
        )
    unit = (match.group(2) or "g")[0].lower()
    size = math.ceil(float(match.group(1)) * _MEMORY_UNIT_GIB[unit])
    if size <= 0:
        raise origin.error(path, f"the disk size must be positive, got '{value}'.")
    return size


def parse_ports(value: object, path: Path, origin: Origin) -> tuple[str, ...] | None:
    """8080, '8080', '10000-10010', or a list of those -> ('8080', '10000-10010')."""
    if value is None:
        return None
    items = value if isinstance(value, list | tuple) else [value]
    out: list[str] = []
    for index, item in enumerate(items):
        where = path + (index,) if isinstance(value, list | tuple) else path
        if isinstance(item, bool) or not isinstance(item, int | str):
            raise origin.error(
                where, f"expected a port like 8080 or '10000-10010', got {describe(item)}."
            )
        for piece in str(item).split(","):
            out.append(_parse_port_piece(piece.strip(), item, where, origin))
    return tuple(dict.fromkeys(out))


def _parse_port_piece(piece: str, item: object, path: Path, origin: Origin) -> str:
    match = _PORT_RE.match(piece)
    if match is None:
        raise origin.error(path, f"'{item}' is not a port or a port range like '10000-10010'.")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) else low
    for port in (low, high):
        if not 1 <= port <= 65535:
            raise origin.error(path, f"port {port} is out of range 1-65535 (in '{item}').")
    if high < low:
        raise origin.error(path, f"the port range '{item}' ends before it starts.")
    return str(low) if low == high else f"{low}-{high}"


# ----------------------------------------------------------- location and network


def parse_cloud(value: object, path: Path, origin: Origin) -> str | None:
    if value is None:
        return None
    name = expect_str(value, path, origin).strip().lower()
    name = CLOUD_ALIASES.get(name, name)
    if name in UNSUPPORTED_CLOUDS:
        raise origin.error(path, f"the cloud '{value}': {_engine_refusal(name)}")
    if name not in KNOWN_CLOUDS:
        from launcher.task.cloud_names import cloud_did_you_mean

        raise origin.error(
            path,
            f"unknown cloud '{value}'{cloud_did_you_mean(name, KNOWN_CLOUDS)}"
            f" (known: {', '.join(KNOWN_CLOUDS)}).",
        )
    return name


def _engine_refusal(name: str) -> str:
    """Why a task placed only on Slurm is refused (issue 12)."""
    engine = "Slurm"
    return (
        f"{engine} {UNSUPPORTED_NOTE} (launcher runs tasks on cloud VMs and SSH machines). "
        f"An any_of/ordered entry on {engine} is skipped while other entries remain, but "
        "here it is the only place given: name a cloud instead (e.g. infra: aws), or leave "
        "the location out to run on the cheapest one."
    )


def parse_infra(
    value: object, path: Path, origin: Origin
) -> tuple[str | None, str | None, str | None]:
    """'aws', 'aws/us-east-1', 'aws/us-east-1/us-east-1a', 'local', '*/us-east-1' ->
    (cloud, region, zone); '*' parts mean any."""
    text = expect_str(value, path, origin).strip()
    parts = [p.strip() for p in text.split("/")]
    if parts[0].lower() in UNSUPPORTED_CLOUDS:
        raise origin.error(path, f"infra '{text}': {_engine_refusal(parts[0].lower())}")
    if CLOUD_ALIASES.get(parts[0].lower(), parts[0].lower()) == "kubernetes" and len(parts) > 1:
        # a Kubernetes context name may hold slashes (EKS: arn:...:cluster/NAME)
        context = "/".join(parts[1:])
        if not all(parts[1:]):
            raise origin.error(path, f"'{text}' is not k8s[/CONTEXT] (e.g. 'k8s/my-context').")
        return parse_cloud(parts[0], path, origin), (None if context == "*" else context), None
    if len(parts) > 3 or any(not p for p in parts):
        raise origin.error(
            path,
            f"'{text}' is not CLOUD[/REGION[/ZONE]] (e.g. 'aws/us-east-1/us-east-1a' or '*/us-east-1').",
        )
    cloud, region, zone = (parts + [None, None])[:3]
    return (
        None if cloud == "*" else parse_cloud(cloud, path, origin),
        None if region == "*" else region,
        None if zone == "*" else zone,
    )


def parse_network(value: object, path: Path, origin: Origin) -> NetworkRequest | None:
    """`network: rdma` or `network: {fabric: infiniband|efa|roce|rdma|any, min_gbps: N}`."""
    if value is None:
        return None
    if isinstance(value, str):
        return NetworkRequest(_parse_fabric(value, path, origin))
    mapping = expect_mapping(value, path, origin, "a mapping {fabric, min_gbps} or a fabric name")
    check_keys(mapping, path, origin, ("fabric", "min_gbps"))
    fabric = "any"
    if mapping.get("fabric") is not None:
        fabric = _parse_fabric(mapping["fabric"], path + ("fabric",), origin)
    min_gbps = None
    if mapping.get("min_gbps") is not None:
        min_gbps = expect_positive_number(mapping["min_gbps"], path + ("min_gbps",), origin)
    return NetworkRequest(fabric, min_gbps)


def _parse_fabric(value: object, path: Path, origin: Origin) -> str:
    name = expect_str(value, path, origin).strip().lower()
    if name not in REQUESTABLE_FABRICS:
        raise origin.error(
            path,
            f"unknown fabric '{value}'{did_you_mean(name, REQUESTABLE_FABRICS)} "
            f"(allowed: {', '.join(REQUESTABLE_FABRICS)}; 'rdma' = any of infiniband, efa, roce; "
            "'best' = any of those or tcpx).",
        )
    return name


def apply_network_tier(
    network: NetworkRequest | None, tier: object, path: Path, origin: Origin
) -> NetworkRequest | None:
    """SkyPilot's `network_tier`: best -> the best GPU network the cloud offers for the
    instance (fabric `best`: InfiniBand, EFA, RoCE or GPUDirect-TCPX); standard -> no
    fabric requirement. A fabric named in `network` wins over the tier."""
    if tier is None:
        return network
    name = expect_str(tier, path, origin).strip().lower()
    if name not in NETWORK_TIERS:
        raise origin.error(
            path,
            f"unknown network_tier '{tier}'{did_you_mean(name, NETWORK_TIERS)} "
            "(allowed: best = the best GPU network of the instance, "
            "standard = no fabric requirement).",
        )
    if name == "standard":
        if network is not None and network.fabric != "any":
            raise origin.error(
                path, f"network_tier: standard contradicts network.fabric: {network.fabric}."
            )
        return network
    if network is None or network.fabric == "any":
        return NetworkRequest("best", None if network is None else network.min_gbps)
    return network  # already a specific fabric (infiniband, efa, roce, tcpx, rdma, best)


# ------------------------------------------------------------------ the section


def parse_resources_spec(value: object, path: Path, origin: Origin) -> ResourcesSpec:
    """The `resources:` section (None = no requirements). `job_recovery`, `spot_recovery`
    and `autostop` are accepted here but parsed by launcher.task.policies.

    SkyPilot Benchmark's `candidates` list is read as `any_of` (with a note); the pod
    keys `preemption` / `termination_hook` are accepted (with a note) where the mapping
    or the section names kubernetes, and refused by name elsewhere."""
    if value is None:
        return ResourcesSpec()
    mapping = expect_mapping(value, path, origin)
    given = [k for k in ("any_of", "ordered", "candidates") if mapping.get(k) is not None]
    entries_raw = mapping.get(given[0]) if given else None
    section_k8s = _names_kubernetes(mapping) or (
        isinstance(entries_raw, list)
        and any(isinstance(e, Mapping) and _names_kubernetes(e) for e in entries_raw)
    )
    notes: list[str] = []
    check_keys(
        mapping, path, origin, (*SECTION_FIELDS, "candidates", *_pod_keys(section_k8s)),
        unsupported=_unsupported_keys(section_k8s), elsewhere=TOP_LEVEL_ELSEWHERE,
    )  # fmt: skip
    notes.extend(_pod_notes(mapping, path))
    notes.extend(_accelerator_args_notes(mapping, None, path, origin))
    base = _tpu_node_host(parse_resources_entry(mapping, path, origin), mapping, path, notes)
    if len(given) > 1:
        raise origin.error(
            path + (given[1],), f"use either '{given[0]}' or '{given[1]}', not both.",
        )
    key = given[0] if given else "any_of"
    ordered = key == "ordered"
    if key == "candidates":
        notes.append(
            f"{format_path(path + (key,))} (SkyPilot Benchmark's list of resources to compare, "
            "each on its own cluster) is planned as any_of: the cheapest candidate runs."
        )
    alternatives: list[Resources] = []
    dropped: list[str] = []
    first_drop_error: TaskValidationError | None = None
    if mapping.get(key) is not None:
        entries = expect_list(mapping[key], path + (key,), origin, "a list of resources mappings")
        if not entries:
            raise origin.error(path + (key,), f"'{key}' lists no alternatives.")
        for index, entry in enumerate(entries):
            where = path + (key, index)
            entry_map = expect_mapping(entry, where, origin, "a resources mapping")
            entry_k8s = _names_kubernetes(entry_map) or _names_kubernetes(mapping)
            check_keys(
                entry_map, where, origin, (*ENTRY_FIELDS, *_pod_keys(entry_k8s)),
                unsupported=_unsupported_keys(entry_k8s),
                elsewhere={k: "resources (one level only)" for k in ("any_of", "ordered", "candidates")},
            )  # fmt: skip
            notes.extend(_pod_notes(entry_map, where))
            notes.extend(_accelerator_args_notes(entry_map, mapping, where, origin))
            engine = _unsupported_engine(entry_map)
            if engine is not None:
                # One alternative on an engine launcher lacks (Slurm) does not sink the
                # task: it is dropped with a note while others remain.
                try:
                    parse_resources_entry(entry_map, where, origin)
                except TaskValidationError as exc:
                    first_drop_error = first_drop_error or exc
                dropped.append(
                    f"{format_path(where)} ({engine}) is skipped: {engine} {UNSUPPORTED_NOTE}."
                )
                continue
            alternatives.append(_tpu_node_host(
                parse_resources_entry(entry_map, where, origin), entry_map, where, notes))
        if not alternatives and first_drop_error is not None:
            raise first_drop_error
    dropped.extend(notes)
    spec = ResourcesSpec(base, tuple(alternatives), ordered, tuple(dropped))
    _check_image_regions(spec, origin)
    return spec


def legacy_autostop_hook(
    value: object, path: Path, origin: Origin,
) -> tuple[object, tuple[str, ...]]:
    """SkyPilot's deprecated `autostop: {hook, hook_timeout}` on a Kubernetes task, read
    as `termination_hook: {command, timeout}` (SkyPilot routes it there with a warning).

    Returns the resources value to parse (a new mapping when rewritten, else `value`)
    and the note saying so. Giving both `autostop.hook` and `termination_hook` is an
    error naming `autostop.hook`, as in SkyPilot. Outside Kubernetes nothing is
    rewritten (the autostop parser then refuses `hook` by name). Pure."""
    if not isinstance(value, Mapping) or not _names_kubernetes(value):
        return value, ()
    stop = value.get("autostop")
    if not isinstance(stop, Mapping) or stop.get("hook") is None:
        return value, ()
    where = path + ("autostop", "hook")
    if value.get("termination_hook") is not None:
        raise origin.error(
            where, "give the pod hook either as autostop.hook (SkyPilot's deprecated "
            "spelling) or as termination_hook, not both.",
        )
    hook: dict[str, object] = {"command": stop["hook"]}
    if stop.get("hook_timeout") is not None:
        hook["timeout"] = stop["hook_timeout"]
    rest = {k: v for k, v in stop.items() if k not in ("hook", "hook_timeout")}
    rewritten = {k: v for k, v in value.items() if k != "autostop"}
    if rest:
        rewritten["autostop"] = rest
    rewritten["termination_hook"] = hook
    note = (
        f"{format_path(where)} is SkyPilot's deprecated spelling of termination_hook; "
        "it is read as resources.termination_hook."
    )
    return rewritten, (note,)


def _names_kubernetes(entry: Mapping[str, object]) -> bool:
    """Whether a resources mapping names kubernetes (`cloud: kubernetes|k8s`, `infra: k8s/...`)."""
    cloud = entry.get("cloud")
    infra = entry.get("infra")
    name = cloud if isinstance(cloud, str) else infra.split("/")[0] if isinstance(infra, str) else ""
    name = name.strip().lower()
    return CLOUD_ALIASES.get(name, name) == "kubernetes"


def _pod_keys(kubernetes: bool) -> tuple[str, ...]:
    """The pod-only keys allowed on a mapping (only where kubernetes is named)."""
    return POD_ONLY_FIELDS if kubernetes else ()


def _unsupported_keys(kubernetes: bool) -> tuple[str, ...]:
    """The SkyPilot resource keys refused as unsupported on a mapping."""
    if not kubernetes:
        return UNSUPPORTED_RESOURCE_FIELDS
    return tuple(k for k in UNSUPPORTED_RESOURCE_FIELDS if k not in POD_ONLY_FIELDS)


def _pod_notes(mapping: Mapping[str, object], path: Path) -> list[str]:
    """A note per pod-only key present (accepted for a Kubernetes placement, never run)."""
    return [
        f"{format_path(path + (key,))} configures the Kubernetes pod; the task is planned "
        "with it but nothing runs it here (launcher's pods get no preemption or termination hooks)."
        for key in POD_ONLY_FIELDS
        if mapping.get(key) is not None
    ]


def _accelerator_args_notes(
    mapping: Mapping[str, object], base: Mapping[str, object] | None, path: Path, origin: Origin,
) -> list[str]:
    """SkyPilot's TPU options on a mapping whose accelerators (its own, else the base
    section's) are a TPU: checked (keys and value types) and noted. They matter only when
    a TPU is created, and TPUs are planned only (a launch is refused with the TPU reason,
    launcher.provisioning.planning). On a mapping without a TPU: an error naming them."""
    value = mapping.get("accelerator_args")
    if value is None:
        return []
    where = path + ("accelerator_args",)
    args = expect_mapping(value, where, origin, "a mapping of TPU options (runtime_version, ...)")
    check_keys(args, where, origin, tuple(ACCELERATOR_ARGS))
    for key, kind in ACCELERATOR_ARGS.items():
        if args.get(key) is not None:
            if kind == "bool":
                expect_bool(args[key], where + (key,), origin)
            else:
                expect_str(args[key], where + (key,), origin)
    names = _accelerator_names(mapping) or (_accelerator_names(base) if base else [])
    if not any(n.lower().startswith("tpu-") for n in names):
        raise origin.error(
            where, "accelerator_args (runtime_version, tpu_vm, tpu_name) configures a TPU; "
            "this resources mapping asks for no TPU (e.g. accelerators: tpu-v5p-8).")
    given = ", ".join(f"{k}: {args[k]}" for k in ACCELERATOR_ARGS if args.get(k) is not None)
    return [f"{format_path(where)} ({given or 'empty'}) is checked and planned with the TPU; "
            "it would apply when a TPU is created, and TPUs are planned only in this version, "
            "so a launch of the TPU is refused."]


def _tpu_node_host(res: Resources, mapping: Mapping[str, object], path: Path,
                   notes: list[str]) -> Resources:
    """A TPU Node (`accelerator_args.tpu_vm: false`) names its host VM as instance_type;
    the catalog prices TPUs as TPU VMs, so the TPU is planned without the host (a note
    says the host is not in the price). TPUs are planned only: nothing is launched."""
    args = mapping.get("accelerator_args")
    if (not isinstance(args, Mapping) or args.get("tpu_vm") is not False
            or res.instance_type is None):
        return res
    notes.append(f"{format_path(path + ('instance_type',))} '{res.instance_type}' is the host "
                 "VM of a TPU Node (accelerator_args.tpu_vm: false); the TPU is planned and "
                 "priced as a TPU VM, without the host VM's price.")
    return dataclasses.replace(res, instance_type=None)


def _accelerator_names(mapping: Mapping[str, object]) -> list[str]:
    """The accelerator names written in a resources mapping (any of its forms)."""
    value = mapping.get("accelerators", mapping.get("gpus"))
    items = list(value) if isinstance(value, Mapping | list) else [value]
    return [str(item).split(":")[0].strip() for item in items if isinstance(item, str)]


def _unsupported_engine(entry: Mapping[str, object]) -> str | None:
    """The engine's name when an alternative names one of UNSUPPORTED_CLOUDS as its cloud."""
    names = {n: n.capitalize() for n in UNSUPPORTED_CLOUDS}
    cloud = entry.get("cloud")
    if isinstance(cloud, str) and cloud.strip().lower() in names:
        return names[cloud.strip().lower()]
    infra = entry.get("infra")
    if isinstance(infra, str):
        return names.get(infra.strip().split("/")[0].strip().lower())
    return None


def parse_resources_entry(mapping: Mapping[str, object], path: Path, origin: Origin) -> Resources:
    """One resources mapping (keys already checked) -> a partial `Resources`."""

    def at(key: str) -> Path:
        return path + (key,)

    cloud = parse_cloud(mapping.get("cloud"), at("cloud"), origin)
    region = _opt_str(mapping.get("region"), at("region"), origin)
    zone = _opt_str(mapping.get("zone"), at("zone"), origin)
    if mapping.get("infra") is not None:
        if cloud or region or zone:
            raise origin.error(
                at("infra"),
                "give the location either as 'infra' or as 'cloud'/'region'/'zone', not both.",
            )
        cloud, region, zone = parse_infra(mapping["infra"], at("infra"), origin)
    cpus = parse_cpus(mapping.get("cpus"), at("cpus"), origin)
    memory = parse_memory(mapping.get("memory"), at("memory"), origin)
    use_spot = None
    if mapping.get("use_spot") is not None:
        use_spot = expect_bool(mapping["use_spot"], at("use_spot"), origin)
    disk_tier = None
    if mapping.get("disk_tier") is not None:
        disk_tier = expect_str(mapping["disk_tier"], at("disk_tier"), origin).strip().lower()
        if disk_tier not in DISK_TIERS:
            raise origin.error(
                at("disk_tier"),
                f"unknown disk_tier '{mapping['disk_tier']}'{did_you_mean(disk_tier, DISK_TIERS)} "
                f"(allowed: {', '.join(DISK_TIERS)}).",
            )
    image_id, image_by_region = _parse_image_id(mapping.get("image_id"), at("image_id"), origin)
    labels = None
    if mapping.get("labels") is not None:
        label_map = string_map(mapping["labels"], at("labels"), origin)
        labels = tuple(sorted((k, v) for k, v in label_map.items() if v is not None))
    max_cost = None
    if mapping.get("max_hourly_cost") is not None:
        max_cost = expect_positive_number(mapping["max_hourly_cost"], at("max_hourly_cost"), origin)
    network = parse_network(mapping.get("network"), at("network"), origin)
    network = apply_network_tier(network, mapping.get("network_tier"), at("network_tier"), origin)
    acc_key = "accelerators"
    if mapping.get("gpus") is not None:  # SkyPilot's alias of `accelerators`
        if mapping.get("accelerators") is not None:
            raise origin.error(
                at("gpus"), "'gpus' is another name for 'accelerators': give only one of them."
            )
        acc_key = "gpus"
    return Resources(
        cloud=cloud,
        region=region,
        zone=zone,
        accelerators=parse_accelerators(mapping.get(acc_key), at(acc_key), origin),
        cpus=None if cpus is None else cpus[0],
        cpus_at_least=False if cpus is None else cpus[1],
        memory_gib=None if memory is None else memory[0],
        memory_at_least=False if memory is None else memory[1],
        instance_type=_opt_str(mapping.get("instance_type"), at("instance_type"), origin),
        use_spot=use_spot,
        disk_size_gb=parse_disk_size(mapping.get("disk_size"), at("disk_size"), origin),
        disk_tier=disk_tier,
        image_id=image_id,
        image_id_by_region=image_by_region,
        ports=parse_ports(mapping.get("ports"), at("ports"), origin),
        labels=labels,
        max_hourly_cost=max_cost,
        network=network,
        path=path,
    )


def _opt_str(value: object, path: Path, origin: Origin) -> str | None:
    return None if value is None else expect_str(value, path, origin).strip()


def _parse_image_id(
    value: object, path: Path, origin: Origin
) -> tuple[str | None, tuple[tuple[str, str], ...] | None]:
    if value is None:
        return None, None
    if isinstance(value, Mapping):
        regions = string_map(value, path, origin)
        if not regions:
            raise origin.error(path, "the region -> image mapping is empty.")
        return None, tuple((r, i) for r, i in regions.items() if i is not None)
    return expect_str(value, path, origin).strip(), None


def _check_image_regions(spec: ResourcesSpec, origin: Origin) -> None:
    for res in spec.expanded():
        regions = dict(res.image_id_by_region or ())
        if (
            res.image_id_by_region is not None
            and res.region is not None
            and res.region not in regions
        ):
            raise origin.error(
                res.path + ("image_id",),
                f"image_id names no image for region '{res.region}' "
                f"(it lists {', '.join(r for r, _ in res.image_id_by_region)}).",
            )
