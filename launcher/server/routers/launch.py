"""`launch` and `exec` as asynchronous requests (launcher.api.launch / exec_job): the
request's log carries the progress lines and the job's output, exactly as the
embedded CLI prints them; its result is the LaunchResult.

A request follows its job to the end (unless detach_run), on the server: `--down`
takes the cluster down after the job even with no client connected. Cancelling the
request cancels its job at once; before the job is submitted (provisioning, waiting for
the nodes, setup), the launch is interrupted at once and unwinds as Ctrl-C does
embedded (what it was creating is terminated)."""

from __future__ import annotations

import re
import threading
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from launcher.api.server_store import User
from launcher.errors import ClusterNotFoundError
from launcher.server.auth import current_user
from launcher.server.permissions import require_cluster
from launcher.server.requests import Emit, RequestCancelled
from launcher.server.routers.jobs import TaskBody, server_task
from launcher.server.store_pool import server_store

router = APIRouter(prefix="/clusters")
_SUBMITTED = re.compile(r"^Job (\d+) submitted to (\S+)")


class LaunchBody(TaskBody):
    cluster: str | None = None
    detach_run: bool = False
    idle_minutes: float | None = None
    down: bool = False
    retry_until_up: bool = False


class ExecBody(BaseModel):
    """A task (as in TaskBody) or a shell command."""

    task: dict[str, Any] | None = None
    secrets: dict[str, str] = {}
    source: str | None = None
    uploads: dict[str, Any] | None = None
    command: str | None = None
    detach_run: bool = False


class LaunchCancelled(KeyboardInterrupt):
    """Raised in a launch request's thread when the request is cancelled before its job
    was submitted (a KeyboardInterrupt: the launch unwinds as for Ctrl-C)."""


class _Tracker:
    """The request's output callbacks: they note the submitted job (so a cancel can
    cancel it), claim the cluster for the user once it exists, and unwind the work
    once the request is cancelled."""

    def __init__(self, user: str, emit: Emit, cancel: threading.Event) -> None:
        self.user, self.emit, self.cancel = user, emit, cancel
        self.cluster: str | None = None
        self.job_id: int | None = None
        self.claimed = False
        self.thread: int | None = None  # the worker thread while the launch runs
        self.lock = threading.Lock()

    def _check(self) -> None:
        if self.cancel.is_set():
            raise RequestCancelled("The request was cancelled.")
        if not self.claimed and self.cluster is not None:
            self.claim()

    def claim(self) -> None:
        with server_store() as store:
            if self.cluster in store.cluster_owners():
                store.set_cluster_launcher(self.cluster, self.user)
                self.claimed = True

    def out(self, line: str) -> None:
        self._check()
        self.emit(line, 1)

    def event(self, line: str) -> None:
        m = _SUBMITTED.match(line)
        if m:
            self.job_id = int(m.group(1))
        self._check()
        self.emit(line, 2)

    def interrupt(self) -> None:
        """Unwind a launch that has not submitted its job yet at once, wherever it
        waits (the wait for a new node's SSH prints nothing for minutes): a
        LaunchCancelled (a KeyboardInterrupt) is raised in its thread, so it unwinds
        exactly as Ctrl-C does embedded, terminating what it was creating."""
        import ctypes

        with self.lock:
            if self.thread is not None and self.job_id is None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread), ctypes.py_object(LaunchCancelled))

    def cancel_job(self) -> None:
        if self.cluster is not None and self.job_id is not None:
            from launcher.api.clusters import cancel

            cancel(self.cluster, [self.job_id])


def _claimable(user: User, name: str) -> None:
    """A user may launch on a new name or on their own cluster (an admin: any)."""
    with server_store() as store:
        owners = store.cluster_owners()
    if name in owners and owners[name] != user.name and not user.is_admin:
        raise ClusterNotFoundError(
            f"The cluster name {name!r} is taken by another user; choose another (-c).")


@router.post("/launch")
def launch(body: LaunchBody, request: Request,
           user: User = Depends(current_user)) -> dict[str, str]:
    """Submit a launch as a request: {"request_id"}."""
    from launcher.state.db import validate_cluster_name

    task = server_task(body, user, request)  # a bad task is refused now, not in the request
    if body.cluster:
        validate_cluster_name(body.cluster)
        _claimable(user, body.cluster)
    box: dict[str, _Tracker] = {}

    def work(emit: Emit, cancel: threading.Event) -> dict[str, Any]:
        t = box["t"] = _Tracker(user.name, emit, cancel)
        t.thread = threading.get_ident()
        try:
            return _launch_work(t)
        finally:
            with t.lock:  # no interrupt may reach this thread once the work is over
                t.thread = None

    def _launch_work(t: _Tracker) -> dict[str, Any]:
        from launcher.api.launch import generate_cluster_name
        from launcher.api.launch import launch as api_launch
        from launcher.state.db import StateDB

        name = body.cluster
        if name is None:
            with StateDB() as db:
                name = generate_cluster_name(db)
            t.event(f"Cluster name: {name}")
        t.cluster = name
        with server_store() as store:
            store.record(user.name, "launch", f"cluster {name}")
        try:
            result = api_launch(task, name, detach_run=body.detach_run,
                                idle_minutes=body.idle_minutes, down=body.down, yes=True,
                                on_line=t.out, on_setup_line=t.out, on_event=t.event,
                                retry_until_up=body.retry_until_up)
        finally:
            t.claim()
        return asdict(result)

    def on_cancel() -> None:
        if "t" in box:
            box["t"].interrupt()
            box["t"].cancel_job()

    rid = request.app.state.runner.submit(user.name, "launch", work, None, on_cancel)
    return {"request_id": rid}


@router.post("/{name}/exec")
def exec_(name: str, body: ExecBody, request: Request,
          user: User = Depends(current_user)) -> dict[str, str]:
    """Run a task (its files uploaded) or a command on `name` as a request."""
    require_cluster(user, name)
    if (body.task is None) == (body.command is None):
        from launcher.errors import UsageError

        raise UsageError("exec: give a task or a command.")
    what: Any = body.command
    if body.task is not None:
        what = server_task(TaskBody(task=body.task, secrets=body.secrets, source=body.source,
                                    uploads=body.uploads), user, request)
    box: dict[str, _Tracker] = {}

    def work(emit: Emit, cancel: threading.Event) -> dict[str, Any]:
        from launcher.api.exec_job import exec_ as api_exec

        t = box["t"] = _Tracker(user.name, emit, cancel)
        t.cluster, t.claimed = name, True
        result = api_exec(name, what, detach_run=body.detach_run, on_line=t.out,
                          on_event=t.event)
        return asdict(result)

    def on_cancel() -> None:
        if "t" in box:
            box["t"].cancel_job()

    rid = request.app.state.runner.submit(user.name, "exec", work, None, on_cancel)
    return {"request_id": rid}
