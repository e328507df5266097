"""SkyPilot pipelines: a task file of several YAML documents, run stage after stage.

CONTRACT:
    load_pipeline(path, env_overrides=None, secret_overrides=None, *, require_values=True)
        -> Pipeline                      (also for a one-document file: one stage)
    Pipeline.name, Pipeline.stages (tuple[Task, ...], in order), Pipeline.is_pipeline

SkyPilot's layout (`sky jobs launch pipeline.yaml`): documents separated by `---`; the
first may be a header holding only `name` (the pipeline's name); every other document
is a task. A header with `execution: parallel` (SkyPilot's job groups, run at once) is
refused: launcher runs stages one after another only. Each stage is validated like a
task file of its own (errors name the field and its line in the file); `--env` /
`--secret` values apply to every stage, as in SkyPilot.

Running is `launcher.api.jobs.jobs_launch_pipeline`: every stage a managed job, stage
k+1 held PENDING until stage k SUCCEEDED, and cancelled (not run) when it did not.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from launcher.errors import TaskValidationError
from launcher.task.fields import describe
from launcher.task.model import MAX_TASK_FILE_BYTES, Task

# Keys a pipeline header may hold (besides `name`): SkyPilot's job-group header keys,
# refused with a reason.
_GROUP_KEYS = ("execution", "primary_tasks")
MAX_STAGES = 64


@dataclass(frozen=True)
class Pipeline:
    """A pipeline's stages in run order (one stage for a plain task file)."""

    name: str | None
    stages: tuple[Task, ...]
    source_path: str | None = None

    @property
    def is_pipeline(self) -> bool:
        return len(self.stages) > 1

    def stage_name(self, index: int) -> str:
        """Stage `index`'s name: its own `name`, else `stage-<n>` (1-based)."""
        return self.stages[index].name or f"stage-{index + 1}"


def load_pipeline(
    path: str | os.PathLike[str],
    env_overrides: Mapping[str, str] | None = None,
    secret_overrides: Mapping[str, str] | None = None,
    *,
    require_values: bool = True,
) -> Pipeline:
    """Load a task or pipeline file. Raises TaskValidationError (naming the stage's
    field and line) for any invalid stage, an unreadable file, or a job-group header."""
    from launcher.task.model import _build_task  # the one validator of a task document
    from launcher.task.yaml_loader import load_yaml_documents

    shown = os.fspath(path)
    try:
        if os.stat(shown).st_size > MAX_TASK_FILE_BYTES:
            return _single(shown, env_overrides, secret_overrides, require_values)
        with open(shown, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        # let Task.from_yaml say what is wrong with the file, in its usual words
        return _single(shown, env_overrides, secret_overrides, require_values)
    docs = load_yaml_documents(text, shown)
    if len(docs) == 1:
        return _single(shown, env_overrides, secret_overrides, require_values)
    absolute = os.path.abspath(shown)
    name: str | None = None
    first = docs[0].data
    if isinstance(first, Mapping) and "run" not in first and set(first) <= {"name", *_GROUP_KEYS}:
        group = [k for k in _GROUP_KEYS if k in first]
        if group:
            raise docs[0].origin.error(
                (group[0],),
                f"'{group[0]}' makes a SkyPilot job group (stages run at the same time), which "
                "launcher doesn't support: a pipeline's stages run one after another.",
            )
        raw = first.get("name")
        if raw is not None and not isinstance(raw, str | int | float):
            raise docs[0].origin.error(("name",), f"expected text, got {describe(raw)}.")
        name = None if raw is None else str(raw)
        docs = docs[1:]
    if len(docs) > MAX_STAGES:
        raise TaskValidationError(
            f"the pipeline has {len(docs)} stages; at most {MAX_STAGES} are supported.",
            source=shown,
        )
    stages = tuple(
        _build_task(
            doc.data, doc.origin, os.path.dirname(absolute), env_overrides, secret_overrides,
            absolute, require_values=require_values,
        )  # fmt: skip
        for doc in docs
    )
    return Pipeline(name, stages, absolute)


def _single(
    path: str,
    env_overrides: Mapping[str, str] | None,
    secret_overrides: Mapping[str, str] | None,
    require_values: bool,
) -> Pipeline:
    task = Task.from_yaml(path, env_overrides, secret_overrides, require_values=require_values)
    return Pipeline(task.name, (task,), task.source_path)
