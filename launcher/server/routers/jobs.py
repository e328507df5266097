"""/jobs: managed jobs (launcher.api.jobs). A launch is an asynchronous request."""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from launcher.api import jobs as api
from launcher.api.backend import best_placement
from launcher.api.pipelines import pipeline_stage_ids
from launcher.api.server_store import User
from launcher.server.auth import current_user
from launcher.server.permissions import require_job, visible_jobs
from launcher.server.requests import Emit
from launcher.server.routers.stream import ndjson
from launcher.server.store_pool import server_store

router = APIRouter(prefix="/jobs")


class TaskBody(BaseModel):
    """A task as the client loaded it: its YAML-shaped dict (secret values nulled), the
    secret values apart (never logged, encrypted at rest, never returned), and the
    manifest of its uploaded local files (launcher.runtime.upload_manifest)."""

    task: dict[str, Any]
    secrets: dict[str, str] = {}
    source: str | None = None
    name: str | None = None
    uploads: dict[str, Any] | None = None


def server_task(body: TaskBody, user: User, request: Request) -> Any:
    """The submitted task, its local paths replaced by `user`'s uploads."""
    from launcher.server.uploads import server_task as build

    return build(body.task, user=user.name, source=body.source, secrets=body.secrets,
                 uploads=body.uploads,
                 max_root_bytes=request.app.state.limits.max_upload_bytes)


@router.post("/feasible")
def feasible(body: TaskBody, request: Request,
             user: User = Depends(current_user)) -> dict[str, Any]:
    p = api.jobs_check_feasible(server_task(body, user, request))
    return asdict(best_placement(p.placements[p.chosen]))


@router.post("/launch")
def launch(body: TaskBody, request: Request, user: User = Depends(current_user)) -> dict[str, str]:
    """Submit as a request: {"request_id"}; its log says when the job is in."""
    task = server_task(body, user, request)  # a bad task is refused now, not in the request

    def work(emit: Emit, cancel: threading.Event) -> dict[str, Any]:
        job = api.jobs_launch(task, name=body.name, check=False)
        with server_store() as store:
            store.set_job_launcher(job.id, user.name)
            store.record(user.name, "launch", f"managed job {job.id}")
        emit(f"Managed job {job.id} ({job.name}) submitted; LAUNCHER_TASK_ID={job.task_id}.", 2)
        return asdict(job)

    def undo(job: dict[str, Any]) -> None:
        api.jobs_cancel(int(job["id"]))

    rid = request.app.state.runner.submit(user.name, "jobs.launch", work, undo)
    return {"request_id": rid}


@router.get("")
def queue(all_users: bool = False, user: User = Depends(current_user)) -> list[dict[str, Any]]:
    mine = visible_jobs(user, all_users)
    return [r.to_json() for r in api.jobs_queue() if mine is None or r.id in mine]


@router.get("/page")
def queue_page(offset: int = 0, limit: int = 50, all_users: bool = False,
               user: User = Depends(current_user)) -> dict[str, Any]:
    """{"rows": one page of the queue, newest first; "total": how many in all}."""
    rows, total = api.jobs_queue_page(offset, min(max(limit, 0), 500),
                                      only=visible_jobs(user, all_users))
    return {"rows": [r.to_json() for r in rows], "total": total}


@router.get("/{job_id}")
def status(job_id: int, user: User = Depends(current_user)) -> dict[str, Any]:
    require_job(user, job_id)
    return api.jobs_status(job_id).to_json()


@router.get("/{job_id}/detail")
def detail(job_id: int, user: User = Depends(current_user)) -> dict[str, Any]:
    require_job(user, job_id)
    d = api.jobs_detail(job_id)
    return {"summary": d.summary.to_json(), "attempts": [asdict(a) for a in d.attempts],
            "events": [asdict(e) for e in d.events],
            "policy_switches": [asdict(p) for p in d.policy_switches]}


@router.get("/{job_id}/stages")
def stages(job_id: int, user: User = Depends(current_user)) -> list[int]:
    require_job(user, job_id)
    return list(pipeline_stage_ids(job_id))


@router.post("/{job_id}/cancel")
def cancel(job_id: int, user: User = Depends(current_user)) -> dict[str, Any]:
    require_job(user, job_id)
    summary = api.jobs_cancel(job_id)
    with server_store() as store:
        store.set_job_canceller(job_id, user.name)
        store.record(user.name, "cancel", f"managed job {job_id}")
    return summary.to_json()


@router.get("/{job_id}/wait")
def wait(job_id: int, timeout: float | None = None,
         user: User = Depends(current_user)) -> dict[str, Any]:
    require_job(user, job_id)
    return api.jobs_wait(job_id, timeout=timeout).to_json()


@router.get("/{job_id}/logs")
def logs(job_id: int, request: Request, follow: bool = True,
         user: User = Depends(current_user)) -> Any:
    require_job(user, job_id)
    return ndjson(request, lambda on_line, stop: api.jobs_logs(
        job_id, on_line, follow=follow, stop=stop).to_json())


@router.get("/{job_id}/controller-log")
def controller_log(job_id: int, user: User = Depends(current_user)) -> list[str]:
    require_job(user, job_id)
    return api.controller_log_lines(job_id)
