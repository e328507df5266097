"""A real Slurm cluster for tests: munged + slurmctld + one slurmd per network namespace.

    lab = SlurmLab(tmpdir, [LabNode("ltn1", gpus=4, gpu_type="a100"), LabNode("ltn2", 4, "a100")])
    lab.start()                  # ~1-2 s; raises LabError with the daemons' logs
    lab.env                      # {"SLURM_CONF": ...}: point the Slurm clients at it
    lab.sh("squeue -h")          # run a client command against it
    lab.kill_slurmd("ltn2")      # node failure
    login = lab.start_login(pub) # an sshd login node on the lab's network (key `pub`)
    lab.close()                  # every daemon killed by pid, namespaces and bridge removed

Every slurmd runs in its node's network namespace and in a mount namespace where the
lab's own `home/` is bind-mounted over /root: the nodes share one home, as on a site
with NFS homes, and two labs (or the machine's /root) never share one.

Fake GPUs: `gres.conf` with `AutoDetect=off` and per-node character devices made with
mknod (1,3: like /dev/null), so `--gres=gpu:a100:2` schedules and sets
CUDA_VISIBLE_DEVICES. Ports are derived from the pid (never the default 6817/6818).
`unavailable_reason()` says why a lab cannot start here (binaries, root, netns).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scontrol",
            "scancel", "nsenter", "unshare", "ip")


class LabError(RuntimeError):
    pass


_SEQ = 0  # labs started by this process


def _free_port_pair(start: int) -> int:
    """The first port from `start` (stepping by 4, within 20000-39999) where it and the
    next one are free here: slurmctld dies on a port something else holds."""
    port = start
    for _ in range(200):
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("0.0.0.0", p))
            return port
        except OSError:
            port = 20000 + (port - 20000 + 4) % 20000
    return start


def unavailable_reason() -> str | None:
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return ("Slurm test cluster unavailable: missing " + ", ".join(missing)
                + " (apt-get install slurm-wlm munge; .ci/run does it)")
    if os.geteuid() != 0:
        return "Slurm test cluster unavailable: needs root (network namespaces, slurmd)"
    return None


@dataclass(frozen=True)
class LabNode:
    name: str
    gpus: int = 0
    gpu_type: str | None = None  # None: untyped GRES (`gpu:4`)
    cpus: int = 4
    memory_mib: int = 4000


@dataclass(frozen=True)
class LoginNode:
    host: str  # its address on the lab's network (sshd on port 22)
    host_key: str  # "ssh-ed25519 AAAA..."
    home: Path  # its /root


@dataclass(frozen=True)
class LabPartition:
    name: str
    nodes: tuple[str, ...]
    default: bool = False
    max_time: str = "INFINITE"
    max_nodes: str = "UNLIMITED"
    priority_tier: int = 1
    preempt_mode: str | None = None


@dataclass
class SlurmLab:
    workdir: Path
    nodes: list[LabNode]
    partitions: list[LabPartition] = field(default_factory=list)
    extra_conf: str = ""
    proctrack: str = "linuxproc"  # or "cgroup" (cgroup v1 freezer; cgroup.conf written)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        global _SEQ
        _SEQ += 1
        pid = os.getpid()
        # names unique per lab, not only per process: the kernel removes a deleted
        # namespace's veth asynchronously, so the next lab must not reuse its name
        base = f"{pid % 10000}{_SEQ % 100:02d}"
        self.tag = f"sl{base}"
        self.bridge = f"sb{base}"
        self.veth = f"sv{base}"
        self.port = _free_port_pair(20000 + (pid * 7 + _SEQ * 4) % 20000)
        self.subnet_x = (pid + _SEQ * 37) % 200 + 20
        self.gateway = f"10.125.{self.subnet_x}.1"
        self.conf = self.workdir / "slurm.conf"
        # Unix socket paths (munge, slurmstepd's in the spool) must stay under 108 bytes:
        # they live in a short directory of their own, removed by close()
        self.rundir = Path(tempfile.mkdtemp(prefix="sl", dir="/tmp"))
        self.rundir.chmod(0o755)
        self.munge_sock = self.rundir / "munge.sock"
        # The lab's nodes share one home (like an NFS home), and no other lab's nor this
        # machine's: /root is bind-mounted over it in each slurmd's mount namespace
        self.home = self.workdir / "home"
        self.home.mkdir(exist_ok=True)
        self.home.chmod(0o700)
        if not self.partitions:
            self.partitions = [LabPartition("gpu", tuple(n.name for n in self.nodes), default=True)]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def addr(self, i: int) -> str:
        return f"10.125.{self.subnet_x}.{10 + i}"

    # ---- clients --------------------------------------------------------------------

    def sh(self, command: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["timeout", str(timeout), "bash", "-c", command], capture_output=True,
                              text=True, env={**os.environ, **self.env}, check=False)

    # ---- lifecycle ------------------------------------------------------------------

    def _write_conf(self) -> None:
        d = self.workdir
        lines = [
            "ClusterName=launchertest", f"SlurmctldHost={os.uname().nodename}({self.gateway})",
            f"SlurmctldPort={self.port}", f"SlurmdPort={self.port + 1}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_sock}", f"ProctrackType=proctrack/{self.proctrack}",
            "TaskPlugin=task/none", "MpiDefault=none", "SwitchType=switch/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "SchedulerParameters=sched_interval=1", "SchedulerType=sched/backfill",
            "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/none",
            "JobAcctGatherType=jobacct_gather/none", "GresTypes=gpu", "ReturnToService=2",
            "SlurmdParameters=config_overrides", "SlurmdTimeout=5", "MinJobAge=300",
            "KillWait=2", "InactiveLimit=0", "MessageTimeout=5", "TCPTimeout=3",
            f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={self.rundir}/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/slurmctld.log", f"SlurmdLogFile={d}/slurmd-%n.log",
            "SlurmctldDebug=info", "SlurmdDebug=info",
        ]
        if any(p.preempt_mode for p in self.partitions):
            lines += ["PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE"]
        for i, n in enumerate(self.nodes):
            gres = ""
            if n.gpus:
                gres = f" Gres=gpu:{n.gpu_type + ':' if n.gpu_type else ''}{n.gpus}"
            lines.append(f"NodeName={n.name} NodeAddr={self.addr(i)} CPUs={n.cpus} "
                         f"RealMemory={n.memory_mib}{gres} State=UNKNOWN")
        for p in self.partitions:
            mode = f" PreemptMode={p.preempt_mode}" if p.preempt_mode else ""
            lines.append(f"PartitionName={p.name} Nodes={','.join(p.nodes)} "
                         f"Default={'YES' if p.default else 'NO'} MaxTime={p.max_time} "
                         f"MaxNodes={p.max_nodes} PriorityTier={p.priority_tier}{mode} State=UP")
        self.conf.write_text("\n".join(lines) + "\n" + self.extra_conf)
        if self.proctrack == "cgroup":
            (d / "cgroup.conf").write_text(
                "CgroupPlugin=cgroup/v1\nCgroupAutomount=no\nConstrainCores=no\n"
                "ConstrainRAMSpace=no\nConstrainDevices=no\n")
        gres_lines = ["AutoDetect=off"]
        for n in self.nodes:
            if not n.gpus:
                continue
            devdir = d / "dev" / n.name
            devdir.mkdir(parents=True, exist_ok=True)
            for k in range(n.gpus):
                dev = devdir / f"nvidia{k}"
                if not dev.exists():
                    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
            typ = f" Type={n.gpu_type}" if n.gpu_type else ""
            gres_lines.append(f"NodeName={n.name} Name=gpu{typ} File={devdir}/nvidia[0-{n.gpus - 1}]")
        (d / "gres.conf").write_text("\n".join(gres_lines) + "\n")

    def _net(self) -> None:
        def ip(*args: str) -> None:
            subprocess.run(["ip", *args], check=True, capture_output=True)

        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for i, _ in enumerate(self.nodes):
            ns = f"{self.tag}-{i}"
            veth = f"{self.veth}-{i}"
            ip("netns", "add", ns)
            self.namespaces.append(ns)
            ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("link", "set", veth, "master", self.bridge, "up")
            ip("-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            ip("-n", ns, "route", "add", "default", "via", self.gateway)

    def _spawn(self, key: str, argv: list[str]) -> None:
        log = open(self.workdir / f"{key}.out", "wb")  # noqa: SIM115 - owned by the process
        self.procs[key] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True, env={**os.environ, **self.env})

    def start_slurmd(self, i: int) -> None:
        n = self.nodes[i]
        (self.rundir / n.name).mkdir(exist_ok=True)
        self._spawn(f"slurmd-{n.name}", [
            "nsenter", f"--net=/run/netns/{self.tag}-{i}", "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-c",
            f"mount --bind {self.home} /root && hostname {n.name} && "
            f"exec slurmd -D -N {n.name} -f {self.conf}"])

    def start(self, timeout: float = 30) -> None:
        d = self.workdir
        d.chmod(0o755)  # munged refuses a directory others cannot enter
        (d / "state").mkdir(exist_ok=True)
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        try:
            self._write_conf()
            self._net()
            subprocess.run(["munged", f"--key-file={key}", f"--socket={self.munge_sock}",
                            f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log",
                            f"--seed-file={d}/munge.seed", "--force"], check=True,
                           capture_output=True, timeout=10)
            self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", str(self.conf)])
            for i in range(len(self.nodes)):
                self.start_slurmd(i)
            self.wait_nodes("idle", timeout)
        except BaseException as exc:
            logs = self.logs()
            self.close()
            detail = getattr(exc, "stderr", b"") or b""
            raise LabError(f"the Slurm lab did not start: {exc!r} {detail!r}\n{logs}") from None

    def wait_nodes(self, state: str, timeout: float = 30, names: list[str] | None = None) -> None:
        """Poll sinfo until every node (or `names`) reports `state` (Slurm has no event)."""
        want = set(names or [n.name for n in self.nodes])
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            out = self.sh("sinfo -h -N -o '%N %T'", timeout=5)
            last = out.stdout + out.stderr
            seen = {ln.split()[0]: ln.split()[1] for ln in out.stdout.splitlines() if ln.split()}
            if all(seen.get(n, "").startswith(state) for n in want):
                return
            time.sleep(0.2)
        raise LabError(f"nodes {sorted(want)} not {state} after {timeout}s: {last}")

    def start_login(self, authorized_key: str, env: dict[str, str] | None = None,
                    timeout: float = 10) -> LoginNode:
        """An sshd "login node" in a namespace of its own on the lab's bridge (it reaches
        slurmctld and every slurmd directly), with its own hostname `ltlogin`, its own
        /root (authorized_key in it) and SLURM_CONF set for every session (sshd's
        SetEnv, with `env`: PATH included), so the Slurm commands run there answer for
        this lab. Root login only."""
        from tests.netns import SSHD, SSHD_CONFIG

        i = len(self.nodes)
        ns, veth, addr = f"{self.tag}-login", f"{self.veth}-l", self.addr(i)
        home = self.workdir / "login-home"
        (home / ".ssh").mkdir(parents=True, mode=0o700)
        (home / ".ssh" / "authorized_keys").write_text(authorized_key.strip() + "\n")
        (home / ".ssh" / "authorized_keys").chmod(0o600)
        key = self.workdir / "login_host_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, capture_output=True)
        conf = self.workdir / "login_sshd_config"
        conf.write_text(SSHD_CONFIG.format(listen=addr, port=22, host_key=key,
                                           pidfile=self.workdir / "login_sshd.pid")
                        + "SetEnv " + " ".join(f"{k}={v}" for k, v in
                                               {**(env or {}), **self.env}.items()) + "\n")
        # a link of this name left by an earlier lab (pid reuse) that the kernel has not
        # removed yet would make `link add` fail
        subprocess.run(["ip", "link", "del", veth], capture_output=True, check=False)
        for args in (["netns", "add", ns],
                     ["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
                     ["link", "set", veth, "master", self.bridge, "up"],
                     ["-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0"],
                     ["-n", ns, "link", "set", "eth0", "up"], ["-n", ns, "link", "set", "lo", "up"],
                     ["-n", ns, "route", "add", "default", "via", self.gateway]):
            subprocess.run(["ip", *args], check=True, capture_output=True)
            if args[:2] == ["netns", "add"]:
                self.namespaces.append(ns)
        self._spawn("login", [
            "ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "--uts",
            "sh", "-c", f"mount --bind {home} /root && hostname ltlogin && exec {SSHD} -D -e -f {conf}"])
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((addr, 22), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.procs["login"].poll() is not None:
                    raise LabError(f"the login sshd did not start: {self.logs()}") from None
                time.sleep(0.05)
        host_key = " ".join(Path(f"{key}.pub").read_text().split()[:2])
        return LoginNode(addr, host_key, home)

    def kill_slurmd(self, name: str) -> None:
        proc = self.procs.pop(f"slurmd-{name}")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def logs(self) -> str:
        out = []
        for f in sorted(self.workdir.glob("*.log")) + sorted(self.workdir.glob("*.out")):
            out.append(f"--- {f.name}\n" + "\n".join(f.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(out)

    def close(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.procs.clear()
        pidfile = self.workdir / "munged.pid"
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
        for ns in self.namespaces:
            # job steps slurmd started live in the namespace: kill them too
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
            for pid in pids.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self.namespaces.clear()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, check=False)
        shutil.rmtree(self.rundir, ignore_errors=True)
