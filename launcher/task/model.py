"""The Task: a validated SkyPilot-format task YAML (plus launcher's additions).

CONTRACT (shared; see the project brief):
    Task.from_yaml(path, env_overrides=None) / Task.from_yaml_str(text, source=...) /
    Task.from_dict(d, source=None) -> Task
    task.candidates() -> list[ResourceCandidate]
    canonicalize_accelerators(task, known_names) -> Task

Loading is pure (no network, no filesystem except reading the YAML): missing
local directories are reported by `Task.check_local_paths()`, which launch calls.
Every malformed task raises `TaskValidationError` naming the dotted field path and
the YAML line. PyYAML is imported only when YAML text is parsed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from launcher.errors import TaskValidationError
from launcher.task.config_section import TaskConfig, parse_task_config
from launcher.task.fields import (
    ENV_NAME_RE,
    Origin,
    Path,
    canonical_accelerator_name,
    check_keys,
    describe,
    expect_int,
    expect_mapping,
    expect_str,
    format_path,
    scalar_text,
    string_map,
    unknown_accelerator_message,
)
from launcher.task.git_workdir import GitWorkdir, clone_script, parse_git_workdir
from launcher.task.health import HealthSpec, parse_health
from launcher.task.path_fields import (
    is_uri,
    parse_file_mounts,
    parse_workdir,
    substitute_envs,
    substituted_checkpoint,
)
from launcher.task.policies import (
    AutostopSpec,
    CheckpointSpec,
    JobRecovery,
    parse_autostop,
    parse_job_recovery,
)
from launcher.task.pool import POOL_NOT_LAUNCHABLE, check_pool
from launcher.task.resources import (
    AcceleratorChoice,
    AcceleratorRequest,
    ResourceCandidate,
    ResourcesSpec,
)
from launcher.task.resources_parser import ENTRY_FIELDS, legacy_autostop_hook, parse_resources_spec
from launcher.task.storage import (
    StorageMount,
    list_source_notes,
    list_source_refusal,
    placeholder_notes,
    placeholder_refusal,
)
from launcher.task.volumes import (
    VOLUMES_NOT_LAUNCHABLE,
    VolumeMount,
    parse_volumes,
    volumes_launchable,
)

__all__ = [
    "AutostopSpec",
    "CheckpointSpec",
    "JobRecovery",
    "Task",
    "TaskValidationError",
    "canonicalize_accelerators",
]

TASK_FIELDS = (
    "name", "workdir", "num_nodes", "resources", "envs", "secrets", "file_mounts",
    "setup", "run", "checkpoint", "service", "config", "volumes", "pool",
)  # fmt: skip
UNSUPPORTED_TASK_FIELDS = (
    "volume_mounts", "experimental", "event_callback",
    "managed_secrets", "inputs", "outputs", "file_mounts_mapping", "api_server_access",
)  # fmt: skip
_RESOURCE_FIELD_HOME = {name: f"resources.{name}" for name in (*ENTRY_FIELDS, "any_of", "ordered")}
_POLICY_FIELDS = ("job_recovery", "spot_recovery", "autostop", "health")
_PATH_PART_RE = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_LOCATION_FIELDS = ("cloud", "region", "zone", "infra")
_T = TypeVar("_T")
# Largest gang: beyond any cloud's cluster placement limits (and a typo guard).
MAX_NUM_NODES = 4096
# Input limits (docs/task-format.md, "Limits"). A task file is refused before parsing
# above MAX_TASK_FILE_BYTES. `run` and `setup` are stored with every job (the head's
# queue, a managed job's saved task) and copied to every node: a script longer than
# MAX_SCRIPT_BYTES belongs in a file under workdir. (Nodes read them from a file, so no
# argument-size limit applies there.)
MAX_TASK_FILE_BYTES = 10 * 1024 * 1024
MAX_SCRIPT_BYTES = 64 * 1024
# envs + secrets are likewise stored with every job and exported on every node.
MAX_ENV_BYTES = 64 * 1024


def _human_bytes(n: int) -> str:
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


def script_size_problem(text: str, what: str) -> str | None:
    """Why the script `text` (a task's `run`/`setup`, or an exec command) is too big for
    a node, or None."""
    size = len(text.encode("utf-8", "surrogateescape"))
    if size <= MAX_SCRIPT_BYTES:
        return None
    return (f"{what} is {_human_bytes(size)}; the limit is {_human_bytes(MAX_SCRIPT_BYTES)} "
            "(a script is stored with every job and copied to every node). Put a long "
            "script in a file under workdir and run that file.")


@dataclass(frozen=True)
class Task:
    """A validated task. Immutable: derive changed copies with `with_overrides`.

    `workdir` and local `file_mounts` sources are absolute (resolved against the
    YAML's directory). `secrets` are never shown in `repr()`.
    """

    name: str | None = None
    workdir: str | None = None
    num_nodes: int = 1
    resources: ResourcesSpec = ResourcesSpec()
    envs: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)
    file_mounts: dict[str, str] = field(default_factory=dict)  # remote path -> local path or URI
    # remote path -> SkyPilot storage mount ({name, source, store, mode}; task/storage.py)
    storage_mounts: dict[str, StorageMount] = field(default_factory=dict)
    setup: str | None = None
    run: str | None = None
    checkpoint: CheckpointSpec | None = None
    job_recovery: JobRecovery | None = None
    autostop: AutostopSpec | None = None
    health: HealthSpec | None = None  # None: the default gate (task_health.DEFAULT_HEALTH)
    source_path: str | None = None
    origin: Origin = field(default_factory=Origin, compare=False, repr=False)
    # envs / secrets declared with no value (`HF_TOKEN: null`), loaded with
    # `require_values=False`: planning needs no values; `check_values()` before running.
    unset_envs: tuple[str, ...] = ()
    unset_secrets: tuple[str, ...] = ()
    # What loading set aside, for the user to read (e.g. a SkyServe `service:` section
    # that `launch` does not use); planning shows them with its own notes.
    notes: tuple[str, ...] = field(default=(), compare=False)
    # Sections planned as if absent but refused by a real launch (`pool`): field names.
    plan_only_fields: tuple[str, ...] = field(default=(), compare=False)
    # SkyPilot extras (issue 12): per-task config overrides (task/config_section.py), a git
    # workdir cloned on the nodes (task/git_workdir.py; `workdir` is then None), and volumes
    # (task/volumes.py: launched on Kubernetes only; elsewhere `check_values` refuses them).
    config: TaskConfig | None = None
    git_workdir: GitWorkdir | None = None
    volumes: tuple[VolumeMount, ...] = ()

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_yaml(
        cls,
        path: str | os.PathLike[str],
        env_overrides: Mapping[str, str] | None = None,
        secret_overrides: Mapping[str, str] | None = None,
        *,
        require_values: bool = True,
    ) -> Task:
        """Load and validate a task file. Raises TaskValidationError (also for an
        unreadable file). Relative paths in the task resolve against its directory.

        `require_values=False` (cost queries, dry runs) accepts envs/secrets declared
        without a value and records them in `unset_envs`/`unset_secrets`; the default
        raises for them, naming the `--env`/`--secret` flag that gives one."""
        shown = os.fspath(path)
        try:
            size = os.stat(shown).st_size
            if size > MAX_TASK_FILE_BYTES:
                raise TaskValidationError(
                    f"task file '{shown}' is {_human_bytes(size)}; task files are limited to "
                    f"{_human_bytes(MAX_TASK_FILE_BYTES)}. Keep data out of the YAML: put it in "
                    "workdir or file_mounts."
                )
            with open(shown, encoding="utf-8") as fh:
                text = fh.read(MAX_TASK_FILE_BYTES + 1)
        except FileNotFoundError:
            raise TaskValidationError(f"task file '{shown}' does not exist.") from None
        except IsADirectoryError:
            raise TaskValidationError(f"'{shown}' is a directory, not a task YAML file.") from None
        except UnicodeDecodeError as exc:
            raise TaskValidationError(
                f"task file '{shown}' is not UTF-8 text ({exc.reason})."
            ) from None
        except OSError as exc:
            raise TaskValidationError(f"cannot read task file '{shown}': {exc.strerror}.") from None
        absolute = os.path.abspath(shown)
        return cls.from_yaml_str(
            text,
            source=shown,
            env_overrides=env_overrides,
            secret_overrides=secret_overrides,
            base_dir=os.path.dirname(absolute),
            source_path=absolute,
            require_values=require_values,
        )

    @classmethod
    def from_yaml_str(
        cls,
        text: str,
        source: str = "<string>",
        env_overrides: Mapping[str, str] | None = None,
        secret_overrides: Mapping[str, str] | None = None,
        base_dir: str | None = None,
        source_path: str | None = None,
        *,
        require_values: bool = True,
    ) -> Task:
        """Validate YAML text. `base_dir` (default: the current directory) anchors relative
        paths; `require_values` as in `from_yaml`."""
        from launcher.task.yaml_loader import load_yaml  # PyYAML costs ~50 ms to import

        if len(text) > MAX_TASK_FILE_BYTES:  # characters: each one is at least a byte
            raise TaskValidationError(
                f"the task is over {_human_bytes(MAX_TASK_FILE_BYTES)}; tasks are limited to "
                f"{_human_bytes(MAX_TASK_FILE_BYTES)}. Keep data out of the YAML: put it in "
                "workdir or file_mounts.",
                source=source,
            )
        loaded = load_yaml(text, source)
        return _build_task(
            loaded.data, loaded.origin, base_dir, env_overrides, secret_overrides, source_path,
            require_values=require_values,
        )

    @classmethod
    def from_dict(
        cls,
        d: Mapping[str, object],
        source: str | None = None,
        env_overrides: Mapping[str, str] | None = None,
        secret_overrides: Mapping[str, str] | None = None,
        base_dir: str | None = None,
        *,
        require_values: bool = True,
    ) -> Task:
        """Validate a task given as plain data (the YAML's shape). Errors carry no line.
        `require_values` as in `from_yaml`."""
        return _build_task(
            d, Origin(source), base_dir, env_overrides, secret_overrides, None,
            require_values=require_values,
        )

    # ------------------------------------------------------------------ queries

    def candidates(self) -> list[ResourceCandidate]:
        """Every resource alternative, fully expanded, with preference ranks (see resources.py)."""
        return self.resources.candidates()

    def accelerator_names(self) -> set[str]:
        """The accelerator names the task's candidates can use (as written, or as canonicalized)."""
        names: set[str] = set()
        for res in self.resources.expanded():
            if res.accelerators is not None:
                names.update(c.name for c in res.accelerators.choices)
        return names

    def line_of(self, field_path: str) -> int | None:
        """The YAML line of a dotted field path such as 'resources.any_of[1].cpus'."""
        parts: list[str | int] = []
        for name, index in _PATH_PART_RE.findall(field_path):
            parts.append(int(index) if index else name)
        return self.origin.line(tuple(parts))

    def error(self, field_path: str, message: str) -> TaskValidationError:
        """A TaskValidationError pointing at `field_path` of this task (for later stages);
        a field replaced by `with_overrides` names its source, not a YAML line."""
        parts: list[str | int] = []
        for name, index in _PATH_PART_RE.findall(field_path):
            parts.append(int(index) if index else name)
        return self.origin.error(tuple(parts), message)

    def check_local_paths(self) -> None:
        """Raise TaskValidationError if `workdir` or a local file_mounts source is missing.
        Blocking (stat calls); launch calls it, cost queries and dry runs need not."""
        if self.workdir is not None and not os.path.isdir(self.workdir):
            raise self.error("workdir", f"directory '{self.workdir}' does not exist.")
        for remote, local in self.file_mounts.items():
            if not is_uri(local) and not os.path.exists(local):
                raise self.error(f"file_mounts.{remote}", f"local path '{local}' does not exist.")
        for remote, mount in self.storage_mounts.items():
            if mount.source_is_local and not os.path.isdir(mount.source or ""):
                raise self.error(f"file_mounts.{remote}.source",
                                 f"local directory '{mount.source}' does not exist.")
            for i, item in enumerate(mount.source_list):
                if not os.path.exists(item):
                    raise self.error(f"file_mounts.{remote}.source[{i}]",
                                     f"local path '{item}' does not exist.")

    def check_values(self) -> None:
        """Raise TaskValidationError if an env or secret still has no value (see
        `require_values`). Every real launch calls it; planning does not."""
        for key, names in (("envs", self.unset_envs), ("secrets", self.unset_secrets)):
            if names:
                raise self.error(f"{key}.{names[0]}", _missing_message(key, names))
        if self.volumes and not volumes_launchable([c.cloud for c in self.candidates()]):
            raise self.error("volumes", VOLUMES_NOT_LAUNCHABLE)
        if "pool" in self.plan_only_fields:
            raise self.error("pool", POOL_NOT_LAUNCHABLE)
        refusal = placeholder_refusal(self.storage_mounts) or list_source_refusal(
            self.storage_mounts)
        if refusal is not None:
            raise self.origin.error(*refusal)

    def node_setup(self) -> str | None:
        """What runs on every node before `run`: the git workdir's clone (if any), then
        `setup`. None when there is neither."""
        if self.git_workdir is None:
            return self.setup
        return clone_script(self.git_workdir) + (self.setup or "")

    # ----------------------------------------------------------------- changing

    def with_overrides(
        self,
        *,
        name: str | None = None,
        num_nodes: int | None = None,
        resources: Mapping[str, object] | None = None,
        envs: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        source: str = "command line",
    ) -> Task:
        """A copy with command-line style overrides, validated like YAML.

        `resources` holds SkyPilot-format fields (e.g. {"accelerators": "H100:8",
        "use_spot": True}); each replaces that field in the base and in every
        alternative, so the override applies whatever alternative is chosen; a new
        location (cloud/region/zone/infra) replaces the whole old one. `envs` given
        here are not substituted into paths again: pass `env_overrides` when loading.
        """
        origin = Origin(source)
        task = self
        marked: list[Path] = []  # fields whose YAML line no longer tells where they came from
        if name is not None:
            task = replace(task, name=expect_str(name, ("name",), origin))
        if num_nodes is not None:
            task = replace(
                task,
                num_nodes=expect_int(
                    num_nodes, ("num_nodes",), origin, minimum=1, maximum=MAX_NUM_NODES
                ),
            )
        if resources:
            override_map = dict(resources)
            check_keys(override_map, ("resources",), origin, ENTRY_FIELDS)
            policies = {k: override_map.pop(k) for k in _POLICY_FIELDS if k in override_map}
            over = parse_resources_spec(override_map, ("resources",), origin).base
            written = task.resources.all_written()
            keys = set(override_map) | set(policies)
            if any(k in override_map for k in _LOCATION_FIELDS):  # a new place replaces the old
                written = [replace(r, cloud=None, region=None, zone=None) for r in written]
                keys |= set(_LOCATION_FIELDS)
            marked += [(*r.path, k) for r in written for k in keys]
            base, *alts = written
            new_spec = replace(
                task.resources,
                base=base.merged(replace(over, path=base.path)),
                alternatives=tuple(alt.merged(replace(over, path=alt.path)) for alt in alts),
            )
            task = replace(task, resources=new_spec)
            if "job_recovery" in policies or "spot_recovery" in policies:
                raw = policies.get("job_recovery", policies.get("spot_recovery"))
                task = replace(
                    task,
                    job_recovery=parse_job_recovery(raw, ("resources", "job_recovery"), origin),
                )
            if "health" in policies:
                task = replace(
                    task, health=parse_health(policies["health"], ("resources", "health"), origin)
                )
            if "autostop" in policies:
                task = replace(
                    task,
                    autostop=parse_autostop(
                        policies["autostop"], ("resources", "autostop"), origin
                    ),
                )
        if num_nodes is not None:
            marked.append(("num_nodes",))
        if envs:
            given = _override_values(envs, "envs", origin)
            marked += [("envs", k) for k in given]
            task = replace(
                task,
                envs={**task.envs, **given},
                unset_envs=tuple(n for n in task.unset_envs if n not in given),
            )
        if secrets:
            given = _override_values(secrets, "secrets", origin)
            marked += [("secrets", k) for k in given]
            task = replace(
                task,
                secrets={**task.secrets, **given},
                unset_secrets=tuple(n for n in task.unset_secrets if n not in given),
            )
        if marked:
            task = replace(task, origin=task.origin.with_overrides(marked, source))
        return task

    def to_dict(self, *, include_secrets: bool = False) -> dict[str, object]:
        """The task in YAML shape; `Task.from_dict` of it gives an equal task.

        Secret values are replaced by null unless `include_secrets` (then the result
        must be stored as carefully as the secrets themselves)."""
        out: dict[str, object] = {}
        if self.name is not None:
            out["name"] = self.name
        if self.workdir is not None:
            out["workdir"] = self.workdir
        elif self.git_workdir is not None:
            out["workdir"] = self.git_workdir.to_yaml_value()
        out["num_nodes"] = self.num_nodes
        resources = self.resources.to_dict()
        if self.job_recovery is not None:
            resources["job_recovery"] = self.job_recovery.to_yaml_value()
        if self.autostop is not None:
            resources["autostop"] = self.autostop.to_yaml_value()
        if self.health is not None:
            resources["health"] = self.health.to_yaml_value()
        if resources:
            out["resources"] = resources
        envs: dict[str, str | None] = {**self.envs, **dict.fromkeys(self.unset_envs)}
        if envs:
            out["envs"] = envs
        secrets: dict[str, str | None] = {
            k: (v if include_secrets else None) for k, v in self.secrets.items()
        }
        secrets.update(dict.fromkeys(self.unset_secrets))
        if secrets:
            out["secrets"] = secrets
        if self.file_mounts or self.storage_mounts:
            mounts: dict[str, object] = dict(self.file_mounts)
            mounts.update({k: m.to_yaml_value() for k, m in self.storage_mounts.items()})
            out["file_mounts"] = mounts
        if self.checkpoint is not None:
            out["checkpoint"] = self.checkpoint.to_yaml_value()
        if self.config is not None:
            out["config"] = self.config.to_yaml_value()
        if self.volumes:
            out["volumes"] = {v.path: v.to_yaml_value() for v in self.volumes}
        if self.setup is not None:
            out["setup"] = self.setup
        if self.run is not None:
            out["run"] = self.run
        return out


def canonicalize_accelerators(
    task: Task, known_names: Collection[str], aliases: Mapping[str, str] | None = None
) -> Task:
    """Map every accelerator name in `task` onto the catalog spelling in `known_names`.

    Matching ignores case (and, if that is still ambiguous-free, '-', '_' and spaces);
    `aliases` maps other names (SkyPilot's) onto catalog names.
    Raises TaskValidationError at the accelerators field for an unknown name, with
    close names suggested. Returns `task` itself when nothing changes.
    """
    def canonical(name: str, res_path: Path) -> str:
        found = canonical_accelerator_name(name, known_names, aliases)
        if found is None:
            raise task.origin.error(
                res_path + ("accelerators",), unknown_accelerator_message(name, known_names)
            )
        return found

    spec = task.resources
    new_written = []
    for res in spec.all_written():
        if res.accelerators is None:
            new_written.append(res)
            continue
        choices = tuple(
            AcceleratorChoice(canonical(c.name, res.path), c.count)
            for c in res.accelerators.choices
        )
        deduped = tuple(dict.fromkeys(choices))
        request = AcceleratorRequest(deduped, res.accelerators.ordered and len(deduped) > 1)
        new_written.append(replace(res, accelerators=request))
    new_spec = replace(spec, base=new_written[0], alternatives=tuple(new_written[1:]))
    if new_spec == spec:
        return task
    return replace(task, resources=new_spec)


# ---------------------------------------------------------------------- building


def _build_task(
    data: object,
    origin: Origin,
    base_dir: str | None,
    env_overrides: Mapping[str, str] | None,
    secret_overrides: Mapping[str, str] | None,
    source_path: str | None,
    *,
    require_values: bool = True,
) -> Task:
    if not isinstance(data, Mapping):
        raise origin.error(
            (),
            f"the task must be a mapping of fields (name, resources, run, ...), got {describe(data)}.",
        )
    top = expect_mapping(data, (), origin)
    check_keys(
        top, (), origin, TASK_FIELDS,
        unsupported=UNSUPPORTED_TASK_FIELDS, elsewhere=_RESOURCE_FIELD_HOME,
    )  # fmt: skip
    base = os.path.abspath(base_dir) if base_dir is not None else os.getcwd()

    envs, unset_envs = _complete_values(
        top.get("envs"), "envs", origin, env_overrides, require_values
    )
    secrets, unset_secrets = _complete_values(
        top.get("secrets"), "secrets", origin, secret_overrides, require_values
    )
    both = sorted((set(envs) | set(unset_envs)) & (set(secrets) | set(unset_secrets)))
    if both:
        raise origin.error(
            ("secrets", both[0]), f"'{both[0]}' is both an env and a secret; keep one."
        )
    env_bytes = sum(len(k) + len(v.encode("utf-8", "surrogateescape")) + 16
                    for values in (envs, secrets) for k, v in values.items())
    if env_bytes > MAX_ENV_BYTES:
        raise origin.error(
            ("envs",),
            f"envs and secrets together are {_human_bytes(env_bytes)}; the limit is "
            f"{_human_bytes(MAX_ENV_BYTES)} (they are stored with every job and exported on "
            "every node). Ship bulk data as a file (file_mounts).",
        )

    resources_value, legacy_notes = legacy_autostop_hook(
        top.get("resources"), ("resources",), origin)
    resources = parse_resources_spec(resources_value, ("resources",), origin)
    job_recovery, autostop = _parse_policies(resources_value, origin)
    health = _parse_health_policy(resources_value, origin)

    num_nodes = 1
    if top.get("num_nodes") is not None:
        num_nodes = expect_int(
            top["num_nodes"], ("num_nodes",), origin, minimum=1, maximum=MAX_NUM_NODES
        )

    file_mounts, storage_mounts = parse_file_mounts(top.get("file_mounts"), origin, base, envs)
    config = parse_task_config(top.get("config"), origin)
    volumes = parse_volumes(top.get("volumes"), origin, lambda text: substitute_envs(text, envs))
    git_workdir = None
    if isinstance(top.get("workdir"), Mapping):
        git_workdir = parse_git_workdir(
            top["workdir"], ("workdir",), origin, lambda text: substitute_envs(text, envs))
    return Task(
        name=_text_field(top.get("name"), ("name",), origin),
        workdir=None if git_workdir else parse_workdir(top.get("workdir"), origin, base, envs),
        num_nodes=num_nodes,
        resources=resources,
        envs=envs,
        secrets=secrets,
        file_mounts=file_mounts,
        storage_mounts=storage_mounts,
        setup=_script(top.get("setup"), "setup", origin),
        run=_script(top.get("run"), "run", origin),
        checkpoint=substituted_checkpoint(top.get("checkpoint"), origin, envs),
        job_recovery=job_recovery,
        autostop=autostop,
        health=health,
        source_path=source_path,
        origin=origin,
        unset_envs=unset_envs,
        unset_secrets=unset_secrets,
        notes=origin.warnings + legacy_notes + resources.dropped + _set_aside_notes(top, origin)
        + (config.notes if config else ())
        + ((VOLUMES_NOT_LAUNCHABLE,) if volumes and not volumes_launchable(
            [c.cloud for c in resources.candidates()]) else ())
        + placeholder_notes(storage_mounts)
        + list_source_notes(storage_mounts) + (job_recovery.notes if job_recovery else ()),
        config=config,
        git_workdir=git_workdir,
        volumes=volumes,
        plan_only_fields=("pool",) if top.get("pool") is not None else (),
    )


def _set_aside_notes(top: Mapping[str, object], origin: Origin) -> tuple[str, ...]:
    """Notes for validated sections that this command does not act on."""
    notes: list[str] = []
    if "service" in top:
        from launcher.task.service import check_service

        notes.append(check_service(top["service"], origin))
    if top.get("pool") is not None:
        notes.append(check_pool(top["pool"], origin))
    return tuple(notes)


def _text_field(value: object, path: Path, origin: Origin) -> str | None:
    if isinstance(value, list | tuple | Mapping):
        raise origin.error(path, f"expected text, got {describe(value)}.")
    return scalar_text(value, path, origin)


def _script(value: object, key: str, origin: Origin) -> str | None:
    if value is None:
        return value
    if isinstance(value, str):
        problem = script_size_problem(value, f"'{key}'")
        if problem:
            raise origin.error((key,), problem)
        return value
    hint = (
        f" (write several commands as a YAML block: '{key}: |')" if isinstance(value, list) else ""
    )
    raise origin.error((key,), f"expected a shell script (text), got {describe(value)}{hint}.")


def _complete_values(
    value: object,
    key: str,
    origin: Origin,
    overrides: Mapping[str, str] | None,
    require_values: bool,
) -> tuple[dict[str, str], tuple[str, ...]]:
    """envs / secrets: scalar values as text, and the names still without a value.
    Nulls must be filled by `overrides` when `require_values`."""
    if isinstance(value, list):
        raise origin.error(
            (key,),
            f"the list form of '{key}' (managed secret references) is a SkyPilot feature "
            "launcher doesn't support yet; use a mapping NAME: value.",
        )
    given = string_map(value, (key,), origin, env_names=True, allow_null=True)
    if overrides:
        given.update(_override_values(overrides, key, Origin("command line")))
    missing = tuple(name for name, text in given.items() if text is None)
    if missing and require_values:
        raise origin.error((key, missing[0]), _missing_message(key, missing))
    return {name: text for name, text in given.items() if text is not None}, missing


def _missing_message(key: str, missing: Sequence[str]) -> str:
    """The error for envs/secrets without a value; names flags `launch`, `exec` and
    `jobs launch` all have."""
    flag = "--env" if key == "envs" else "--secret"
    name = missing[0]
    return (
        f"'{name}' has no value; give it at launch with {flag} {name}=VALUE "
        f"(or {flag} {name} to pass it from your environment)"
        + (f"; also missing: {', '.join(missing[1:])}" if len(missing) > 1 else "")
        + "."
    )


def _override_values(values: Mapping[str, str], key: str, origin: Origin) -> dict[str, str]:
    out = {}
    for name, text in values.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            raise origin.error(
                (key, str(name)), f"'{name}' is not a valid environment variable name."
            )
        if not isinstance(text, str):
            raise origin.error((key, name), f"the value must be text, got {describe(text)}.")
        out[name] = text
    return out


def _parse_policies(
    resources_value: object, origin: Origin
) -> tuple[JobRecovery | None, AutostopSpec | None]:
    """job_recovery / autostop from the base and any alternatives; all must agree."""
    if not isinstance(resources_value, Mapping):
        return None, None
    written: list[tuple[Path, Mapping[str, object]]] = [(("resources",), resources_value)]
    for key in ("any_of", "ordered"):
        entries = resources_value.get(key)
        if isinstance(entries, list):
            written += [
                (("resources", key, i), e) for i, e in enumerate(entries) if isinstance(e, Mapping)
            ]
    recovery: tuple[Path, JobRecovery | None] | None = None
    autostop: tuple[Path, AutostopSpec | None] | None = None
    for path, mapping in written:
        if "job_recovery" in mapping and "spot_recovery" in mapping:
            raise origin.error(
                path + ("spot_recovery",),
                "'spot_recovery' is the old name of 'job_recovery'; give only one.",
            )
        for key in ("job_recovery", "spot_recovery"):
            if key in mapping:
                parsed = parse_job_recovery(mapping[key], path + (key,), origin)
                recovery = _agree(recovery, (path + (key,), parsed), origin)
        if "autostop" in mapping:
            parsed_stop = parse_autostop(mapping["autostop"], path + ("autostop",), origin)
            autostop = _agree(autostop, (path + ("autostop",), parsed_stop), origin)
    return (recovery[1] if recovery else None), (autostop[1] if autostop else None)


def _parse_health_policy(resources_value: object, origin: Origin) -> HealthSpec | None:
    """`health` from the base and any alternatives; all must agree (like autostop)."""
    if not isinstance(resources_value, Mapping):
        return None
    written: list[tuple[Path, object]] = [(("resources",), resources_value)]
    for key in ("any_of", "ordered"):
        entries = resources_value.get(key)
        if isinstance(entries, list):
            written += [
                (("resources", key, i), e) for i, e in enumerate(entries) if isinstance(e, Mapping)
            ]
    found: tuple[Path, HealthSpec | None] | None = None
    for path, mapping in written:
        if isinstance(mapping, Mapping) and "health" in mapping:
            parsed = parse_health(mapping["health"], path + ("health",), origin)
            found = _agree(found, (path + ("health",), parsed), origin)
    return found[1] if found else None


def _agree(seen: tuple[Path, _T] | None, new: tuple[Path, _T], origin: Origin) -> tuple[Path, _T]:
    if seen is not None and seen[1] != new[1]:
        raise origin.error(
            new[0],
            f"differs from '{format_path(seen[0])}'; one task has one "
            f"{new[0][-1]} policy, so give it once in 'resources'.",
        )
    return seen or new
