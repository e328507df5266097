"""Long requests run asynchronously: an id at once, the work on a server thread, a
log the client streams (and may re-attach to: `launcher api logs REQ`).

A request's row (api_requests) says RUNNING / SUCCEEDED / FAILED / CANCELLED and
holds its result or error as JSON; its log is `server/requests/<id>.log`, and on a
team server (state DB on PostgreSQL) the stream `request/<id>` in the DB
(launcher/state/logstore.py), which every replica reads; one line per line of output, prefixed with the stream it belongs to ("1" the job's output,
"2" progress), so a client prints each where the embedded CLI would. A client
that disconnects changes nothing: the work goes on. `cancel` is the only way to
stop one: its `on_cancel` hook runs at once (a launch cancels its submitted job),
work that checks `cancel` unwinds by raising `RequestCancelled` (a launch while
provisioning: what it was creating is terminated, as for Ctrl-C), and a cancel
that comes after the work took effect undoes it with the matching API call
(a submitted managed job is cancelled). Requests a dead server
left RUNNING are marked FAILED when the next one starts (the work itself is either
in the DB, and the controller carries on, or never happened).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launcher.api.server_store import RequestRow
from launcher.errors import LauncherError
from launcher.jobs import leases
from launcher.server.settings import requests_dir
from launcher.server.store_pool import server_store
from launcher.state import logstore

Emit = Callable[[str, int], None]  # (line, 1 = output | 2 = progress)
Work = Callable[[Emit, threading.Event], Any]
Undo = Callable[[Any], None]


class RequestCancelled(LauncherError):
    """Raised inside a request's work once it is cancelled (it unwinds the work)."""

    exit_code = 130


def error_json(exc: BaseException) -> dict[str, Any]:
    """The wire shape of an error: the client re-raises it with the same message and
    exit code as the embedded CLI would show."""
    if isinstance(exc, LauncherError):
        out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc),
                               "exit_code": exc.exit_code}
        attempts = getattr(exc, "attempts", None)  # ProvisionFailedError: the history
        if isinstance(attempts, list):
            from dataclasses import asdict

            out["attempts"] = [asdict(a) for a in attempts]
        return out
    return {"type": "InternalError", "message": f"The server failed: {type(exc).__name__}: "
            f"{exc} (see `launcher api logs`).", "exit_code": 1}


class RequestRunner:
    def __init__(self, workers: int = 8) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="request")
        self._changed = threading.Condition()
        self._cancel: dict[str, threading.Event] = {}
        self._on_cancel: dict[str, Callable[[], None]] = {}

    def log_path(self, rid: str) -> Path:
        return requests_dir() / f"{rid}.log"

    def recover(self) -> None:
        team = leases.enabled()
        heard = time.time() - 3 * leases.LEASE_TTL_S if team else None
        with server_store() as store:
            for rid in store.interrupted_requests(heard):
                store.end_request(rid, "FAILED", None, json.dumps({
                    "type": "LauncherError", "exit_code": 1,
                    "message": f"Request {rid} was cut short by a server restart; what it "
                               "had done is kept (see `launcher jobs queue`)."}))

    def submit(self, user: str, kind: str, work: Work, undo: Undo | None = None,
               on_cancel: Callable[[], None] | None = None) -> str:
        rid = secrets.token_hex(6)
        requests_dir().mkdir(parents=True, exist_ok=True, mode=0o700)
        self.log_path(rid).touch(mode=0o600)
        with server_store() as store:
            store.add_request(rid, user, kind, leases.REPLICA_ID if leases.enabled() else None)
        cancel = self._cancel[rid] = threading.Event()
        if on_cancel is not None:
            self._on_cancel[rid] = on_cancel
        self._pool.submit(self._run, rid, work, undo, cancel)
        return rid

    def _run(self, rid: str, work: Work, undo: Undo | None, cancel: threading.Event) -> None:
        path = self.log_path(rid)

        shared = logstore.shared()

        def emit(line: str, fd: int = 2) -> None:
            text = "".join(f"{1 if fd == 1 else 2}{part}\n"
                           for part in (line.rstrip("\n").split("\n") or [""]))
            with open(path, "a", encoding="utf-8") as f:
                f.write(text)
            if shared:
                with server_store() as store:
                    logstore.append(store.db, f"request/{rid}", text.encode())
            self._notify()

        status, result, error = "SUCCEEDED", None, None
        try:
            value = work(emit, cancel)
            result = json.dumps(value, default=str)
            if cancel.is_set():
                status = "CANCELLED"
                if undo is not None:
                    undo(value)
        except RequestCancelled:
            status = "CANCELLED"
        except BaseException as exc:  # noqa: BLE001 - every failure is the request's result
            if cancel.is_set():  # the work unwound because it was cancelled (interrupted)
                status = "CANCELLED"
            else:
                status, error = "FAILED", json.dumps(error_json(exc))
        with server_store() as store:
            store.end_request(rid, status, result, error)
        self._cancel.pop(rid, None)
        self._on_cancel.pop(rid, None)
        self._notify()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def cancel(self, rid: str) -> None:
        ev = self._cancel.get(rid)
        if ev is not None:
            ev.set()
            hook = self._on_cancel.pop(rid, None)
            if hook is not None:
                threading.Thread(target=_quietly, args=(hook,), daemon=True,
                                 name=f"cancel-{rid}").start()
            self._notify()

    def row(self, rid: str) -> RequestRow | None:
        with server_store() as store:
            return store.request(rid)

    def _read(self, rid: str, offset: int) -> bytes:
        """The request's log from byte `offset`: the DB's copy on a team server (another
        replica may be running it), else the file."""
        if logstore.shared():
            with server_store() as store:
                return logstore.read(store.db, f"request/{rid}", offset)
        return _read_from(self.log_path(rid), offset)

    def stream(self, rid: str, stop: threading.Event | None = None) -> Iterator[dict[str, Any]]:
        """The request's log lines as they come ({"line"}), then {"request": row}. A
        request another replica runs is polled (once a second: no event crosses servers)."""
        offset = 0
        while True:
            with self._changed:
                row = self.row(rid)
                done = row is None or row.status != "RUNNING"
                data = self._read(rid, offset)
                end = len(data) if done else data.rfind(b"\n") + 1  # whole lines only
                if end <= 0 and not done:
                    self._changed.wait(1.0)
                    continue
            chunk, offset = data[:end].decode("utf-8", "replace"), offset + end
            for line in chunk.splitlines():
                yield {"line": line[1:], "fd": 1 if line[:1] == "1" else 2}
            if done:
                yield {"request": None if row is None else row_json(row)}
                return
            if stop is not None and stop.is_set():
                return


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read()
    except FileNotFoundError:
        return b""


def _quietly(hook: Callable[[], None]) -> None:
    import logging

    try:
        hook()
    except Exception:  # noqa: BLE001 - a cancel hook's failure is logged, never raised
        logging.getLogger("launcher.server").exception("request cancel hook failed")


def row_json(row: RequestRow) -> dict[str, Any]:
    return {"id": row.id, "user": row.user, "kind": row.kind, "status": row.status,
            "created_at": row.created_at, "ended_at": row.ended_at,
            "result": json.loads(row.result) if row.result else None,
            "error": json.loads(row.error) if row.error else None}
