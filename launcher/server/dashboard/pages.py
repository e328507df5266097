"""The dashboard's pages and actions. Each one calls the API server's own route
functions with the session's user, so it sees and does exactly what that user's CLI
would (a user their own clusters and jobs, an admin all; actions recorded with who
did them); nothing here reads or changes state another way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from launcher.api.server_store import ServerStore, User
from launcher.errors import LauncherError
from launcher.jobs.state_machine import ManagedJobStatus
from launcher.server.dashboard import timeline
from launcher.server.dashboard.session import (
    COOKIE,
    PREFIX,
    authenticate,
    check_post,
    dashboard_user,
    session_csrf,
)
from launcher.server.dashboard.templates import render
from launcher.server.routers import clusters as cluster_routes
from launcher.server.routers import jobs as job_routes
from launcher.server.routers import misc as misc_routes

router = APIRouter(prefix=PREFIX, include_in_schema=False)
PAGE_SIZE = 50
USER_COST_DAYS = 30.0  # the users page's cost column
COST_LINES_PER_PAGE = 100
LINE_COLORS = {"switch": "#8e5bd0", "deadline": "#c0392b", "projected-ok": "#2e9d52",
               "projected-late": "#e07b00"}
BAR_COLORS = {"RUNNING": "#5b8def", "SUCCEEDED": "#2e9d52", "PREEMPTED": "#c0392b",
              "FAILED": "#c0392b", "CANCELLED": "#8a93a3"}


def _html(request: Request, user: User | None, name: str, status: int = 200,
          **ctx: Any) -> HTMLResponse:
    body = render(name, p=PREFIX, user=user, csrf=session_csrf(request) if user else "",
                  now=time.time(), **ctx)
    return HTMLResponse(body, status_code=status, headers={
        "Cache-Control": "no-store", "X-Frame-Options": "DENY",
        "Content-Security-Policy": "default-src 'self'; style-src 'unsafe-inline'; "
                                   "script-src 'unsafe-inline'; frame-ancestors 'none'"})


def _error(request: Request, user: User, exc: LauncherError) -> HTMLResponse:
    return _html(request, user, "error", 404 if exc.exit_code == 4 else 400,
                 title="Not found" if exc.exit_code == 4 else "Error", message=str(exc))


async def _form(request: Request) -> dict[str, str]:
    raw = (await request.body()).decode("utf-8", "replace")
    return {k: v[0] for k, v in parse_qs(raw, keep_blank_values=True).items()}


def _sse(resp: Response) -> StreamingResponse:
    """A route's NDJSON stream of {"line"} then {"result"|"error"} as server-sent events."""
    assert isinstance(resp, StreamingResponse)
    inner = resp.body_iterator

    async def events() -> Any:
        async for chunk in inner:
            data = chunk if isinstance(chunk, bytes) else str(chunk).encode()
            for line in data.splitlines():
                if line.strip():
                    yield b"data: " + line + b"\n\n"

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store"})


# ---- login ----------------------------------------------------------------------------


@router.get("/login")
def login_page(request: Request, once: str | None = None) -> Response:
    """The login form; with `once`, `launcher dashboard`'s one-time code: exchanged (once)
    for its session cookie."""
    codes: set[str] = getattr(request.app.state, "login_codes", set())
    if once is not None:
        if once in codes:
            codes.discard(once)
            return _session(request, request.app.state.local_session)
        return _html(request, None, "login", 401, title="Log in", error=(
            "That login link was already used or is not from this dashboard: run "
            "`launcher dashboard` again, or log in with a token."))
    return _html(request, None, "login", title="Log in", error=None)


def _session(request: Request, token: str) -> Response:
    resp = RedirectResponse(f"{PREFIX}/", status_code=303)
    resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                    secure=request.url.scheme == "https")
    return resp


@router.post("/login")
async def login(request: Request) -> Response:
    token = (await _form(request)).get("token", "")
    user = await run_in_threadpool(authenticate, request, token)
    if user is None:
        return _html(request, None, "login", 401, title="Log in",
                     error="That token was not accepted (wrong, rotated, or its user removed).")
    return _session(request, token.strip())


