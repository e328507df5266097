"""The state DB's engines: the embedded SQLite file, or a PostgreSQL server for a team.

Which one: `LAUNCHER_DB_URL`, else `db:` in `$LAUNCHER_HOME/config.yaml`, names a
PostgreSQL database (`postgresql://user:password@host:5432/name`, driven by psycopg 3);
without either, the SQLite file `$LAUNCHER_HOME/state.db` (the path the caller gives).

- SQLite: every connection is opened by launcher/state/files.py (private home, damage
  detection; backups stay there too) and set to WAL with a busy timeout, foreign keys
  on and secure_delete (scrubbed secrets leave no trace). No pool: a connection is
  opened per StateDB/JobStore, as before.
- PostgreSQL: one pooled engine per URL and process (pre-ping, so a connection the
  server dropped is replaced rather than failing the next statement).

Both engines run in autocommit: a write transaction is begun explicitly by
`StoreConnection.begin_write` (SQLite's `BEGIN IMMEDIATE`, which takes the write lock
at once; PostgreSQL's `BEGIN`, with row locks taken by the statements: `FOR UPDATE`).

Errors: a PostgreSQL failure becomes a StoreError (launcher/state/store.py) whose
message names the URL with its password masked; SQLite keeps raising sqlite3's own
exceptions (or StateDamagedError), as callers have always caught them. A statement
run outside a transaction whose connection was lost is retried on a fresh one with
back-off for up to `RETRY_S` seconds; inside a transaction it is not (the server rolled
the transaction back, so nothing was half-written) and StoreUnavailableError says so.

Importing this imports SQLAlchemy: only launcher/state/store.py does, on first use.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import NullPool

from launcher.state import sqlite_conn
from launcher.state.dburl import ENV_URL, configured_url, mask_url
from launcher.state.errors import StoreError, StoreIntegrityError, StoreUnavailableError
from launcher.state.rows import Result, Row

RETRY_S = 30.0  # how long a statement outside a transaction retries a lost connection
_T = TypeVar("_T")


# ----------------------------------------------------------------------- engines

_engines: dict[tuple[str, ...], sa.Engine] = {}
_engines_lock = threading.Lock()


def sqlite_engine(path: Path, timeout: float = 30.0) -> sa.Engine:
    """The engine for the SQLite file at `path` (no pool: see the module docstring)."""
    key = ("sqlite", str(path), str(timeout))
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = sa.create_engine(
                "sqlite://", creator=functools.partial(sqlite_conn.open_file, path, timeout),
                poolclass=NullPool, isolation_level="AUTOCOMMIT")
            _engines[key] = engine
    return engine


def server_engine(url: str) -> sa.Engine:
    """The pooled engine for the PostgreSQL database at `url`. Raises StoreError for a
    URL that is not a PostgreSQL one or when psycopg is missing."""
    with _engines_lock:
        engine = _engines.get(("server", url))
        if engine is not None:
            return engine
    masked = mask_url(url)
    try:
        parsed = sa.engine.make_url(url)
    except sa_exc.ArgumentError as exc:
        raise StoreError(f"The state DB URL {masked} is not a valid URL ({exc}); use "
                         "postgresql://user:password@host:5432/dbname.") from None
    if parsed.drivername not in ("postgresql", "postgres", "postgresql+psycopg"):
        raise StoreError(f"The state DB URL {masked} is not a PostgreSQL URL; use "
                         "postgresql://user:password@host:5432/dbname (or unset "
                         f"{ENV_URL} / `db:` for the SQLite file).")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise StoreError(f"The state DB URL {masked} needs psycopg 3: "
                         "pip install 'launcher[server]'.") from None
    engine = sa.create_engine(
        parsed.set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT",
        pool_pre_ping=True, pool_size=8, max_overflow=56, pool_timeout=60,
        connect_args={"connect_timeout": 10, "application_name": "launcher"})
    with _engines_lock:
        return _engines.setdefault(("server", url), engine)


def dispose_all() -> None:
    """Close every pooled connection (tests; a forked child must not share them)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
    for engine in engines:
        engine.dispose()


