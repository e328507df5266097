"""The `ssh` cloud: node pools of machines you already have (`ssh_node_pools` in config.yaml).

A pool is a region (zone None). A cluster takes free hosts of its pool and gives
them back on `terminate`. Which host belongs to which cluster is recorded in
`$LAUNCHER_HOME/ssh_pools.json` (guarded by an fcntl lock on `ssh_pools.lock`)
before any host is touched, so a crash never leaks a host: `terminate` finds it.

Host keys: on first contact with a host its key is learnt (`scan_host_key`),
recorded in the same file, and pinned from then on (in every `NodeInfo` this
cloud returns, and for every later cluster on that host). A host whose key
changed is refused. A `host_key` set in config.yaml is pinned instead.

Keys: the client logs in with the pool's `identity_file` (default: the
launcher's user key). Each cluster gets an internal key pair: its public half
is authorized on every node (marked `launcher-cluster:<name>`), its private
half is copied to the head node only (`~/.launcher/clusters/<name>/`, with a
known_hosts file pinning every node). The user's private key never leaves
this machine.

Health: `query` is the pool's own view of each host (RUNNING / UNKNOWN /
TERMINATED once sshd is unreachable on every probe of a confirmation window:
see `ssh_health`); `replace_nodes` swaps lost hosts for spare hosts of the pool
and quarantines the lost ones.

paramiko is imported only when a method talks to hosts (`ssh_offers` and
`check` stay cheap).
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from launcher.catalog.offer import Offer
from launcher.clouds.base import (
    AuthError,
    CapacityError,
    ClusterInfo,
    CredentialStatus,
    InvalidRequestError,
    NodeInfo,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.ssh_health import HealthSettings, confirmed_unreachable, quarantine_active
from launcher.clouds.ssh_hosts import release_answering
from launcher.clouds.ssh_pool_state import Allocation, PoolStateFile
from launcher.config.settings import SSHHost, SSHNodePool, config_path, load_config
from launcher.errors import LauncherError
from launcher.runtime import keys
from launcher.runtime.runner import NodeUnreachableError, shell_path

if TYPE_CHECKING:
    from launcher.runtime.ssh_runner import SSHOptions, SSHRunner

# A host excluded by the health watch stays quarantined until the user releases it.
_HEALTH_QUARANTINE_UNTIL = 253402300799.0  # 9999-12-31

CLOUD = "ssh"
_MAX_PARALLEL = 16


def pool_instance_type(pool: SSHNodePool) -> str:
    """The instance type name of a pool's hosts in offers and ClusterInfo."""
    return f"{pool.name}-host"


def ssh_offers() -> list[Offer]:
    """One catalog offer per configured pool: $0, max_nodes = its host count.

    Raises ConfigError when config.yaml is malformed. Does not contact any host.
    """
    pools = load_config().ssh_node_pools
    if not pools:
        return []
    path = config_path()
    fetched_at = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat(timespec="seconds")
    offers = []
    for pool in pools.values():
        acc, count = next(iter(pool.gpus.items()), (None, 0))
        offers.append(
            Offer(
                cloud=CLOUD,
                region=pool.name,
                zone=None,
                instance_type=pool_instance_type(pool),
                accelerator=acc,
                accelerator_count=float(count),
                accelerator_memory_gib=None,
                vcpus=pool.cpus,
                memory_gib=pool.memory_gib,
                price=0.0,
                spot_price=None,
                fabric=pool.fabric,
                fabric_gbps=None,
                nvlink=None,
                max_nodes=len(pool.hosts),
                arch="x86_64",
                source=str(path),
                fetched_at=fetched_at,
            )
        )
    return offers


# ---- the cloud -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    host: SSHHost
    host_key: str
    error: str | None = None