@router.post("/logout")
async def logout(request: Request) -> Response:
    check_post(request, (await _form(request)).get("csrf", ""))
    resp = RedirectResponse(f"{PREFIX}/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/")
    return resp


@router.get("/")
def home(user: User = Depends(dashboard_user)) -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/jobs", status_code=303)


# ---- clusters -------------------------------------------------------------------------


def _cluster_costs(names: list[str]) -> dict[str, float]:
    """Cost so far of each of these live clusters (the ledger, launch-time prices)."""
    from launcher.api.cost_report import cost_report, read_ledger

    out: dict[str, float] = {}
    for line in cost_report(3650, ledger=read_ledger(names, attempts=False)).lines:
        if line.running:
            out[line.cluster] = out.get(line.cluster, 0.0) + line.cost
    return out


def _fabrics(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Cluster name -> its instance type's interconnect from the offline catalog ("efa 3200
    Gb/s"; "-" for none or CPU-only), one catalog query per (cloud, accelerator)."""
    from launcher.catalog.query import offers

    known: dict[tuple[str, str], dict[str, str]] = {}
    out: dict[str, str] = {}
    for r in rows:
        acc = r.get("accelerator")
        if not acc:
            out[r["name"]] = "-"
            continue
        key = (r["cloud"], acc)
        if key not in known:
            try:
                found = offers(accelerators=[acc], clouds=[r["cloud"]])
            except LauncherError:  # a catalog that cannot be read: the list still shows
                found = []
            known[key] = {o.instance_type: f"{o.fabric} {o.fabric_gbps:g} Gb/s" if o.fabric_gbps
                          else str(o.fabric) for o in found if o.fabric}
        out[r["name"]] = known[key].get(r["instance_type"], "-")
    return out


@router.get("/clusters")
def clusters(request: Request, fragment: bool = False,
             user: User = Depends(dashboard_user)) -> HTMLResponse:
    rows = cluster_routes.status(refresh=False, all_users=user.is_admin, user=user)["rows"]
    with ServerStore() as store:
        owners = store.cluster_owners()
    return _html(request, user, "clusters_t" if fragment else "clusters", title="Clusters",
                 rows=rows, cost=_cluster_costs([r["name"] for r in rows]), owners=owners,
                 fabric=_fabrics(rows),
                 show_owner=user.is_admin)


@router.get("/clusters/{name}")
def cluster(request: Request, name: str, log: int | None = None,
            user: User = Depends(dashboard_user)) -> HTMLResponse:
    try:
        nodes = cluster_routes.nodes(name, user)  # refuses a cluster the user may not see
        rows = cluster_routes.status(refresh=False, all_users=user.is_admin, user=user)["rows"]
        row = next(r for r in rows if r["name"] == name)
    except LauncherError as exc:
        return _error(request, user, exc)
    except StopIteration:
        return _html(request, user, "error", 404, title="Not found",
                     message=f"Cluster {name!r} does not exist.")
    queue_error = None
    try:  # from its agent: the nodes' states still show when it does not answer
        queue = cluster_routes.queue(name, user)
    except LauncherError as exc:
        queue, queue_error = [], str(exc)
    health = None
    if row["status"] in ("UP", "DEGRADED"):
        try:  # the health watch's record of the last job: best effort (docs/health.md)
            health = cluster_routes.health(name, user=user)
        except LauncherError:
            health = None
    return _html(request, user, "cluster", title=f"Cluster {name}", c=row, queue=queue,
                 fabric=_fabrics([row]).get(name, "-"),
                 queue_error=queue_error, nodes=nodes, health=health,
                 cluster_name=name, cost=_cluster_costs([name]).get(name, 0.0), log_job=log)


@router.get("/clusters/{name}/nodes")
def cluster_nodes(request: Request, name: str,
                  user: User = Depends(dashboard_user)) -> HTMLResponse:
    """The node table alone (the cluster page re-fetches it): each node's last reported
    state and health, from `GET /clusters/NAME/nodes`."""
    try:
        nodes = cluster_routes.nodes(name, user)
    except LauncherError as exc:
        return _error(request, user, exc)
    rows = cluster_routes.status(refresh=False, all_users=user.is_admin, user=user)["rows"]
    return _html(request, user, "nodes_t", title=f"Cluster {name}", nodes=nodes, cluster_name=name,
                 c=next((r for r in rows if r["name"] == name), None))


@router.get("/clusters/{name}/log-stream")
def cluster_log_stream(name: str, request: Request, job_id: int | None = None,
                       user: User = Depends(dashboard_user)) -> Response:
    return _sse(cluster_routes.logs(name, request, job_id, follow=True, user=user))


@router.post("/clusters/{name}/stop")
async def cluster_stop(request: Request, name: str,
                       user: User = Depends(dashboard_user)) -> Response:
    check_post(request, (await _form(request)).get("csrf", ""))
    try:
        await run_in_threadpool(cluster_routes.stop, name, user)
    except LauncherError as exc:
        return _html(request, user, "error", 404 if exc.exit_code == 4 else 400,
                     title="Stop failed", message=str(exc))
    return RedirectResponse(f"{PREFIX}/clusters/{quote(name)}", status_code=303)


@router.post("/clusters/{name}/down")
async def cluster_down(request: Request, name: str,
                       user: User = Depends(dashboard_user)) -> Response:
    check_post(request, (await _form(request)).get("csrf", ""))
    out = await run_in_threadpool(cluster_routes.down, cluster_routes.NamesBody(names=[name]),
                                  user)
    err = out[0]["error"] if out else None
    if err:
        return _html(request, user, "error", 404 if err["exit_code"] == 4 else 400,
                     title="Down failed", message=err["message"])
    return RedirectResponse(f"{PREFIX}/clusters", status_code=303)


# ---- managed jobs ---------------------------------------------------------------------


@router.get("/jobs")
def jobs(request: Request, page: int = 1, fragment: bool = False,
         user: User = Depends(dashboard_user)) -> HTMLResponse:
    page = max(1, page)
    got = job_routes.queue_page((page - 1) * PAGE_SIZE, PAGE_SIZE, all_users=user.is_admin,
                                user=user)
    with ServerStore() as store:
        owners = store.job_owners() if user.is_admin else {}
    return _html(request, user, "jobs_t" if fragment else "jobs", title="Managed jobs",
                 rows=got["rows"], page=page, more=got["total"] > page * PAGE_SIZE,
                 total=got["total"], owners=owners, show_owner=user.is_admin)


@router.get("/jobs/{job_id}")
def job(request: Request, job_id: int, fragment: bool = False,
        user: User = Depends(dashboard_user)) -> HTMLResponse:
    try:
        d = job_routes.detail(job_id, user)
    except LauncherError as exc:
        return _error(request, user, exc)
    j = d["summary"]
    t = timeline.build(d["attempts"], j["submitted_at"], time.time(),
                       switches=d["policy_switches"], deadline_at=j["deadline_at"],
                       projected_at=j["projected_finish_at"], events=d["events"])
    return _html(request, user, "job_t" if fragment else "job", title=f"Job {job_id}", j=j,
                 attempts=d["attempts"], events=d["events"], t=t, colors=BAR_COLORS, line_colors=LINE_COLORS,
                 phase_colors=timeline.PHASE_COLORS,
                 terminal=ManagedJobStatus(j["status"]).is_terminal)


@router.get("/jobs/{job_id}/log-stream")
def job_log_stream(job_id: int, request: Request,
                   user: User = Depends(dashboard_user)) -> Response:
    return _sse(job_routes.logs(job_id, request, follow=True, user=user))


@router.post("/jobs/{job_id}/cancel")
async def job_cancel(request: Request, job_id: int,
                     user: User = Depends(dashboard_user)) -> Response:
    check_post(request, (await _form(request)).get("csrf", ""))
    try:
        await run_in_threadpool(job_routes.cancel, job_id, user)
    except LauncherError as exc:
        return _error(request, user, exc)
    return RedirectResponse(f"{PREFIX}/jobs/{job_id}", status_code=303)


# ---- cost -----------------------------------------------------------------------------


@router.get("/cost")
def cost(request: Request, days: float = 30.0, page: int = 1,
         user: User = Depends(dashboard_user)) -> HTMLResponse:
    """The cost report's totals and chart; its lines (most expensive first) 100 a page."""
    from launcher.server.dashboard import costs

    try:
        v = costs.view(user, days)
    except LauncherError as exc:
        return _error(request, user, exc)
    page = max(1, page)
    shown = v.page_lines((page - 1) * COST_LINES_PER_PAGE, page * COST_LINES_PER_PAGE)
    return _html(request, user, "cost", title="Cost", days=days, v=v, lines=shown, page=page,
                 more=v.count > page * COST_LINES_PER_PAGE, top=v.top)


# ---- GPUs -----------------------------------------------------------------------------


@router.get("/gpus")
def gpus(request: Request, accelerator: str = "", count: str = "", nodes: int = 1,
         cloud: str = "", fabric: str = "", spot: bool = False,
         user: User = Depends(dashboard_user)) -> HTMLResponse:
    """The `launcher gpus` query as a form; each row marked launchable when the server
    has its cloud enabled (credentials found), its price also for `nodes` nodes."""
    q = {"accelerator": accelerator, "count": count, "nodes": nodes, "cloud": cloud,
         "fabric": fabric, "spot": spot}
    rows: list[dict[str, Any]] = []
    error = None
    if accelerator.strip():
        try:
            n = float(count) if count.strip() else None
        except ValueError:
            n = None
            error = f"The accelerator count must be a number, got {count!r}."
        if nodes < 1:
            error = f"The number of nodes must be at least 1, got {nodes}."
        if error is None:
            try:
                rows = misc_routes.gpus(accelerator.strip(), n, cloud=cloud.strip() or None,
                                        spot=spot, fabric=fabric.strip() or None, user=user)
            except LauncherError as exc:
                error = str(exc)
    enabled = {c for c, s in misc_routes.info(request, user)["clouds"].items() if s["enabled"]}
    return _html(request, user, "gpus", 400 if error else 200, title="GPUs", q=q, rows=rows,
                 error=error, enabled=enabled)


# ---- users (admins) -------------------------------------------------------------------


def _users_page(request: Request, user: User, status: int = 200, **ctx: Any) -> HTMLResponse:
    if not user.is_admin:
        return _html(request, user, "error", 403, title="Forbidden",
                     message=f"User {user.name!r} is not an admin; this needs the admin role.")
    from launcher.server.dashboard import costs

    return _html(request, user, "users", status, title="Users",
                 users=misc_routes.users(user), spent=costs.by_user(USER_COST_DAYS), **ctx)


@router.get("/users")
def users(request: Request, user: User = Depends(dashboard_user)) -> HTMLResponse:
    return _users_page(request, user)


async def _user_action(request: Request, user: User, who: str | None,
                       call: Callable[[dict[str, str]], Any]) -> HTMLResponse:
    """Run `call(form)` (a users route) for an admin, after the CSRF check; show the token
    it returns once (in this response only: never in a URL, and the page is not cached).
    `who`: the user acted on (None: the form's name)."""
    form = await _form(request)
    check_post(request, form.get("csrf", ""))
    if not user.is_admin:
        return await run_in_threadpool(_users_page, request, user)
    try:
        out = await run_in_threadpool(call, form)
    except LauncherError as exc:
        return await run_in_threadpool(_users_page, request, user, 400, error=str(exc))
    return await run_in_threadpool(_users_page, request, user, new_token=out.get("token"),
                                   new_for=who or form.get("name", ""))


@router.post("/users")
async def users_create(request: Request, user: User = Depends(dashboard_user)) -> HTMLResponse:
    return await _user_action(request, user, None, lambda form: misc_routes.users_create(
        misc_routes.NewUser(name=form.get("name", ""), role=form.get("role", "user")), user))


@router.post("/users/{name}/rotate")
async def users_rotate(request: Request, name: str,
                       user: User = Depends(dashboard_user)) -> HTMLResponse:
    return await _user_action(request, user, name,
                              lambda _: misc_routes.users_rotate(name, user))


@router.post("/users/{name}/delete")
async def users_delete(request: Request, name: str,
                       user: User = Depends(dashboard_user)) -> HTMLResponse:
    return await _user_action(request, user, name,
                              lambda _: misc_routes.users_delete(name, user))