# ------------------------------------------------------------------ connections


@functools.lru_cache(maxsize=1024)
def _text(sql: str) -> tuple[sa.TextClause, int]:
    """`sql` with its `?` placeholders (outside quotes) as `:p0, :p1...`, and their count."""
    out: list[str] = []
    count = 0
    quote = ""
    for ch in sql:
        if quote:
            if ch == quote:
                quote = ""
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "?":
            out.append(f":p{count}")
            count += 1
            continue
        out.append(ch)
    return sa.text("".join(out)), count


def _binds(sql: str, params: Sequence[Any] | dict[str, Any]) -> tuple[sa.TextClause, dict[str, Any]]:
    clause, count = _text(sql)
    if isinstance(params, dict):
        return clause, params
    if len(params) != count:
        raise ValueError(f"{count} placeholders but {len(params)} parameters: {sql[:80]!r}")
    return clause, {f"p{i}": v for i, v in enumerate(params)}


class StoreConnection:
    """One connection to the state DB, the shape launcher/state/store.py promises:
    `execute(sql, params)` with `?` placeholders, rows by index or column name."""

    def __init__(self, engine: sa.Engine, label: str) -> None:
        self.engine = engine
        self.label = label  # the file path, or the masked URL: what messages name
        self.dialect = engine.dialect.name
        self._in_tx = False
        self._closed = False
        self._conn: sa.Connection | None = None
        try:
            self._conn = engine.connect()
        except sa_exc.DBAPIError as exc:
            if self.is_sqlite:
                raise exc.orig from exc  # type: ignore[misc]
            raise StoreUnavailableError(
                f"Cannot connect to the state DB at {label}: {_detail(exc)}. Check that the "
                "database server is up and the URL is right (LAUNCHER_DB_URL or `db:` in "
                "config.yaml); see docs/api-server.md, Team deployment.") from None

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def in_transaction(self) -> bool:
        return self._in_tx

    def dbapi_connection(self) -> Any:
        """The driver's connection (sqlite3's, for files.py's backups)."""
        return self._live().connection.dbapi_connection

    def _live(self) -> sa.Connection:
        """The open connection; a new one when the last was lost (raises the driver's
        error, wrapped by SQLAlchemy, when the server is still away)."""
        if self._closed:
            raise StoreError(f"The connection to the state DB at {self.label} is closed.")
        if self._conn is None:
            self._conn = self.engine.connect()
        return self._conn

    def _discard(self) -> None:
        """Forget a connection that broke (the next statement opens a new one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sa_exc.SQLAlchemyError):
                conn.rollback()  # clears SQLAlchemy's state of the invalidated connection
            with contextlib.suppress(sa_exc.SQLAlchemyError):
                conn.close()

    # -- statements

    def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = (), /) -> Result:
        clause, binds = _binds(sql, parameters)
        return self._run(lambda c: c.execute(clause, binds))

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Result:
        batch = [_binds(sql, p)[1] for p in parameters]
        clause = _text(sql)[0]
        if not batch:
            return Result([], 0, None)
        return self._run(lambda c: c.execute(clause, batch))

    def execute_driver(self, sql: str) -> Result:
        """A statement with no parameters, as the driver takes it (BEGIN, PRAGMA...)."""
        return self._run(lambda c: c.exec_driver_sql(sql))

    def _run(self, call: Callable[[sa.Connection], Any]) -> Result:
        def once() -> Result:
            res = call(self._live())
            if res.returns_rows:
                index = {k: i for i, k in enumerate(res.keys())}
                rows = [Row(r, index) for r in res.fetchall()]
            else:
                rows = []
            lastrowid = res.lastrowid if self.is_sqlite and not res.returns_rows else None
            return Result(rows, res.rowcount, lastrowid)

        return self._with_retry(once, retry=not self._in_tx)

    def _with_retry(self, call: Callable[[], _T], *, retry: bool) -> _T:
        """`call()`, with PostgreSQL errors translated; a lost connection outside a
        transaction is replaced and `call` retried with back-off (up to RETRY_S)."""
        deadline = time.monotonic() + RETRY_S
        delay = 0.1
        while True:
            try:
                return call()
            except sa_exc.DBAPIError as exc:
                if self.is_sqlite:
                    raise exc.orig from exc  # type: ignore[misc]  # callers catch sqlite3's
                lost = exc.connection_invalidated or _is_connection_error(exc)
                if not lost:
                    raise self._translate(exc) from exc
                self._discard()
                if not retry or time.monotonic() + delay > deadline:
                    raise self._translate(exc) from exc
            except sa_exc.SQLAlchemyError as exc:
                raise StoreError(f"The state DB at {self.label}: {exc}") from exc
            time.sleep(delay)  # the server is away: nothing to wait on but time
            delay = min(delay * 2, 2.0)

    def _translate(self, exc: sa_exc.DBAPIError) -> StoreError:
        detail = _detail(exc)
        if _is_connection_error(exc) or exc.connection_invalidated:
            where = " (the transaction was rolled back)" if self._in_tx else ""
            return StoreUnavailableError(
                f"Cannot reach the state DB at {self.label}{where}: {detail}. Check that the "
                "database server is up and the URL is right (LAUNCHER_DB_URL or `db:` in "
                "config.yaml); see docs/api-server.md, Team deployment.")
        if isinstance(exc, sa_exc.IntegrityError):
            return StoreIntegrityError(f"The state DB at {self.label} refused a write: {detail}")
        return StoreError(f"The state DB at {self.label} failed a statement: {detail}")

    # -- transactions

    def begin_write(self) -> None:
        """Begin a write transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: BEGIN). A
        lost connection is replaced first (nothing has run in this transaction yet)."""
        self._with_retry(lambda: self._live().exec_driver_sql(
            "BEGIN IMMEDIATE" if self.is_sqlite else "BEGIN"), retry=True)
        self._in_tx = True

    def commit(self) -> None:
        try:
            self._run(lambda c: c.exec_driver_sql("COMMIT"))
        finally:
            self._in_tx = False

    def rollback(self) -> None:
        if self._conn is None:  # lost: the server rolled the transaction back
            self._in_tx = False
            return
        try:
            self._run(lambda c: c.exec_driver_sql("ROLLBACK"))
        except (StoreError, sqlite3.Error):
            if self.is_sqlite:
                raise
            # a lost connection has rolled the transaction back already
        finally:
            self._in_tx = False

    def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sa_exc.SQLAlchemyError):  # one the server dropped
                conn.close()


def _detail(exc: sa_exc.DBAPIError) -> str:
    text = str(exc.orig).strip()
    return text.splitlines()[0] if text else type(exc.orig).__name__


def _is_connection_error(exc: sa_exc.DBAPIError) -> bool:
    """Does `exc` say the server is unreachable or the connection broke (not a bad
    statement)? psycopg raises OperationalError for both: the SQLSTATE tells them apart
    (class 08: connection exception; 57P: the server shutting down; none: no server)."""
    if not isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return False
    state = getattr(exc.orig, "sqlstate", None)
    return state is None or state.startswith(("08", "57P"))


def connect(path: Path, *, timeout: float = 30.0, url: str | None = None) -> StoreConnection:
    """A connection to the configured state DB: PostgreSQL at `url` (default: the
    configured one), else the SQLite file at `path`."""
    url = configured_url() if url is None else url
    if url:
        return StoreConnection(server_engine(url), mask_url(url))
    return StoreConnection(sqlite_engine(path, timeout), str(path))
