"""/clusters: status, queue, logs, cancel, stop, start, down, autostop (launcher.api.clusters)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from launcher.api import clusters as api
from launcher.api.server_store import User
from launcher.server.auth import current_user
from launcher.server.permissions import require_cluster, visible_clusters
from launcher.server.requests import error_json
from launcher.server.routers.stream import ndjson
from launcher.server.store_pool import server_store

router = APIRouter(prefix="/clusters")


class CancelBody(BaseModel):
    job_ids: list[int] | None = None


class NamesBody(BaseModel):
    names: list[str]


class AutostopBody(BaseModel):
    idle_minutes: float | None = None
    down: bool = False


@router.get("/status")
def status(refresh: bool = False, all_users: bool = False,
           user: User = Depends(current_user)) -> dict[str, Any]:
    mine = visible_clusters(user, all_users)
    notes: list[str] = []
    rows = api.status(refresh=refresh, notes=notes)
    return {"rows": [asdict(r) for r in rows if mine is None or r.name in mine],
            "notes": notes if mine is None or user.is_admin else []}


@router.get("/names")
def names(user: User = Depends(current_user)) -> list[str]:
    mine = visible_clusters(user)
    return [n for n in api.cluster_names() if mine is None or n in mine]


@router.get("/{name}/queue")
def queue(name: str, user: User = Depends(current_user)) -> list[dict[str, object]]:
    require_cluster(user, name)
    return [j.to_json() for j in api.queue(name)]


@router.get("/{name}/nodes")
def nodes(name: str, user: User = Depends(current_user)) -> list[dict[str, Any]]:
    require_cluster(user, name)
    return [asdict(n) for n in api.cluster_nodes(name)]


@router.get("/{name}/health")
def health(name: str, job_id: int | None = None,
           user: User = Depends(current_user)) -> dict[str, Any]:
    """What the agent's health watch kept for a job (docs/health.md): findings, events and
    per-node metric rows."""
    from launcher.api.node_health import watch_history

    require_cluster(user, name)
    return watch_history(name, job_id).to_json()


@router.get("/{name}/logs")
def logs(name: str, request: Request, job_id: int | None = None, follow: bool = True,
         user: User = Depends(current_user)) -> Any:
    require_cluster(user, name)
    return ndjson(request, lambda on_line, stop: api.logs(
        name, job_id, follow=follow, on_line=on_line, stop=stop).to_json())


@router.post("/{name}/cancel")
def cancel(name: str, body: CancelBody, user: User = Depends(current_user)) -> dict[str, Any]:
    require_cluster(user, name)
    result = api.cancel(name, body.job_ids)
    with server_store() as store:
        store.record(user.name, "cancel", f"cluster {name} jobs {list(result.cancelled)}")
    return asdict(result)


@router.post("/{name}/stop")
def stop(name: str, user: User = Depends(current_user)) -> dict[str, bool]:
    require_cluster(user, name)
    api.stop(name)
    with server_store() as store:
        store.record(user.name, "stop", f"cluster {name}")
    return {"ok": True}


@router.post("/{name}/start")
def start(name: str, user: User = Depends(current_user)) -> dict[str, bool]:
    require_cluster(user, name)
    api.start(name)
    with server_store() as store:
        store.record(user.name, "start", f"cluster {name}")
    return {"ok": True}


@router.post("/down")
def down(body: NamesBody, user: User = Depends(current_user)) -> list[dict[str, Any]]:
    """Each name's outcome, in order; one failure does not stop the others."""
    out: list[dict[str, Any]] = []
    allowed: list[str] = []
    for name in body.names:
        try:
            require_cluster(user, name)
            allowed.append(name)
        except Exception as exc:  # noqa: BLE001 - reported per name, like down_many
            out.append({"name": name, "error": error_json(exc)})
    for name, err in api.down_many(allowed):
        if err is None:
            with server_store() as store:
                store.record(user.name, "down", f"cluster {name}")
        out.append({"name": name, "error": None if err is None else error_json(err)})
    order = {n: i for i, n in enumerate(body.names)}
    return sorted(out, key=lambda o: order[o["name"]])


@router.post("/{name}/autostop")
def autostop(name: str, body: AutostopBody, user: User = Depends(current_user)) -> dict[str, bool]:
    require_cluster(user, name)
    api.autostop(name, body.idle_minutes, down=body.down)
    with server_store() as store:
        store.record(user.name, "autostop", f"cluster {name} {body.idle_minutes} down={body.down}")
    return {"ok": True}