class SSHCloud:
    """The Cloud protocol over SSH node pools. Thread-safe; processes coordinate via the lock."""

    name = CLOUD

    def __init__(self, options: SSHOptions | None = None) -> None:
        self._options = options

    # -- Cloud protocol --

    def check(self) -> CredentialStatus:
        """Enabled when at least one pool is configured (its identity file, if named,
        exists). Never raises."""
        from launcher.clouds.presence import ssh_pools_status

        return ssh_pools_status()

    def provision(self, req: ProvisionRequest) -> ClusterInfo:
        """Take `req.num_nodes` free, reachable hosts of pool `req.region`. All or nothing.

        Raises InvalidRequestError (unknown pool, spot asked, name already held, or a
        host presenting a key other than its pinned one when the pool falls short),
        CapacityError (too few free reachable hosts), AuthError (login refused).
        """
        pool = self._pool(req.region)
        if req.use_spot:
            raise InvalidRequestError(
                "SSH node pools have no spot market.", cloud=CLOUD, region=req.region
            )
        if req.num_nodes < 1:
            raise InvalidRequestError("num_nodes must be >= 1.", cloud=CLOUD, region=req.region)
        cluster_key = keys.ensure_cluster_key(req.cluster_name)
        key_path = pool.identity_file or keys.ensure_user_key().private_path
        store = PoolStateFile()
        busy = store.read().unavailable_hosts(time.time())
        if sum(h.address not in busy for h in pool.hosts) < req.num_nodes:
            release_answering(store, [pool])  # a lost host whose sshd is back counts again
        with store.locked() as state:
            if req.cluster_name in state.allocations:
                held = state.allocations[req.cluster_name]
                raise InvalidRequestError(
                    f"Cluster {req.cluster_name!r} already holds hosts of pool {held.pool!r}; "
                    "run `launcher down` on it first.",
                    cloud=CLOUD,
                    region=req.region,
                )
            free = [h for h in pool.hosts if h.address not in state.unavailable_hosts(time.time())]
            if len(free) < req.num_nodes:
                quarantined = sum(quarantine_active(e, time.time())
                                  for h, e in state.quarantine.items()
                                  if h in {x.address for x in pool.hosts})
                raise CapacityError(
                    f"Pool {pool.name!r} has {len(free)} free host(s) of {len(pool.hosts)}; "
                    f"{req.num_nodes} needed"
                    + (f" ({quarantined} quarantined after a loss: `launcher ssh pools` shows "
                       "why, `launcher ssh release` frees a fixed host)." if quarantined else "."),
                    cloud=CLOUD,
                    region=pool.name,
                )
            # recorded before any host is touched: `terminate` always finds what we hold
            state.allocations[req.cluster_name] = Allocation(
                req.cluster_name, pool.name, [], key_path
            )
        try:
            chosen = self._take_hosts(req, pool, key_path, store)
            nodes = self._nodes(chosen)
            with store.locked() as state:
                for cand in chosen:
                    state.host_keys.setdefault(cand.host.address, cand.host_key)
                state.allocations[req.cluster_name].nodes = nodes
            info = ClusterInfo(
                cluster_name=req.cluster_name,
                cloud=CLOUD,
                region=pool.name,
                zone=None,
                instance_type=pool_instance_type(pool),
                use_spot=False,
                nodes=tuple(nodes),
                ssh_key_path=key_path,
            )
            self._install_cluster_key(info, cluster_key)
        except BaseException:
            with contextlib.suppress(Exception):
                self.terminate(req.cluster_name)
            raise
        with store.locked() as state:
            state.allocations[req.cluster_name].ready = True
        return info

    def query(self, cluster: str) -> dict[str, NodeState]:
        """The pool's own view ({} if the cluster holds no hosts). This is the "cloud's
        view" for SSH pools (see `ssh_health`):

        RUNNING: the node answers an SSH command. TERMINATED: its sshd was unreachable
        (refused / no route / timeout) on every probe of the confirmation window (a
        confirmed loss). UNKNOWN: anything else, e.g. one failed probe (transient).
        SSH machines are never PREEMPTED. Blocks at most about the confirmation window
        plus the probe timeouts.
        """
        alloc = PoolStateFile().read().allocations.get(cluster)
        if alloc is None or not alloc.nodes:
            return {}
        info = self._cluster_info(alloc)
        settings = HealthSettings.from_env()

        def probe(node: NodeInfo) -> NodeState:
            runner = self._runner(info, node, quick=True)
            try:
                ok = runner.run("true", timeout=5).returncode == 0
            except LauncherError:
                ok = False
            finally:
                runner.close()
            if ok:
                return NodeState.RUNNING
            host = node.external_ip or node.internal_ip
            if confirmed_unreachable(host, node.ssh_port, settings):
                return NodeState.TERMINATED
            return NodeState.UNKNOWN

        with ThreadPoolExecutor(min(_MAX_PARALLEL, len(alloc.nodes))) as ex:
            states = list(ex.map(probe, alloc.nodes))
        return {n.node_id: s for n, s in zip(alloc.nodes, states, strict=True)}

    def terminate(self, cluster: str) -> None:
        """Stop the cluster's processes on its hosts, remove its keys, free the hosts.

        Best effort on each host (bounded by SSH timeouts). An unreachable host is freed
        too, but marked so the next cluster that takes it cleans it first. Idempotent: an
        unknown cluster is a no-op.
        """
        store = PoolStateFile()
        alloc = store.read().allocations.get(cluster)
        if alloc is not None and alloc.nodes:
            info = self._cluster_info(alloc)
            script = _cleanup_script(cluster)

            def clean(node: NodeInfo) -> str | None:
                """The host address when its cleanup could not run (unreachable)."""
                runner = self._runner(info, node, quick=True)
                try:
                    runner.run(script, timeout=20)
                except LauncherError:
                    return node.node_id
                finally:
                    runner.close()
                return None

            with ThreadPoolExecutor(min(_MAX_PARALLEL, len(alloc.nodes))) as ex:
                dirty = [h for h in ex.map(clean, alloc.nodes) if h]
        else:
            dirty = []
        with store.locked() as state:
            state.allocations.pop(cluster, None)
            now = time.time()
            for host in dirty:
                if state.quarantine.get(host, {}).get("health"):
                    continue  # excluded by the health watch: stays out (exclude_hosts)
                # Free at once, but remembered: the next cluster to take the host first stops
                # what this one may have left running there (see _clean_reused).
                state.quarantine[host] = {"cluster": cluster, "since": now, "until": now,
                                          "reason": "cleanup at down could not reach the host"}
        keys.remove_cluster_key(cluster)

    def exclude_hosts(self, cluster: str, node_ids: tuple[str, ...], reason: str) -> list[str]:
        """Quarantine the cluster's hosts `node_ids` (addresses) because they failed the
        health watch: unlike a lost host's quarantine, a reachable sshd does not end it;
        only `launcher ssh release` does (the user fixed the GPU). The hosts stay in the
        cluster's allocation until `replace_nodes` or `terminate`. Returns the hosts."""
        store = PoolStateFile()
        now = time.time()
        with store.locked() as state:
            alloc = state.allocations.get(cluster)
            held = set(alloc.hosts) if alloc is not None else set()
            hosts = [h for h in node_ids if h in held]
            for host in hosts:
                state.quarantine[host] = {"cluster": cluster, "since": now,
                                          "until": _HEALTH_QUARANTINE_UNTIL, "health": True,
                                          "reason": reason}
        return hosts

    def replace_nodes(self, cluster: str, lost: tuple[str, ...]) -> ClusterInfo:
        """Replace the cluster's `lost` nodes (node ids = host addresses) with free hosts of
        its pool, keeping every other node at its rank.

        The lost hosts are quarantined (see `ssh_health`) and leave the allocation once
        replacements are in. The survivors are cleaned of the cluster's processes and
        runtime directories (the old gang and agent): the caller brings the runtime up
        afresh on every node and restarts the gang. Raises CapacityError when the pool
        has too few free reachable hosts (the cluster then keeps its hosts, the lost
        ones quarantined), InvalidRequestError when the cluster holds no hosts.
        """
        store = PoolStateFile()
        settings = HealthSettings.from_env()
        now = time.time()
        with store.locked() as state:
            alloc = state.allocations.get(cluster)
            if alloc is None or not alloc.nodes:
                raise InvalidRequestError(f"Cluster {cluster!r} holds no hosts.", cloud=CLOUD)
            gone = {n.node_id for n in alloc.nodes if n.node_id in set(lost)}
            for host in gone:
                if state.quarantine.get(host, {}).get("health"):
                    continue  # excluded by the health watch: stays out (exclude_hosts)
                state.quarantine[host] = {
                    "cluster": cluster, "since": now, "until": now + settings.quarantine_s,
                    "reason": "sshd unreachable on every probe (confirmed lost)",
                }
            held = tuple(alloc.hosts)
            old_nodes = list(alloc.nodes)
        pool = self._pool(alloc.pool)
        if not gone:
            return self._cluster_info(alloc)
        req = ProvisionRequest(
            cluster_name=cluster, cloud=CLOUD, region=pool.name, zone=None,
            instance_type=pool_instance_type(pool), num_nodes=len(gone), use_spot=False,
        )
        try:
            chosen = self._take_hosts(req, pool, alloc.key_path, store, keep=held)
        except BaseException:
            with store.locked() as state:
                if cluster in state.allocations:
                    state.allocations[cluster].hosts = list(held)
            raise
        fresh = iter(self._nodes(chosen))
        nodes = [
            dataclasses.replace(next(fresh), rank=n.rank) if n.node_id in gone else n
            for n in old_nodes
        ]
        info = dataclasses.replace(self._cluster_info(alloc), nodes=tuple(nodes))
        script = _cleanup_script(cluster)

        def clean(node: NodeInfo) -> None:
            runner = self._runner(info, node, quick=True)
            try:
                runner.run(script, timeout=20)
            finally:
                runner.close()

        survivors = [n for n in nodes if n.node_id not in gone and n.node_id in held]
        if survivors:
            with ThreadPoolExecutor(min(_MAX_PARALLEL, len(survivors))) as ex:
                list(ex.map(clean, survivors))
        with store.locked() as state:
            for cand in chosen:
                state.host_keys.setdefault(cand.host.address, cand.host_key)
            a = state.allocations[cluster]
            a.hosts = [n.node_id for n in nodes]
            a.nodes = nodes
        self._install_cluster_key(info, keys.ensure_cluster_key(cluster))
        return info

    # -- helpers --

    def cluster_info(self, cluster: str) -> ClusterInfo | None:
        """The ClusterInfo of a cluster this cloud holds hosts for (None if it holds none)."""
        alloc = PoolStateFile().read().allocations.get(cluster)
        return self._cluster_info(alloc) if alloc and alloc.nodes else None

    def _cluster_info(self, alloc: Allocation) -> ClusterInfo:
        return ClusterInfo(
            cluster_name=alloc.cluster,
            cloud=CLOUD,
            region=alloc.pool,
            zone=None,
            instance_type=f"{alloc.pool}-host",
            use_spot=False,
            nodes=tuple(alloc.nodes),
            ssh_key_path=alloc.key_path,
        )

    def _pool(self, name: str) -> SSHNodePool:
        pools = load_config().ssh_node_pools
        if name not in pools:
            known = ", ".join(sorted(pools)) or "none configured"
            raise InvalidRequestError(
                f"No SSH node pool named {name!r} in {config_path()} (pools: {known}).",
                cloud=CLOUD,
                region=name,
            )
        return pools[name]

    def _runner(self, info: ClusterInfo, node: NodeInfo, *, quick: bool = False) -> SSHRunner:
        from launcher.runtime.ssh_runner import SSHOptions, SSHRunner

        opts = self._options or SSHOptions()
        if quick and self._options is None:
            # a dead host fails the connect (5 s); one that connects is alive, and a loaded
            # sshd may take longer than that to send its banner: it gets 15 s
            opts = SSHOptions(connect_timeout=5, banner_timeout=15, auth_timeout=5, probe_timeout=3)
        return SSHRunner(node, key_path=info.ssh_key_path, options=opts)

    def _take_hosts(
        self,
        req: ProvisionRequest,
        pool: SSHNodePool,
        key_path: str,
        store: PoolStateFile,
        keep: tuple[str, ...] = (),
    ) -> list[_Candidate]:
        """Hold free hosts (pool order) and check them until enough answer; learn their keys.

        Hosts that fail are handed back. `keep`: hosts the allocation already holds and
        keeps (node replacement). Raises CapacityError / AuthError.
        """
        chosen: list[_Candidate] = []
        failures: list[str] = []
        auth_failures: list[str] = []
        key_failures: list[str] = []
        tried: set[str] = set()
        while len(chosen) < req.num_nodes:
            need = req.num_nodes - len(chosen)
            with store.locked() as state:
                alloc = state.allocations[req.cluster_name]
                held = state.unavailable_hosts(time.time())
                batch = [h for h in pool.hosts if h.address not in held | tried][:need]
                alloc.hosts.extend(h.address for h in batch)
                known_keys = dict(state.host_keys)
            if not batch:
                break
            tried.update(h.address for h in batch)
            with ThreadPoolExecutor(min(_MAX_PARALLEL, len(batch))) as ex:
                results = list(
                    ex.map(self._contact, batch, [known_keys] * len(batch), [key_path] * len(batch))
                )
            bad = []
            for cand in results:
                if cand.error is None:
                    chosen.append(cand)
                    continue
                bad.append(cand.host.address)
                if cand.error.startswith("auth:"):
                    auth_failures.append(cand.error[5:])
                elif cand.error.startswith("hostkey:"):
                    key_failures.append(cand.error[8:])
                else:
                    failures.append(cand.error)
            if bad:
                with store.locked() as state:
                    alloc = state.allocations[req.cluster_name]
                    alloc.hosts = [a for a in alloc.hosts if a not in bad]
        if len(chosen) < req.num_nodes:
            if key_failures:
                # A changed host key needs a person (reinstalled machine, or an attack):
                # trying other places would only hide it.
                raise InvalidRequestError(
                    f"Pool {pool.name!r}: only {len(chosen)} of the {req.num_nodes} hosts needed "
                    "are usable, and these refused on their host key: " + "; ".join(key_failures),
                    cloud=CLOUD, region=pool.name,
                )
            if auth_failures and not failures:
                raise AuthError(
                    "SSH login refused: " + "; ".join(auth_failures), cloud=CLOUD, region=pool.name
                )
            raise CapacityError(
                f"Pool {pool.name!r}: only {len(chosen)} of the {req.num_nodes} hosts needed are "
                "free and usable"
                + (
                    ": " + "; ".join(failures + auth_failures) if failures or auth_failures else "."
                ),
                cloud=CLOUD,
                region=pool.name,
            )
        # rank order = pool order of the chosen hosts
        order = {h.address: i for i, h in enumerate(pool.hosts)}
        chosen.sort(key=lambda c: order[c.host.address])
        with store.locked() as state:
            state.allocations[req.cluster_name].hosts = [*keep, *(c.host.address for c in chosen)]
        self._clean_reused(chosen, store, key_path)
        return chosen

    def _clean_reused(self, chosen: list[_Candidate], store: PoolStateFile, key_path: str) -> None:
        """Hosts that come back from quarantine may still run the processes of the cluster
        that lost them (a network cut): stop those before the host is used again."""
        entries = store.read().quarantine
        for cand in chosen:
            entry = entries.get(cand.host.address)
            if entry is None:
                continue
            old = str(entry.get("cluster") or "")
            node = self._nodes([cand])[0]
            info = ClusterInfo(old, CLOUD, "", None, "", False, (node,), key_path)
            runner = self._runner(info, node, quick=True)
            try:
                if old:
                    runner.run(_cleanup_script(old), timeout=20)
            except LauncherError:
                pass
            finally:
                runner.close()
            with store.locked() as state:
                state.quarantine.pop(cand.host.address, None)

    def _contact(self, host: SSHHost, known_keys: dict[str, str], key_path: str) -> _Candidate:
        """Learn or verify the host key, then log in once. Never raises."""
        from launcher.runtime.ssh_runner import HostKeyMismatchError, SSHRunner, scan_host_key

        opts = self._options
        timeout = opts.connect_timeout if opts else 10.0
        pinned = host.host_key or known_keys.get(host.address)
        try:
            host_key = pinned or scan_host_key(host.host, host.port, timeout=timeout)
        except NodeUnreachableError as exc:
            return _Candidate(host, "", f"{host.address}: {exc}")
        node = NodeInfo(
            rank=0,
            node_id=host.address,
            internal_ip=host.host,
            ssh_user=host.user,
            ssh_port=host.port,
            ssh_host_key=host_key,
        )
        runner = SSHRunner(node, key_path=key_path, **({"options": opts} if opts else {}))
        try:
            runner.connect()
        except HostKeyMismatchError as exc:
            where = "config.yaml" if host.host_key else f"{PoolStateFile().path} (host_keys)"
            return _Candidate(
                host, host_key, f"hostkey:{host.address}: {exc} The pinned key comes from {where}."
            )
        except NodeUnreachableError as exc:
            prefix = "auth:" if "authentication" in str(exc) else ""
            return _Candidate(host, host_key, f"{prefix}{host.address}: {exc}")
        finally:
            runner.close()
        return _Candidate(host, host_key)

    def _nodes(self, chosen: list[_Candidate]) -> list[NodeInfo]:
        nodes = []
        for rank, cand in enumerate(chosen):
            h = cand.host
            nodes.append(
                NodeInfo(
                    rank=rank,
                    node_id=h.address,
                    internal_ip=_resolve(h.host),
                    external_ip=h.host,
                    ssh_user=h.user,
                    ssh_port=h.port,
                    ssh_host_key=cand.host_key,
                )
            )
        return nodes

    def _install_cluster_key(self, info: ClusterInfo, pair: keys.KeyPair) -> None:
        """Authorize the cluster key on every node; private key + known_hosts on the head."""
        name = info.cluster_name
        marker = keys.cluster_key_comment(name)
        public = pair.public_key()
        known_hosts = "".join(
            f"{_known_hosts_name(n.internal_ip, n.ssh_port)} {n.ssh_host_key}\n"
            for n in info.nodes
            if n.ssh_host_key
        )
        # drop keys of earlier clusters on this host (a host has one cluster at a time)
        authorize = (
            "set -e; umask 077; mkdir -p ~/.ssh; touch ~/.ssh/authorized_keys; "
            "grep -v ' launcher-cluster:' ~/.ssh/authorized_keys > ~/.ssh/.ak.launcher || true; "
            f"printf '%s\\n' {_sq(public)} >> ~/.ssh/.ak.launcher; "
            "mv -f ~/.ssh/.ak.launcher ~/.ssh/authorized_keys"
        )
        assert marker in public

        def install(node: NodeInfo) -> None:
            runner = self._runner(info, node)
            try:
                runner.run(authorize, timeout=30).check(
                    f"Authorizing the cluster key on {node.node_id}"
                )
                if node.rank == 0:
                    runner.put_text(pair.private_key(), keys.head_internal_key_path(name), 0o600)
                    runner.put_text(known_hosts, keys.head_known_hosts_path(name), 0o644)
            finally:
                runner.close()

        with ThreadPoolExecutor(min(_MAX_PARALLEL, len(info.nodes))) as ex:
            list(ex.map(install, info.nodes))


