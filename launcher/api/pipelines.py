"""Pipelines (SkyPilot's multi-document task files) as chains of managed jobs.

    plan_pipeline(pipeline) -> list[StagePlan]            every stage planned, in order
    pipeline_plan_json(stage_plans, limit) -> dict        the `jobs launch --dryrun --json` shape
    jobs_launch_pipeline(pipeline, name=None) -> list[ManagedJob]   submit every stage

A pipeline is submitted at once, every stage a managed job (its own job id, recovery,
logs and cost) in one transaction; the first stage's id is the pipeline's id. The
controller starts stage k+1 only when stage k SUCCEEDED; when a stage ends any other way
(FAILED, CANCELLED, ...) every later stage is CANCELLED without running
(launcher.jobs.controller `_stage_ready`). Every stage sees every stage's task id in
`LAUNCHER_TASK_IDS` / `SKYPILOT_TASK_IDS` (one per line, in order), as in SkyPilot, so a
later stage finds what an earlier one wrote. Stages run one after another on their own
clusters (each stage is placed on its own; nothing is shared between stages but what
they write to buckets). Nothing here prints.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from launcher.errors import NoPlacementError, TaskValidationError

if TYPE_CHECKING:
    from launcher.api.jobs import ManagedJob
    from launcher.api.planning import Plan, UnsatisfiableTaskError
    from launcher.task.pipeline import Pipeline


@dataclass(frozen=True)
class StagePlan:
    """One stage's plan, or the error that says why it has no placement."""

    index: int
    name: str
    plan: Plan | None
    error: UnsatisfiableTaskError | None = None


def plan_pipeline(pipeline: Pipeline) -> list[StagePlan]:
    """Plan every stage (like `launch --dryrun` each). A stage no offer fits keeps its
    UnsatisfiableTaskError in `error`; other errors (an unknown accelerator name...)
    raise, naming the field."""
    from launcher.api.planning import UnsatisfiableTaskError, plan

    out: list[StagePlan] = []
    for index, task in enumerate(pipeline.stages):
        try:
            out.append(StagePlan(index, pipeline.stage_name(index),
                                 plan(task, verify_credentials=False)))
        except UnsatisfiableTaskError as err:
            out.append(StagePlan(index, pipeline.stage_name(index), None, err))
    return out


def pipeline_plan_json(
    pipeline: Pipeline, stage_plans: list[StagePlan], limit: int | None
) -> dict[str, Any]:
    """{"pipeline": name, "stages": [{"index", "name", "plan": <the dry-run JSON of that
    stage>}], "error": set when a stage has no placement}."""
    stages = []
    for sp in stage_plans:
        body = sp.plan.to_json(limit) if sp.plan is not None else sp.error.to_json(limit)  # type: ignore[union-attr]
        stages.append({"index": sp.index, "name": sp.name, "plan": body})
    bad = [sp for sp in stage_plans if sp.plan is None]
    out: dict[str, Any] = {"pipeline": pipeline.name, "stages": stages}
    if bad:
        out["error"] = f"stage {bad[0].index + 1} ({bad[0].name}): {bad[0].error}"
    return out


def jobs_launch_pipeline(
    pipeline: Pipeline, name: str | None = None, *, start_controller: bool = True,
    check: bool = True,
) -> list[ManagedJob]:
    """Submit every stage as a managed job chained to the one before; returns them in
    order (the first one's id is the pipeline's). Every stage is validated first (a
    value for each env/secret, a `run`) and, unless `check=False`, must be feasible
    now on an enabled cloud: nothing is submitted otherwise."""
    from launcher.api.jobs import (
        ManagedJob,
        _validate,
        deadline_spec,
        jobs_check_feasible,
        jobs_controller_start,
    )
    from launcher.jobs.recovery import normalize_strategy
    from launcher.jobs.store import JobStore, StageSpec

    specs: list[StageSpec] = []
    for index, task in enumerate(pipeline.stages):
        stage = pipeline.stage_name(index)
        try:
            _validate(task)
            if check:
                jobs_check_feasible(task)
        except TaskValidationError as exc:
            raise TaskValidationError(f"stage {index + 1} ({stage}): {exc.reason}",
                                      field=exc.field, line=exc.line, source=exc.source) from None
        except NoPlacementError as exc:
            raise NoPlacementError(f"stage {index + 1} ({stage}): {exc}") from None
        rec = task.job_recovery
        try:
            strategy = normalize_strategy(rec.strategy if rec else None)
            deadline = deadline_spec(task, time.time())  # counted from the submission
        except ValueError as exc:
            raise TaskValidationError(str(exc), field="resources.job_recovery.strategy",
                                      source=task.source_path) from None
        except TaskValidationError as exc:
            raise TaskValidationError(f"stage {index + 1} ({stage}): {exc.reason}",
                                      field=exc.field, line=exc.line, source=exc.source) from None
        specs.append(StageSpec(
            name=stage, task_yaml=json.dumps(task.to_dict()), task_source=task.source_path,
            strategy=strategy, max_restarts_on_errors=rec.max_restarts_on_errors if rec else 0,
            recover_on_exit_codes=rec.recover_on_exit_codes if rec else (), secrets=task.secrets,
            deadline=deadline,
        ))  # fmt: skip
    pipeline_name = name or pipeline.name or "pipeline"
    store = JobStore()
    try:
        rows = store.add_pipeline(pipeline_name, specs,
                                  task_ids_envs=("LAUNCHER_TASK_IDS", "SKYPILOT_TASK_IDS"))
    finally:
        store.close()
    pid = jobs_controller_start().pid if start_controller else None
    return [ManagedJob(r.id, r.name, r.task_id, pid) for r in rows]


def pipeline_stage_ids(job_id: int) -> list[int]:
    """The job ids of the pipeline whose id (first stage) is `job_id`, in stage order;
    [job_id] for a plain managed job or a later stage."""
    from launcher.jobs.store import JobStore

    store = JobStore()
    try:
        job = store.job(job_id)
        if job.pipeline_id != job_id:
            return [job_id]
        stages = [j for j in store.jobs() if j.pipeline_id == job_id]
        return [j.id for j in sorted(stages, key=lambda j: j.stage_index or 0)]
    finally:
        store.close()
