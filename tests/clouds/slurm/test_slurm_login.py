"""A Slurm cluster reached through a login node over SSH, on the real slurmctld: the
login is an sshd in its own network namespace on the lab's network (lab.start_login),
and this process has no SLURM_CONF, so every Slurm command that answers ran there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.clouds.base import ProvisionRequest
from launcher.clouds.slurm.cloud import SlurmCloud
from launcher.runtime.node_runner import runner_for
from tests.clouds.slurm.conftest import LabFactory
from tests.clouds.slurm.faults import SlurmShims
from tests.clouds.slurm.lab import LabNode, LoginNode, SlurmLab

TYPED = [LabNode("ltn1", 4, "a100"), LabNode("ltn2", 4, "a100")]


def _remote_lab(slurm_lab: LabFactory, tmp_path: Path, launcher_home: Path,
                monkeypatch: pytest.MonkeyPatch, host_key: str | None = ""
                ) -> tuple[SlurmLab, LoginNode, SlurmShims]:
    """The lab, its login node, and config.yaml naming the login over SSH (`host_key`:
    "" = the login's real key, None = no host_key line)."""
    lab = slurm_lab(TYPED)
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # the nodes' "image" (the fake nvidia-smi on PATH, as conftest set it up here)
    # reaches the steps through srun on the login, as a site's own environment would
    image = {k: os.environ[k] for k in ("PATH", "LAUNCHER_FAKE_GPU_CONFIG",
                                        "LAUNCHER_HEALTH_KMSG_PATH", "LAUNCHER_HEALTH_IB_PATH")}
    # the login's PATH starts with recording shims: the calls it ran are listed here
    shims = SlurmShims(tmp_path / "login-shims")
    image["PATH"] = f"{shims.bin}:{image['PATH']}"
    login = lab.start_login(Path(f"{key}.pub").read_text(), env=image)
    monkeypatch.delenv("SLURM_CONF")  # nothing here can answer: only the login can
    monkeypatch.setenv("HOME", str(tmp_path))  # ~/.ssh/known_hosts: this test's own
    pinned = "" if host_key is None else f"      host_key: {host_key or login.host_key}\n"
    (launcher_home / "config.yaml").write_text(
        f"slurm:\n  clusters:\n    lab:\n      login: {login.host}\n      user: root\n"
        f"      identity_file: {key}\n{pinned}      command_timeout: 20\n")
    assert subprocess.run(["sinfo", "--version"], capture_output=True).returncode != 0  # none here
    return lab, login, shims


def test_commands_run_on_the_login_node_over_ssh(
        slurm_lab: LabFactory, tmp_path: Path, launcher_home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    lab, login, shims = _remote_lab(slurm_lab, tmp_path, launcher_home, monkeypatch)
    cloud = SlurmCloud()
    status = cloud.check()
    assert status.enabled and "lab: Slurm 2" in status.reason and login.host in status.reason, \
        status.reason
    info = cloud.provision(ProvisionRequest(
        cluster_name="rl", cloud="slurm", region="lab", zone=None, instance_type="a100x2of4",
        num_nodes=2, use_spot=False))
    try:
        jid = info.head.node_id.split(":")[0]
        assert jid in lab.sh("squeue -h -o %i").stdout.split()
        calls = shims.calls()  # what ran on the login node
        assert {"sinfo", "squeue", "sbatch", "scontrol show job", "scontrol show hostnames",
                "srun"} <= set(calls), calls
        seen = [runner_for(info, n).run("hostname; echo $CUDA_VISIBLE_DEVICES").check().stdout.split()
                for n in info.nodes]
        assert seen == [["ltn1", "0,1"], ["ltn2", "0,1"]]
    finally:
        cloud.terminate("rl")
    assert lab.sh("squeue -h").stdout.strip() == ""


def test_cli_launch_through_the_login_node(
        slurm_lab: LabFactory, tmp_path: Path, launcher_home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    lab, _, shims = _remote_lab(slurm_lab, tmp_path, launcher_home, monkeypatch)
    task = tmp_path / "task.yaml"
    task.write_text("num_nodes: 2\nresources:\n  infra: slurm/lab\n  accelerators: A100:2\n"
                    "run: echo rank=$LAUNCHER_NODE_RANK host=$(hostname)\n")
    cli = [sys.executable, "-c", "from launcher.cli import main; main()"]
    out = subprocess.run([*cli, "launch", "-y", "-c", "rc", str(task)], capture_output=True,
                         text=True, env=dict(os.environ), timeout=240)
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        assert "rank=0 host=ltn1" in out.stdout and "rank=1 host=ltn2" in out.stdout, out.stdout
        assert "sbatch" in shims.calls()
    finally:
        down = subprocess.run([*cli, "down", "-y", "rc"], capture_output=True, text=True,
                              env=dict(os.environ), timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert lab.sh("squeue -h").stdout.strip() == ""


def test_an_unknown_or_wrong_login_host_key_is_refused(
        slurm_lab: LabFactory, tmp_path: Path, launcher_home: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No host_key and nothing in ~/.ssh/known_hosts: refused, saying how to pin it;
    a wrong one: refused. A known_hosts entry (as `ssh` writes it) is used."""
    _, login, _ = _remote_lab(slurm_lab, tmp_path, launcher_home, monkeypatch, host_key=None)
    status = SlurmCloud().check()
    assert not status.enabled and "no SSH host key known" in status.reason and "host_key" in status.reason
    (tmp_path / ".ssh").mkdir(exist_ok=True)
    (tmp_path / ".ssh" / "known_hosts").write_text(f"{login.host} {login.host_key}\n")
    assert SlurmCloud().check().enabled
    other = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                            str(tmp_path / "other")], check=True)
    assert other.returncode == 0
    wrong = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    config = launcher_home / "config.yaml"
    config.write_text(config.read_text() + f"      host_key: {wrong}\n")
    status = SlurmCloud().check()
    assert not status.enabled and "does not match" in status.reason, status.reason