def _sq(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _resolve(host: str) -> str:
    """An IPv4 address for `host` (itself when it already is one, or when it doesn't resolve)."""
    try:
        socket.inet_aton(host)
        return host
    except OSError:
        pass
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET)[0][4][0]  # type: ignore[return-value]
    except OSError:
        return host


# Run on a node by `terminate` (python3 -c KILLER CLUSTER DIR...): SIGTERM, then SIGKILL,
# every process of this user in this network namespace that belongs to the cluster:
# its environment has LAUNCHER_CLUSTER_NAME=<cluster> or a LAUNCHER_CLUSTER_INFO naming
# it (every job), or its command line runs from one of the cluster's directories on the
# node (the agent daemon, setup scripts). The namespace check keeps it from touching
# other nodes' processes when several "nodes" share one kernel (tests); it never kills
# its own ancestors.
_KILLER = r"""
import json, os, signal, sys, time
cluster, dirs = sys.argv[1], [os.path.expanduser(d).rstrip("/") + "/" for d in sys.argv[2:]]
def ns(pid):
    try:
        return os.readlink("/proc/%s/ns/net" % pid)
    except OSError:
        return None
mine, uid = ns("self"), os.getuid()
spare, pid = set(), os.getpid()
while pid > 1:
    spare.add(pid)
    try:
        pid = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        break
def belongs(p):
    if os.stat("/proc/" + p).st_uid != uid or ns(p) != mine:
        return False
    for e in open("/proc/%s/environ" % p, "rb").read().split(b"\0"):
        if e == b"LAUNCHER_CLUSTER_NAME=" + cluster.encode():
            return True
        if e.startswith(b"LAUNCHER_CLUSTER_INFO="):
            try:
                if json.loads(e[22:]).get("cluster_name") == cluster:
                    return True
            except (ValueError, AttributeError):
                pass
    argv = open("/proc/%s/cmdline" % p, "rb").read().decode("utf-8", "replace").split("\0")
    return any(a.startswith(d) for a in argv for d in dirs)
def victims():
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) not in spare:
            try:
                if belongs(p):
                    out.append(int(p))
            except OSError:
                pass
    return out
for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 0.0)):
    pids = victims()
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    end = time.time() + grace
    while pids and time.time() < end and victims():
        time.sleep(0.05)  # other processes' exits cannot be waited on
"""

# Directories the runtime keeps on nodes (tests check these against the runtime's
# own constants): the agent's home, the setup scripts, this cloud's key directory.
NODE_RUNTIME_DIRS = ("~/.launcher-agent", "~/.launcher-setup")


def _cleanup_script(cluster: str) -> str:
    """Shell for one node: stop the cluster's processes, drop its key and its runtime dirs."""
    marker = keys.cluster_key_comment(cluster)
    dirs = (*NODE_RUNTIME_DIRS, keys.head_cluster_dir(cluster))
    rm = " ".join(shell_path(d) for d in dirs)
    return (
        f"command -v python3 >/dev/null && python3 -c {_sq(_KILLER)} {_sq(cluster)} "
        + " ".join(_sq(d) for d in dirs)
        + "; if [ -f ~/.ssh/authorized_keys ]; then "
        f"grep -vE {_sq(' ' + marker.replace('.', '[.]') + '$')} ~/.ssh/authorized_keys "
        "> ~/.ssh/.ak.launcher; "
        "mv -f ~/.ssh/.ak.launcher ~/.ssh/authorized_keys; fi; "
        f"rm -rf {rm}"
    )
