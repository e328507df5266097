"""Slurm's commands, run on a cluster's login node, answered as typed records.

`login: localhost` runs them here (subprocess); any other login runs them over SSH
through the existing SSH runner (`launcher.runtime.ssh_runner`, imported only then).
Every command has a timeout (the cluster's `command_timeout`); a command that fails
raises SlurmCommandError naming the command and Slurm's own message, and an
unreachable login or a command that outlives its timeout raises
SlurmUnreachableError. The version is read once per client (`sinfo --version`) and
the formats used are the ones that exist on every release from 20.11 to 24.x.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

from launcher.clouds.base import CloudError
from launcher.clouds.slurm.parse import (
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    JobRecord,
    NodeRecord,
    PartitionRow,
    QueueRow,
    SlurmParseError,
    SlurmVersion,
    parse_jobs,
    parse_nodes,
    parse_sinfo,
    parse_squeue,
    parse_version,
)

if TYPE_CHECKING:
    from launcher.config.slurm import SlurmCluster
    from launcher.runtime.runner import CommandRunner

CLOUD = "slurm"
OLDEST = SlurmVersion(20, 11)
T = TypeVar("T")


class SlurmCommandError(CloudError):
    """A Slurm command exited non-zero (or printed what the parsers cannot read)."""


class SlurmUnreachableError(CloudError):
    """The login node could not be reached (SSH failed, or a command timed out)."""


@dataclass(frozen=True)
class Output:
    returncode: int
    stdout: str
    stderr: str


class SlurmClient:
    """The Slurm commands of one configured cluster. Thread-safe like its runner."""

    def __init__(self, cluster: SlurmCluster) -> None:
        self.cluster = cluster

    # ---- transport -------------------------------------------------------------------

    @cached_property
    def _runner(self) -> CommandRunner:
        from launcher.clouds.base import NodeInfo
        from launcher.runtime.ssh_runner import SSHRunner

        c = self.cluster
        node = NodeInfo(rank=0, node_id=f"{c.name}-login", internal_ip=c.login,
                        external_ip=c.login, ssh_user=c.user or getpass.getuser(), ssh_port=c.port,
                        ssh_host_key=c.host_key or self._known_host_key())
        return SSHRunner(node, key_path=c.identity_file)

    def _known_host_key(self) -> str:
        """The login's key from ~/.ssh/known_hosts (hashed entries too). Raises
        SlurmUnreachableError when there is none: an unknown key is never trusted."""
        import paramiko

        c = self.cluster
        path = os.path.expanduser("~/.ssh/known_hosts")
        name = c.login if c.port == 22 else f"[{c.login}]:{c.port}"
        try:
            keys = paramiko.HostKeys(path).lookup(name) if os.path.exists(path) else None
        except (OSError, paramiko.SSHException) as exc:
            raise self._unreachable(f"cannot read {path}: {exc}") from exc
        if keys:
            for kind in ("ssh-ed25519", *keys.keys()):
                if kind in keys:
                    return f"{kind} {keys[kind].get_base64()}"
        raise self._unreachable(
            f"no SSH host key known for {name}: set slurm.clusters.{c.name}.host_key (a line "
            f"of `ssh-keyscan -p {c.port} {c.login}`, checked out of band) or connect once with "
            "ssh so that ~/.ssh/known_hosts has it")

    def sh(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> Output:
        """Run a shell command line on the login node (`timeout`: the cluster's
        command_timeout). Raises SlurmUnreachableError."""
        if timeout is None:
            timeout = self.cluster.command_timeout
        if self.cluster.local:
            return self._local(command, stdin, timeout)
        from launcher.runtime.runner import CommandTimeoutError, NodeUnreachableError

        try:
            r = self._runner.run(command, stdin=stdin, timeout=timeout)
        except (NodeUnreachableError, CommandTimeoutError) as exc:
            raise self._unreachable(str(exc)) from exc
        return Output(r.returncode, r.stdout, r.stderr)

    def _local(self, command: str, stdin: str | None, timeout: float) -> Output:
        """Run `command` here in its own process group: a command that outlives `timeout`
        is killed with everything it started (a hung child would hold its pipes open)."""
        try:
            p = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
        except OSError as exc:
            raise self._unreachable(str(exc)) from exc
        try:
            out, err = p.communicate(stdin or "", timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.communicate(timeout=5)
            raise self._unreachable(f"'{command[:80]}' timed out after {timeout:.0f}s") from exc
        return Output(p.returncode, out, err)

    def _unreachable(self, why: str) -> SlurmUnreachableError:
        return SlurmUnreachableError(
            f"Slurm cluster '{self.cluster.name}' (login {self.cluster.login}): {why}",
            cloud=CLOUD, region=self.cluster.name)

    def run(self, argv: list[str], *, stdin: str | None = None, timeout: float | None = None) -> str:
        """Run one Slurm command; its stdout. Raises SlurmCommandError on failure."""
        out = self.sh(shlex.join(argv), stdin=stdin, timeout=timeout)
        if out.returncode != 0:
            msg = (out.stderr.strip() or out.stdout.strip() or f"exit {out.returncode}")
            raise SlurmCommandError(
                f"Slurm cluster '{self.cluster.name}': `{shlex.join(argv)[:120]}` failed: "
                f"{msg.splitlines()[-1][:300]}", cloud=CLOUD, region=self.cluster.name)
        return out.stdout

    def _parsed(self, what: str, fn: Callable[[str], T], text: str) -> T:
        try:
            return fn(text)
        except SlurmParseError as exc:
            raise SlurmCommandError(f"Slurm cluster '{self.cluster.name}': {what}: {exc}",
                                    cloud=CLOUD, region=self.cluster.name) from exc

    # ---- queries ---------------------------------------------------------------------

    @cached_property
    def version(self) -> SlurmVersion:
        """`sinfo --version`. Raises SlurmCommandError for a release older than 20.11."""
        v: SlurmVersion = self._parsed("sinfo --version", parse_version, self.run(["sinfo", "--version"]))
        if v < OLDEST:
            raise SlurmCommandError(
                f"Slurm cluster '{self.cluster.name}' runs Slurm {v}; launcher needs 20.11 or newer.",
                cloud=CLOUD, region=self.cluster.name)
        return v

    def partitions(self) -> list[PartitionRow]:
        rows: list[PartitionRow] = self._parsed(
            "sinfo", parse_sinfo, self.run(["sinfo", "-h", "-o", SINFO_FORMAT]))
        return rows

    def nodes(self) -> list[NodeRecord]:
        """`scontrol -d show node -o`: -d adds GresUsed, the allocated GRES on sites whose
        TRES accounting does not track gres/gpu."""
        nodes: list[NodeRecord] = self._parsed(
            "scontrol show node", parse_nodes, self.run(["scontrol", "-d", "show", "node", "-o"]))
        return nodes

    def job(self, job_id: str) -> JobRecord | None:
        """`scontrol show job -o ID`; None once Slurm forgot it (after MinJobAge)."""
        out = self.sh(shlex.join(["scontrol", "show", "job", "-o", job_id]))
        if out.returncode != 0:
            if "invalid job id" in (out.stderr + out.stdout).lower():
                return None
            raise SlurmCommandError(
                f"Slurm cluster '{self.cluster.name}': scontrol show job {job_id} failed: "
                f"{(out.stderr or out.stdout).strip()[:300]}", cloud=CLOUD, region=self.cluster.name)
        jobs: list[JobRecord] = self._parsed("scontrol show job", parse_jobs, out.stdout)
        return jobs[0] if jobs else None

    def queue(self, job_name: str) -> list[QueueRow]:
        """Jobs named `job_name` in every state Slurm still remembers (`-t all`)."""
        rows: list[QueueRow] = self._parsed("squeue", parse_squeue, self.run(
            ["squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT, "--name", job_name]))
        return rows

    def hostnames(self, nodelist: str) -> list[str]:
        """`scontrol show hostnames ltn[1-2]` -> ["ltn1", "ltn2"]."""
        return self.run(["scontrol", "show", "hostnames", nodelist]).split()

    def sbatch(self, args: list[str], script: str) -> str:
        """Submit `script` (stdin) with `args`; the job id."""
        out = self.run(["sbatch", "--parsable", *args], stdin=script)
        return out.strip().split(";")[0]

    def scancel(self, job_id: str) -> None:
        self.run(["scancel", job_id])
