"""`SrunRunner`: a CommandRunner for one node of a Slurm allocation.

Every command is a job step of the allocation (`srun --overlap --jobid=JOB -w NODE -N1
-n1`), launched from the cluster's login node: nothing needs SSH into compute nodes,
and the step runs with the allocation's GPUs (CUDA_VISIBLE_DEVICES set by Slurm).
Files travel through the step's stdin (base64; a directory as a tar stream).
Output is handed to `on_output` line by line once the step ends (not streamed).
"""

from __future__ import annotations

import base64
import io
import os
import posixpath
import secrets
import shlex
import tarfile
from collections.abc import Mapping

from launcher.clouds.base import ClusterInfo, NodeInfo
from launcher.clouds.slurm.client import SlurmClient, SlurmUnreachableError
from launcher.runtime.agent import HOSTED_ENV
from launcher.runtime.runner import (
    CommandResult,
    CommandTimeoutError,
    NodeUnreachableError,
    OutputCallback,
    check_env_names,
    export_prefix,
    shell_path,
)

# srun's own failures (the node or the allocation is gone), not the command's
_SRUN_LOST = ("srun: error: Unable to create step", "Invalid job id", "Job has been cancelled",
              "srun: error: Unable to confirm allocation", "Requested nodes are busy",
              "step creation temporarily disabled")


def split_node_id(node_id: str) -> tuple[str, str]:
    """`1234:ltn1` -> ("1234", "ltn1")."""
    job, _, host = node_id.partition(":")
    return job, host


class SrunRunner:
    """Runs commands on `node` as steps of its allocation. Thread-safe; nothing to close."""

    def __init__(self, cluster: ClusterInfo, node: NodeInfo, client: SlurmClient | None = None) -> None:
        self.node = node
        self.job_id, self.host = split_node_id(node.node_id)
        if client is None:
            from launcher.config.settings import load_config

            client = SlurmClient(load_config().slurm.clusters[cluster.region])
        self.client = client

    def _srun(self, script: str) -> str:
        return shlex.join(["srun", "--overlap", f"--jobid={self.job_id}", "-w", self.host,
                           "-N1", "-n1", "--quiet", "--kill-on-bad-exit=1", "bash", "-c", script])

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
        """See CommandRunner.run. Raises NodeUnreachableError (the step could not start:
        node or allocation gone), CommandTimeoutError."""
        check_env_names(env)
        # the head agent's daemon runs in the holder's batch step (cloud.HOLDER_SCRIPT),
        # never in a step: a step's leftovers die with it under proctrack/cgroup
        script = f"export {HOSTED_ENV}=1; cd ~ && " + export_prefix(env)
        if cwd:
            script += f"cd {shell_path(cwd)} && "
        script += "bash -c " + shlex.quote(command)
        limit = timeout if timeout is not None else 24 * 3600.0
        try:
            out = self.client.sh(self._srun(script), stdin=stdin, timeout=limit)
        except SlurmUnreachableError as exc:
            if "timed out" in str(exc):
                raise CommandTimeoutError(f"{command[:60]!r} on {self.host} timed out",
                                          timeout=limit) from exc
            raise NodeUnreachableError(str(exc), host=self.host) from exc
        if out.returncode != 0 and any(s in out.stderr for s in _SRUN_LOST):
            raise NodeUnreachableError(
                f"node {self.host} of Slurm job {self.job_id}: {out.stderr.strip()[-300:]}",
                host=self.host)
        if on_output is not None:
            for line in (out.stdout + out.stderr).splitlines():
                on_output(line)
        return CommandResult(out.returncode, out.stdout, out.stderr)

    def put_text(self, text: str, remote_path: str, mode: int | None = None) -> None:
        self._put(text.encode(), remote_path, mode)

    def put_file(self, local_path: str, remote_path: str, mode: int | None = None) -> None:
        with open(local_path, "rb") as f:
            data = f.read()
        self._put(data, remote_path, mode if mode is not None else os.stat(local_path).st_mode & 0o777)

    def _put(self, data: bytes, remote_path: str, mode: int | None) -> None:
        dest = shell_path(remote_path)
        parent = shell_path(posixpath.dirname(remote_path) or ".")
        # unique per write: nodes that share a home (NFS, as on many Slurm sites) may
        # write the same file at once, and each must rename only its own copy
        tmp = shell_path(f"{remote_path}.launcher-put-{secrets.token_hex(6)}")
        chmod = f" && chmod {mode:o} {tmp}" if mode is not None else ""
        cmd = f"mkdir -p {parent} && base64 -d > {tmp}{chmod} && mv -f {tmp} {dest}"
        self.run(cmd, stdin=base64.b64encode(data).decode()).check(f"writing {remote_path}")

    def sync_dir(self, local_dir: str, remote_dir: str, *, respect_gitignore: bool = True) -> None:
        from launcher.runtime import sync

        files = sync.list_sync_files(local_dir, respect_gitignore=respect_gitignore)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for rel in files:
                tar.add(os.path.join(local_dir, rel), arcname=rel, recursive=False)
        dest = shell_path(remote_dir)
        self.run(f"mkdir -p {dest} && base64 -d | tar xzf - -C {dest}",
                 stdin=base64.b64encode(buf.getvalue()).decode()).check(f"syncing {remote_dir}")

    def close(self) -> None:
        """Nothing to release."""
