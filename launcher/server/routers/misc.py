"""/health (no token), /info, /cost-report, /users (admin), /requests."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel

from launcher import __version__
from launcher.api.server_store import User
from launcher.server.auth import admin_user, current_user
from launcher.server.requests import row_json
from launcher.server.store_pool import server_store

router = APIRouter()


class NewUser(BaseModel):
    name: str
    role: str = "user"


@router.get("/health")
def health() -> dict[str, Any]:
    return {"ok": True, "version": __version__}


@router.get("/info")
def info(request: Request, user: User = Depends(current_user)) -> dict[str, Any]:
    from launcher.api.planning import enabled_clouds

    clouds = {n: {"enabled": s.enabled, "reason": s.reason} for n, s in enabled_clouds().items()}
    return {"user": user.name, "role": user.role, "version": __version__, "clouds": clouds,
            "controller": request.app.state.controller.holding.is_set(),
            "max_upload_bytes": request.app.state.limits.max_upload_bytes}


@router.get("/check")
def check(user: User = Depends(current_user)) -> dict[str, Any]:
    """`launcher check` of the server: its clouds, SSH pools and state DB."""
    from dataclasses import asdict

    from launcher.api.backend import check_report

    r = check_report()
    return {"state": asdict(r.state), "clouds": r.clouds, "pools": [
        {"name": p.name, "hosts": [asdict(h) for h in p.hosts]} for p in r.pools]}


@router.get("/gpus")
def gpus(accelerator: str | None = None, count: float | None = None, cloud: str | None = None,
         region: str | None = None, spot: bool = False, fabric: str | None = None,
         all_regions: bool = False, user: User = Depends(current_user)) -> list[dict[str, Any]]:
    """`launcher gpus` on the server's offline catalog: ranked rows (`GpuRow.to_dict`)."""
    from launcher.api.gpu_listing import gpus as listing

    return listing(accelerator, count, cloud=cloud, region=region, spot=spot, fabric=fabric,
                   all_regions=all_regions).to_json()


@router.get("/cost-report")
def cost_report(days: float = 30.0, user: User = Depends(admin_user)) -> dict[str, Any]:
    from launcher.api.cost_report import cost_report as report

    return report(days).to_json()


@router.get("/users")
def users(user: User = Depends(admin_user)) -> list[dict[str, object]]:
    with server_store() as store:
        return [u.to_json() for u in store.users()]


@router.post("/users")
def users_create(body: NewUser, user: User = Depends(admin_user)) -> dict[str, str]:
    with server_store() as store:
        token = store.create_user(body.name, body.role)
        store.record(user.name, "users.create", body.name)
    return {"token": token}


@router.post("/users/{name}/rotate")
def users_rotate(name: str, user: User = Depends(admin_user)) -> dict[str, str]:
    with server_store() as store:
        token = store.rotate(name)
        store.record(user.name, "users.rotate", name)
    return {"token": token}


@router.delete("/users/{name}")
def users_delete(name: str, user: User = Depends(admin_user)) -> dict[str, bool]:
    with server_store() as store:
        store.delete_user(name)
        store.record(user.name, "users.delete", name)
    return {"ok": True}


def _own_request(request: Request, rid: str, user: User) -> None:
    row = request.app.state.runner.row(rid)
    if row is None or (row.user != user.name and not user.is_admin):
        raise HTTPException(404, f"No request {rid!r}.")


@router.get("/requests/{rid}")
def request_status(rid: str, request: Request, user: User = Depends(current_user)) -> Any:
    _own_request(request, rid, user)
    return row_json(request.app.state.runner.row(rid))


@router.get("/requests/{rid}/logs")
def request_logs(rid: str, request: Request, user: User = Depends(current_user)) -> Any:
    import json

    from fastapi.responses import StreamingResponse

    _own_request(request, rid, user)
    lines = (json.dumps(x, default=str).encode() + b"\n"
             for x in request.app.state.runner.stream(rid))
    return StreamingResponse(lines, media_type="application/x-ndjson")


@router.post("/requests/{rid}/cancel")
def request_cancel(rid: str, request: Request, user: User = Depends(current_user)) -> Any:
    _own_request(request, rid, user)
    request.app.state.runner.cancel(rid)
    return row_json(request.app.state.runner.row(rid))
