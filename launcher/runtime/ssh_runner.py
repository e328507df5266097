"""`SSHRunner`: run commands on a node over SSH (paramiko; imported only here).

- One connection per (host, port, user, key, pinned host key), shared by every
  runner in the process that points at it, with TCP_NODELAY set (an exec on an
  open connection then costs a few ms instead of ~44 ms) and SSH keepalives.
- The node's host key is pinned from `node.ssh_host_key`; an unknown or
  different key is refused (RejectPolicy). The only place a key is learnt is
  `scan_host_key()`, which the ssh cloud calls at provision time and records.
- Every operation has a timeout. A lost node (connection reset: the command's
  channel closes without an exit status) or a silent network (no answer to a
  keepalive probe; `Transport.is_active()` keeps saying True) raises
  `NodeUnreachableError` within seconds instead of hanging.
- Environment variables are sent as `export` statements in front of the
  command (sshd's AcceptEnv refuses most names); every value is shell-quoted.
- Command timeouts are enforced on the node with coreutils `timeout`, which
  kills the command's whole process group, and on the client as a backstop.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import io
import logging
import selectors
import shlex
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO

import paramiko

from launcher.clouds.base import NodeInfo
from launcher.errors import LauncherError
from launcher.runtime import sync
from launcher.runtime.runner import (
    CommandResult,
    CommandTimeoutError,
    NodeUnreachableError,
    OutputCallback,
    StreamCollector,
    export_prefix,
    shell_path,
)

# paramiko logs a lost connection at ERROR; with no handler configured Python would print
# it to stderr. We report those conditions as NodeUnreachableError instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class HostKeyMismatchError(NodeUnreachableError):
    """The node presented a host key other than the one pinned for it (or none was pinned)."""


@dataclass(frozen=True)
class SSHOptions:
    """Timeouts (seconds) of every SSH operation."""

    connect_timeout: float = 10.0  # TCP connect
    banner_timeout: float = 10.0
    auth_timeout: float = 10.0
    channel_open_timeout: float = 5.0  # a healthy sshd answers in milliseconds
    keepalive_interval: int = 5  # SSH keepalive packets when idle
    # With no output for this long, check the connection with a keepalive
    # that needs an answer; no answer within probe_timeout = node unreachable.
    probe_after: float = 5.0
    probe_timeout: float = 5.0
    # Kernel-level backstop: drop the TCP connection when sent data stays
    # unacknowledged this long (TCP_USER_TIMEOUT).
    tcp_user_timeout: float = 20.0
    # Client-side slack on top of a command's own timeout, enforced on the node.
    timeout_slack: float = 3.0
    # Output still held open by a background process after the command exited.
    drain_after_exit: float = 0.3
    # After the last runner using a connection closes, keep it open this long for reuse.
    linger: float = 30.0


DEFAULT_OPTIONS = SSHOptions()
_SPOOL_MAX = 32 * 1024 * 1024
_CHUNK = 32 * 1024


def _host_key_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def parse_host_key(text: str) -> paramiko.PKey:
    """A `"ssh-ed25519 AAAA..."` line as a paramiko key. Raises LauncherError if malformed."""
    parts = text.split()
    if len(parts) < 2:
        raise LauncherError(f"Malformed SSH host key {text!r}: expected '<type> <base64>'.")
    try:
        return paramiko.PKey.from_type_string(parts[0], base64.b64decode(parts[1]))
    except Exception as exc:
        raise LauncherError(f"Malformed SSH host key {text[:40]!r}...: {exc}") from exc


def _open_socket(host: str, port: int, opts: SSHOptions) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=opts.connect_timeout)
    except TimeoutError as exc:
        raise NodeUnreachableError(
            f"Cannot reach {host}:{port}: no answer within {opts.connect_timeout:g}s.", host=host
        ) from exc
    except OSError as exc:
        raise NodeUnreachableError(
            f"Cannot reach {host}:{port}: {exc.strerror or exc}.", host=host
        ) from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        sock.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(opts.tcp_user_timeout * 1000)
        )
    return sock


def scan_host_key(
    host: str, port: int = 22, *, timeout: float = 10.0, key_type: str | None = None
) -> str:
    """First contact: the host key `host:port` presents, as `"<type> <base64>"`.

    Does not authenticate. Only for provisioning, where the caller records the
    key and pins it from then on. Raises NodeUnreachableError.
    """
    opts = SSHOptions(connect_timeout=timeout, banner_timeout=timeout)
    sock = _open_socket(host, port, opts)
    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeout
    if key_type:
        sec = transport.get_security_options()
        sec.key_types = [key_type, *(k for k in sec.key_types if k != key_type)]
    try:
        transport.start_client(timeout=timeout)
        key = transport.get_remote_server_key()
        return f"{key.get_name()} {key.get_base64()}"
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise NodeUnreachableError(
            f"SSH handshake with {host}:{port} failed: {exc}", host=host
        ) from exc
    finally:
        transport.close()


class _Connection:
    """One authenticated SSH connection, shared by runners. Thread-safe."""

    def __init__(self, client: paramiko.SSHClient, host: str) -> None:
        self.client = client
        self.host = host
        transport = client.get_transport()
        assert transport is not None
        self.transport: paramiko.Transport = transport
        self.refs = 0
        self.idle_timer: threading.Timer | None = None
        self._probe_lock = threading.Lock()
        self.dead = False

    def alive(self) -> bool:
        return not self.dead and self.transport.is_active()

    def probe(self, timeout: float) -> bool:
        """Does the other end still answer? A silent network closes the connection."""
        with self._probe_lock:
            if not self.alive():
                return False
            answered = threading.Event()

            def ask() -> None:
                with contextlib.suppress(Exception):
                    # OpenSSH answers an unknown global request with REQUEST_FAILURE
                    self.transport.global_request("keepalive@openssh.com", wait=True)
                answered.set()

            threading.Thread(target=ask, name="ssh-probe", daemon=True).start()
            if answered.wait(timeout) and self.transport.is_active():
                return True
            self.kill()
            return False

    def kill(self) -> None:
        self.dead = True
        with contextlib.suppress(Exception):
            self.client.close()


_ConnKey = tuple[str, int, str, str | None, str | None]
_connections: dict[_ConnKey, _Connection] = {}
_key_locks: dict[_ConnKey, threading.Lock] = {}
_cache_lock = threading.Lock()


def _close_if_idle(key: _ConnKey, conn: _Connection) -> None:
    with _cache_lock:
        if conn.refs > 0:
            return
        if _connections.get(key) is conn:
            del _connections[key]
    conn.kill()


def close_all_connections() -> None:
    """Close every cached SSH connection of this process."""
    with _cache_lock:
        conns = list(_connections.values())
        _connections.clear()
    for conn in conns:
        if conn.idle_timer is not None:
            conn.idle_timer.cancel()
        conn.kill()


atexit.register(close_all_connections)


class SSHRunner:
    """A `CommandRunner` for one node reached over SSH. Connects lazily, thread-safe."""

    def __init__(
        self,
        node: NodeInfo,
        *,
        key_path: str | None = None,
        options: SSHOptions = DEFAULT_OPTIONS,
    ) -> None:
        if node.ssh_user is None:
            raise LauncherError(f"Node {node.node_id} has no SSH user: use LocalRunner.")
        self.node = node
        self.host = node.external_ip or node.internal_ip
        self.port = node.ssh_port
        self.user: str = node.ssh_user
        self.key_path = key_path
        self.options = options
        self._key: _ConnKey = (self.host, self.port, self.user, key_path, node.ssh_host_key)
        self._conn: _Connection | None = None
        self._lock = threading.Lock()

    # ---- connection ------------------------------------------------------------------

    def connect(self) -> None:
        """Open (or reuse) the connection now. Raises NodeUnreachableError."""
        self._connection()

    def _connection(self) -> _Connection:
        with self._lock:
            if self._conn is not None and self._conn.alive():
                return self._conn
            if self._conn is not None:
                self._release_locked()
            with _cache_lock:
                key_lock = _key_locks.setdefault(self._key, threading.Lock())
            with key_lock:
                with _cache_lock:
                    conn = _connections.get(self._key)
                if conn is None or not conn.alive():
                    if conn is not None:
                        conn.kill()
                    conn = self._open()
                    with _cache_lock:
                        _connections[self._key] = conn
                conn.refs += 1
                if conn.idle_timer is not None:
                    conn.idle_timer.cancel()
                    conn.idle_timer = None
            self._conn = conn
            return conn

    def _open(self) -> _Connection:
        opts = self.options
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        if self.node.ssh_host_key:
            key = parse_host_key(self.node.ssh_host_key)
            client.get_host_keys().add(_host_key_name(self.host, self.port), key.get_name(), key)
        sock = _open_socket(self.host, self.port, opts)
        where = f"{self.user}@{self.host}:{self.port}"
        try:
            client.connect(
                self.host,
                port=self.port,
                username=self.user,
                key_filename=self.key_path,
                look_for_keys=self.key_path is None,
                allow_agent=self.key_path is None,
                sock=sock,
                timeout=opts.connect_timeout,
                banner_timeout=opts.banner_timeout,
                auth_timeout=opts.auth_timeout,
                channel_timeout=opts.channel_open_timeout,
            )
        except paramiko.BadHostKeyException as exc:
            sock.close()
            raise HostKeyMismatchError(
                f"Host key of {where} does not match the key pinned when node "
                f"{self.node.node_id} was provisioned (got {exc.key.get_name()}). Refusing to "
                "connect: the machine was replaced or someone is intercepting the connection. "
                f"If it was reinstalled, pin its new key (`ssh-keyscan -p {self.port} {self.host}`"
                " shows it; compare it out of band).",
                host=self.host,
            ) from exc
        except paramiko.AuthenticationException as exc:
            sock.close()
            if self.key_path:
                fix = (f" Add the line of {self.key_path}.pub to ~{self.user}/.ssh/authorized_keys "
                       f"on {self.host}.")
            else:
                fix = (" No identity_file is set: add your public key (e.g. ~/.ssh/id_ed25519.pub)"
                       f" to ~{self.user}/.ssh/authorized_keys on {self.host}.")
            raise NodeUnreachableError(
                f"SSH authentication to {where} failed with key {self.key_path or '(default)'}: "
                f"{str(exc).rstrip('.')}.{fix}",
                host=self.host,
            ) from exc
        except paramiko.SSHException as exc:
            sock.close()
            if "not found in known_hosts" in str(exc):
                raise HostKeyMismatchError(
                    f"No host key is pinned for {where}; refusing to trust an unknown key.",
                    host=self.host,
                ) from exc
            raise NodeUnreachableError(f"SSH to {where} failed: {exc}", host=self.host) from exc
        except (EOFError, OSError) as exc:
            sock.close()
            raise NodeUnreachableError(
                f"SSH to {where} failed: {exc or type(exc).__name__}", host=self.host
            ) from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(opts.keepalive_interval)
        return _Connection(client, self.host)

    def close(self) -> None:
        """Release this runner's hold on the shared connection. Idempotent.

        The connection closes `options.linger` seconds after its last holder let go
        (unless a new runner picks it up); `close_all_connections()` closes at once.
        """
        with self._lock:
            self._release_locked()

    def _release_locked(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        linger = self.options.linger
        with _cache_lock:
            conn.refs -= 1
            if conn.refs > 0:
                return
            if linger > 0 and conn.alive():
                # keep it a little: the next runner for this node (the launch after
                # provisioning, the next CLI step) skips the ~100 ms handshake
                conn.idle_timer = threading.Timer(linger, _close_if_idle, args=(self._key, conn))
                conn.idle_timer.daemon = True
                conn.idle_timer.start()
                return
            if _connections.get(self._key) is conn:
                del _connections[self._key]
        conn.kill()

    def _unreachable(self, conn: _Connection, what: str) -> NodeUnreachableError:
        conn.kill()
        return NodeUnreachableError(
            f"Lost the connection to node {self.node.node_id} ({self.user}@{self.host}:"
            f"{self.port}) {what}.",
            host=self.host,
        )

    # ---- commands --------------------------------------------------------------------

    def run(
        self,
        command: str,
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        on_output: OutputCallback | None = None,
        stdin: str | None = None,
    ) -> CommandResult:
        """See CommandRunner.run. Raises NodeUnreachableError, CommandTimeoutError."""
        script = export_prefix(env)
        if cwd:
            script += f"cd {shell_path(cwd)} && "
        if timeout is not None:
            script += f"timeout -k 2 {max(timeout, 0.001):.3f} "
        script += "bash -c " + shlex.quote(command)
        data = None if stdin is None else io.BytesIO(stdin.encode())
        return self._exec(script, data, timeout, on_output)

    def _exec(
        self,
        script: str,
        stdin: IO[bytes] | None,
        timeout: float | None,
        on_output: OutputCallback | None,
    ) -> CommandResult:
        started = time.monotonic()
        chan = self._open_channel()
        conn = self._conn
        assert conn is not None
        try:
            # paramiko waits for the exec reply without a timeout: a watchdog probes the
            # connection meanwhile and closes it if the other end went silent
            with self._watchdog(conn):
                chan.exec_command(script)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            chan.close()
            raise self._unreachable(conn, f"while starting a command ({exc})") from exc
        if stdin is not None:
            # a separate thread, so output is read while input is still being sent
            threading.Thread(target=_send_stdin, args=(chan, stdin), daemon=True).start()
        else:
            chan.shutdown_write()
        out = StreamCollector(on_output)
        err = StreamCollector(on_output)
        deadline = None if timeout is None else started + timeout + self.options.timeout_slack
        try:
            self._pump(chan, conn, out, err, deadline)
        except CommandTimeoutError as exc:
            exc.stdout, exc.stderr = out.finish(), err.finish()
            exc.timeout = timeout or 0.0
            raise
        finally:
            chan.close()
        rc = chan.exit_status
        if rc == -1:  # closed without an exit status: the connection went away
            raise self._unreachable(conn, "while a command was running")
        elapsed = time.monotonic() - started
        if timeout is not None and rc in (124, 137) and elapsed >= timeout:
            raise CommandTimeoutError(
                f"Command on node {self.node.node_id} timed out after {timeout:g}s and was killed.",
                timeout=timeout,
                stdout=out.finish(),
                stderr=err.finish(),
            )
        return CommandResult(rc, out.finish(), err.finish())

    @contextlib.contextmanager
    def _watchdog(self, conn: _Connection) -> Iterator[None]:
        timer = threading.Timer(
            self.options.probe_after, conn.probe, args=(self.options.probe_timeout,)
        )
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _open_channel(self) -> paramiko.Channel:
        """A session channel; retries once on a fresh connection if the cached one is stale."""
        for attempt in (1, 2):
            conn = self._connection()
            try:
                return conn.transport.open_session(timeout=self.options.channel_open_timeout)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                # the command never started, so trying again on a new connection is safe
                conn.kill()
                if attempt == 2:
                    raise NodeUnreachableError(
                        f"Cannot open an SSH session on node {self.node.node_id} "
                        f"({self.user}@{self.host}:{self.port}): {exc or type(exc).__name__}",
                        host=self.host,
                    ) from exc
        raise AssertionError("unreachable")

    def _pump(
        self,
        chan: paramiko.Channel,
        conn: _Connection,
        out: StreamCollector,
        err: StreamCollector,
        deadline: float | None,
    ) -> None:
        """Read output until the command's exit status (and EOF) arrive."""
        opts = self.options
        sel = selectors.DefaultSelector()
        sel.register(chan, selectors.EVENT_READ)
        last_heard = time.monotonic()
        exit_seen: float | None = None
        try:
            while True:
                got = False
                while chan.recv_ready():
                    out.feed(chan.recv(65536))
                    got = True
                while chan.recv_stderr_ready():
                    err.feed(chan.recv_stderr(65536))
                    got = True
                now = time.monotonic()
                if got:
                    last_heard = now
                    continue
                if chan.closed or (chan.eof_received and not chan.recv_stderr_ready()):
                    # all output is in; wait for the exit status, which follows at once
                    remaining = opts.probe_timeout
                    if deadline is not None:
                        remaining = min(remaining, max(0.0, deadline - now))
                    if not chan.status_event.wait(remaining):
                        if not conn.probe(opts.probe_timeout):
                            raise self._unreachable(conn, "while waiting for a command to exit")
                        last_heard = time.monotonic()
                        continue
                    return
                if chan.exit_status_ready():
                    if chan.exit_status == -1:
                        return
                    exit_seen = exit_seen or now
                    if now - exit_seen >= opts.drain_after_exit:
                        return  # a background process holds the output open
                if deadline is not None and now >= deadline:
                    if not conn.probe(opts.probe_timeout):
                        raise self._unreachable(conn, "(no answer to a keepalive)")
                    raise CommandTimeoutError(
                        f"Command on node {self.node.node_id} did not finish in time.",
                        timeout=0.0,
                    )
                if now - last_heard >= opts.probe_after:
                    if not conn.probe(opts.probe_timeout):
                        raise self._unreachable(conn, "(no answer to a keepalive)")
                    last_heard = time.monotonic()
                    continue
                wait = opts.probe_after - (now - last_heard)
                if deadline is not None:
                    wait = min(wait, deadline - now)
                # an exit status alone does not wake the selector: poll for it
                wait = min(wait, 0.05 if exit_seen is not None else 0.25)
                sel.select(max(wait, 0.0))
        finally:
            sel.close()

    # ---- files -----------------------------------------------------------------------

    def put_text(self, text: str, remote_path: str, mode: int | None = None) -> None:
        """See CommandRunner.put_text. Raises NodeUnreachableError, LauncherError."""
        self._put(io.BytesIO(text.encode()), remote_path, 0o644 if mode is None else mode)

    def put_file(self, local_path: str, remote_path: str, mode: int | None = None) -> None:
        """See CommandRunner.put_file (one exec, no SFTP)."""
        import os

        if mode is None:
            mode = os.stat(local_path).st_mode & 0o7777
        with open(local_path, "rb") as f:
            self._put(f, remote_path, mode)

    def _put(self, data: IO[bytes], remote_path: str, mode: int) -> None:
        script = (
            f"p={shell_path(remote_path)}; "
            'mkdir -p -- "$(dirname -- "$p")" && t="$p.launcher-tmp.$$" && '
            f'cat > "$t" && chmod {mode:o} "$t" && mv -f -- "$t" "$p" || '
            '{ rc=$?; rm -f -- "$t"; exit $rc; }'
        )
        result = self._exec(script, data, None, None)
        result.check(f"Writing {remote_path} on node {self.node.node_id}")

    def sync_dir(self, local_dir: str, remote_dir: str, *, respect_gitignore: bool = True) -> None:
        """See CommandRunner.sync_dir: one tar.gz stream, unpacked by one remote exec."""
        files = sync.list_sync_files(local_dir, respect_gitignore=respect_gitignore)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_MAX) as buf:
            sync.pack_tar_gz(local_dir, files, buf)
            buf.seek(0)
            script = (
                f'd={shell_path(remote_dir)}; mkdir -p -- "$d" && '
                'tar -xzf - -C "$d" --no-same-owner --warning=no-unknown-keyword'
            )
            result = self._exec(script, buf, None, None)
        result.check(f"Syncing {local_dir} to {remote_dir} on node {self.node.node_id}")


def _send_stdin(chan: paramiko.Channel, data: IO[bytes]) -> None:
    """Feed the command's stdin. A failure shows up as the channel closing (no exit
    status: connection lost) or as the command's own exit status (it stopped reading)."""
    with contextlib.suppress(OSError, ValueError, paramiko.SSHException, EOFError):
        while chunk := data.read(_CHUNK):
            chan.sendall(chunk)
        chan.shutdown_write()
