"""The `ssh` cloud: config parsing, offers, and provisioning on real sshd nodes."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    ClusterInfo,
    InvalidRequestError,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.ssh import NODE_RUNTIME_DIRS, SSHCloud, ssh_offers
from launcher.config.settings import load_config, parse_config
from launcher.errors import ConfigError
from launcher.runtime import keys
from launcher.runtime.node_runner import runner_for
from tests.netns import SSHNodeSet

# ---- config --------------------------------------------------------------------------


def _write_config(home: Path, pools: dict[str, object]) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"ssh_node_pools": pools}))


def test_config_parses_pools_with_per_host_overrides(launcher_home: Path) -> None:
    _write_config(
        launcher_home,
        {
            "lab": {
                "user": "root",
                "identity_file": "~/.ssh/id_lab",
                "gpus": {"H100": 8},
                "checkpoint_dir": "/shared/ckpt",
                "hosts": ["10.0.0.11", {"host": "10.0.0.12", "port": 2222, "user": "ubuntu"}],
            }
        },
    )
    pool = load_config().ssh_node_pools["lab"]
    assert [(h.host, h.port, h.user) for h in pool.hosts] == [
        ("10.0.0.11", 22, "root"),
        ("10.0.0.12", 2222, "ubuntu"),
    ]
    assert pool.identity_file == os.path.expanduser("~/.ssh/id_lab")
    assert pool.gpus == {"H100": 8} and pool.checkpoint_dir == "/shared/ckpt"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user": "r", "hosts": [{"host": "h", "port": "x"}]}, "ssh_node_pools.p.hosts[0].port"),
        ({"user": "r", "hosts": ["h"], "colour": 1}, "ssh_node_pools.p.colour"),
        ({"user": "r", "hosts": []}, "ssh_node_pools.p.hosts"),
        ({"hosts": ["h"]}, "ssh_node_pools.p.user"),
        ({"user": "r", "hosts": ["h", "h"]}, "ssh_node_pools.p.hosts[1]"),
        ({"user": "r", "hosts": ["h"], "gpus": {"H100": 0}}, "ssh_node_pools.p.gpus.H100"),
        ({"user": "r", "hosts": ["h"], "fabric": "carrier-pigeon"}, "ssh_node_pools.p.fabric"),
        ({"user": "r", "hosts": [{"port": 22}]}, "ssh_node_pools.p.hosts[0].host"),
    ],
)
def test_config_errors_name_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"field '{field}'")):
        parse_config(yaml.safe_dump({"ssh_node_pools": {"p": body}}))


def test_config_unknown_section_and_bad_yaml() -> None:
    with pytest.raises(ConfigError, match="field 'ssh_pools': unknown field"):
        parse_config("ssh_pools: {}\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_config("ssh_node_pools: [\n")


def test_no_config_means_ssh_disabled_and_no_offers() -> None:
    status = SSHCloud().check()
    assert not status.enabled and "ssh_node_pools" in status.reason
    assert ssh_offers() == []


def test_a_pool_whose_identity_file_is_missing_is_not_usable(launcher_home: Path,
                                                             tmp_path: Path) -> None:
    key = tmp_path / "id_test"
    _write_config(launcher_home, {"lab": {"user": "root", "hosts": ["a"],
                                          "identity_file": str(key)}})
    status = SSHCloud().check()
    assert not status.enabled and f"identity_file {key} does not exist" in status.reason
    key.write_text("not really a key")
    assert SSHCloud().check().enabled


def test_offers_one_free_row_per_pool(launcher_home: Path) -> None:
    _write_config(
        launcher_home,
        {
            "lab": {
                "user": "root",
                "gpus": {"H100": 8},
                "fabric": "infiniband",
                "hosts": ["a", "b"],
            },
            "cpu": {"user": "root", "cpus": 32, "memory_gib": 128, "hosts": ["c"]},
        },
    )
    offers = {o.region: o for o in ssh_offers()}
    lab, cpu = offers["lab"], offers["cpu"]
    assert (lab.cloud, lab.zone, lab.price, lab.spot_price) == ("ssh", None, 0.0, None)
    assert (lab.accelerator, lab.accelerator_count, lab.max_nodes) == ("H100", 8.0, 2)
    assert lab.fabric == "infiniband"
    assert (cpu.accelerator, cpu.accelerator_count, cpu.vcpus, cpu.memory_gib) == (
        None,
        0.0,
        32.0,
        128.0,
    )
    assert SSHCloud().check().enabled


def test_node_runtime_dirs_match_the_runtime() -> None:
    """terminate() cleans the directories the agent and setup really use."""
    from launcher.runtime.agent_client import AGENT_DIR
    from launcher.runtime.execution import SETUP_DIR

    assert set(NODE_RUNTIME_DIRS) == {AGENT_DIR, f"~/{SETUP_DIR}"}


# ---- on real sshd nodes --------------------------------------------------------------


@pytest.fixture(scope="module")
def pool_nodes(ssh_nodes: Callable[[int], SSHNodeSet]) -> Iterator[SSHNodeSet]:
    nodes = ssh_nodes(4)
    yield nodes
    nodes.close()


@pytest.fixture
def lab(launcher_home: Path, pool_nodes: SSHNodeSet) -> Iterator[SSHNodeSet]:
    """Pool `lab` = the 4 nodes; every test starts with clean node homes."""
    for node in pool_nodes:
        ak = node.home / ".ssh" / "authorized_keys"
        ak.write_text(pool_nodes.lab.client_public_key + "\n")
    _write_config(
        launcher_home,
        {
            "lab": {
                "user": "root",
                "identity_file": pool_nodes.client_key_path,
                "gpus": {"A100": 1},
                "hosts": [{"host": n.host, "port": n.port} for n in pool_nodes],
            }
        },
    )
    yield pool_nodes
    state = launcher_home / "ssh_pools.json"
    if state.exists():
        for name in json.loads(state.read_text())["allocations"]:
            SSHCloud().terminate(name)


# exit 0 if the process is running (a killed orphan may linger as a zombie: not running)
_ALIVE = (
    's=$(cut -d\' \' -f3 /proc/$(cat {pidfile})/stat 2>/dev/null); [ -n "$s" ] && [ "$s" != Z ]'
)


def _req(name: str, n: int, pool: str = "lab") -> ProvisionRequest:
    return ProvisionRequest(name, "ssh", pool, None, f"{pool}-host", n, False)


def _hosts(info: ClusterInfo) -> set[str]:
    return {n.node_id for n in info.nodes}


def test_provision_pins_host_keys_and_installs_the_cluster_key(
    lab: SSHNodeSet, launcher_home: Path
) -> None:
    cloud = SSHCloud()
    info = cloud.provision(_req("c1", 2))
    by_addr = {f"{n.host}:{n.port}": n for n in lab}
    assert [n.rank for n in info.nodes] == [0, 1]
    assert info.cloud == "ssh" and info.region == "lab" and info.zone is None
    for node in info.nodes:
        assert node.ssh_host_key == by_addr[node.node_id].host_key  # learnt, then pinned
        assert node.internal_ip == by_addr[node.node_id].host
    recorded = json.loads((launcher_home / "ssh_pools.json").read_text())
    assert recorded["allocations"]["c1"]["ready"] is True
    assert recorded["host_keys"] == {n.node_id: n.ssh_host_key for n in info.nodes}

    # the cluster-internal key: local copy 0600 in a 0700 dir
    pair = keys.ensure_cluster_key("c1")
    assert stat.S_IMODE(os.stat(pair.private_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(pair.private_path)).st_mode) == 0o700
    head, worker = (by_addr[n.node_id] for n in info.nodes)
    for sshd_node in (head, worker):
        assert pair.public_key() in (sshd_node.home / ".ssh" / "authorized_keys").read_text()
    head_key = head.home / ".launcher" / "clusters" / "c1" / "id_ed25519"
    assert head_key.read_text() == pair.private_key()
    assert stat.S_IMODE(head_key.stat().st_mode) == 0o600
    assert not (worker.home / ".launcher" / "clusters" / "c1" / "id_ed25519").exists()

    # the head reaches the worker with the internal key and pinned host keys only
    head_runner = runner_for(info, info.nodes[0])
    res = head_runner.run(
        f"ssh -T -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=5 "
        f"-o UserKnownHostsFile={keys.head_known_hosts_path('c1')} "
        f"-i {keys.head_internal_key_path('c1')} root@{worker.host} hostname",
        timeout=20,
    )
    head_runner.close()
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == worker.hostname


def test_private_user_keys_never_reach_the_nodes(lab: SSHNodeSet, launcher_home: Path) -> None:
    user_key = keys.ensure_user_key()  # exists, like on any machine that launched before
    info = SSHCloud().provision(_req("nokeys", 3))
    secrets = [
        Path(lab.client_key_path).read_text().strip(),
        Path(user_key.private_path).read_text().strip(),
    ]
    cluster_private = keys.ensure_cluster_key("nokeys").private_key().strip()
    for node in lab:
        for path in node.home.rglob("*"):
            if path.is_file():
                text = path.read_text(errors="replace")
                assert not any(s in text for s in secrets), path
                if cluster_private in text:  # only the head holds the internal key
                    assert node.host == info.nodes[0].internal_ip, path


def test_clusters_from_one_pool_get_disjoint_hosts_and_capacity_runs_out(lab: SSHNodeSet) -> None:
    cloud = SSHCloud()
    results: dict[str, ClusterInfo] = {}

    def take(name: str) -> None:
        results[name] = cloud.provision(_req(name, 2))

    threads = [threading.Thread(target=take, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _hosts(results["a"]).isdisjoint(_hosts(results["b"]))
    assert len(_hosts(results["a"]) | _hosts(results["b"])) == 4
    with pytest.raises(CapacityError, match="0 free host"):
        cloud.provision(_req("c", 1))
    cloud.terminate("a")
    c = cloud.provision(_req("c", 2))  # the hosts came back
    assert _hosts(c) == _hosts(results["a"])


def test_unknown_pool_spot_and_duplicate_names_are_invalid(lab: SSHNodeSet) -> None:
    cloud = SSHCloud()
    with pytest.raises(InvalidRequestError, match="No SSH node pool named 'nope'"):
        cloud.provision(_req("x", 1, pool="nope"))
    with pytest.raises(InvalidRequestError, match="no spot market"):
        cloud.provision(ProvisionRequest("x", "ssh", "lab", None, "lab-host", 1, True))
    cloud.provision(_req("dup", 1))
    with pytest.raises(InvalidRequestError, match="already holds hosts"):
        cloud.provision(_req("dup", 1))


def test_terminate_stops_cluster_processes_removes_keys_and_is_idempotent(
    lab: SSHNodeSet, launcher_home: Path
) -> None:
    cloud = SSHCloud()
    info = cloud.provision(_req("term", 2))
    runners = [runner_for(info, n) for n in info.nodes]
    # a job process of this cluster, a fake agent daemon, and a process of someone else
    for r in runners:
        r.run(
            "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > ~/job.pid",
            env={"LAUNCHER_CLUSTER_INFO": json.dumps({"cluster_name": "term", "cloud": "ssh"})},
        ).check()
        r.run(
            "mkdir -p ~/.launcher-agent && cp /bin/sleep ~/.launcher-agent/agentd && "
            "(setsid ~/.launcher-agent/agentd 300 </dev/null >/dev/null 2>&1 & echo $! > ~/agent.pid)"
        ).check()
        r.run(
            "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > ~/other.pid",
            env={"LAUNCHER_CLUSTER_NAME": "someone-else"},
        ).check()
    assert cloud.query("term") == {n.node_id: NodeState.RUNNING for n in info.nodes}
    start = time.monotonic()
    cloud.terminate("term")
    assert time.monotonic() - start < 10
    for r in runners:
        assert not r.run(_ALIVE.format(pidfile="~/job.pid")).ok
        assert not r.run(_ALIVE.format(pidfile="~/agent.pid")).ok
        assert r.run(_ALIVE.format(pidfile="~/other.pid")).ok
        r.run("kill $(cat ~/other.pid)")
        assert "launcher-cluster:term" not in r.run("cat ~/.ssh/authorized_keys").stdout
        assert not r.run("test -e ~/.launcher/clusters/term || test -e ~/.launcher-agent").ok
        r.close()
    assert not Path(keys.keys_dir() / "clusters" / "term").exists()
    assert cloud.query("term") == {}
    cloud.terminate("term")  # idempotent
    cloud.terminate("never-existed")
    assert json.loads((launcher_home / "ssh_pools.json").read_text())["allocations"] == {}


def test_a_host_down_could_not_clean_is_cleaned_before_its_next_cluster(
    lab: SSHNodeSet, launcher_home: Path, pool_nodes: SSHNodeSet
) -> None:
    cloud = SSHCloud()
    info = cloud.provision(_req("dirty", 1))
    node = next(n for n in pool_nodes if f"{n.host}:{n.port}" == info.nodes[0].node_id)
    r = runner_for(info, info.nodes[0])
    r.run(
        "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > ~/job.pid",
        env={"LAUNCHER_CLUSTER_INFO": json.dumps({"cluster_name": "dirty", "cloud": "ssh"})},
    ).check()
    r.close()
    node.cut_network()
    try:
        cloud.terminate("dirty")  # cannot reach the host: frees it, but remembers it
    finally:
        node.restore_network()
    state = json.loads((launcher_home / "ssh_pools.json").read_text())
    assert state["allocations"] == {}
    entry = state["quarantine"][info.nodes[0].node_id]
    assert entry["cluster"] == "dirty" and entry["until"] <= time.time()  # not blocking
    nxt = cloud.provision(_req("next", 1))  # pool order: the same host again
    assert nxt.nodes[0].node_id == info.nodes[0].node_id
    r2 = runner_for(nxt, nxt.nodes[0])
    assert not r2.run(_ALIVE.format(pidfile="~/job.pid")).ok  # the leftover was stopped
    r2.close()
    state = json.loads((launcher_home / "ssh_pools.json").read_text())
    assert info.nodes[0].node_id not in state["quarantine"]


def test_unusable_hosts_are_skipped_and_reported(
    lab: SSHNodeSet, launcher_home: Path, pool_nodes: SSHNodeSet
) -> None:
    n0 = pool_nodes[0]
    # first host: nothing listens there (connection refused); second: fine
    _write_config(
        launcher_home,
        {
            "two": {
                "user": "root",
                "identity_file": pool_nodes.client_key_path,
                "hosts": [{"host": n0.host, "port": 2201}, {"host": n0.host, "port": n0.port}],
            }
        },
    )
    cloud = SSHCloud()
    info = cloud.provision(_req("skip", 1, pool="two"))
    assert [n.node_id for n in info.nodes] == [f"{n0.host}:{n0.port}"]
    cloud.terminate("skip")
    with pytest.raises(CapacityError, match="Connection refused") as err:
        cloud.provision(_req("both", 2, pool="two"))
    assert "only 1 of the 2" in str(err.value)
    assert json.loads((launcher_home / "ssh_pools.json").read_text())["allocations"] == {}


def test_a_changed_host_key_is_refused(lab: SSHNodeSet, launcher_home: Path) -> None:
    cloud = SSHCloud()
    info = cloud.provision(_req("first", 1))
    cloud.terminate("first")
    # the host now presents another key (simulated: the record holds a different one)
    state_path = launcher_home / "ssh_pools.json"
    state = json.loads(state_path.read_text())
    state["host_keys"] = {
        f"{n.host}:{n.port}": lab[(i + 1) % 4].host_key for i, n in enumerate(lab)
    }
    state_path.write_text(json.dumps(state))
    with pytest.raises(InvalidRequestError, match="does not match the key pinned") as err:
        cloud.provision(_req("second", 1))
    assert str(err.value).count("does not match the key pinned") == 4  # every host tried, each named once
    assert info.nodes[0].ssh_host_key != state["host_keys"][info.nodes[0].node_id]
    assert json.loads(state_path.read_text())["allocations"] == {}


def test_login_refused_everywhere_is_an_auth_error(
    lab: SSHNodeSet, launcher_home: Path, tmp_path: Path
) -> None:
    other = keys.generate_keypair(tmp_path / "not_authorized")
    _write_config(
        launcher_home,
        {
            "lab": {
                "user": "root",
                "identity_file": other.private_path,
                "hosts": [{"host": n.host, "port": n.port} for n in lab],
            }
        },
    )
    with pytest.raises(AuthError, match="authentication"):
        SSHCloud().provision(_req("auth", 1))


def test_query_confirms_a_lost_node_never_preempted(
    ssh_nodes: Callable[[int], SSHNodeSet], launcher_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAUNCHER_SSH_LOST_CONFIRM_S", "1")
    nodes = ssh_nodes(2)
    try:
        _write_config(
            launcher_home,
            {
                "q": {
                    "user": "root",
                    "identity_file": nodes.client_key_path,
                    "hosts": [{"host": n.host, "port": n.port} for n in nodes],
                }
            },
        )
        cloud = SSHCloud()
        info = cloud.provision(_req("q", 2, pool="q"))
        assert set(cloud.query("q").values()) == {NodeState.RUNNING}
        nodes[1].kill()  # sshd gone: refused on every probe of the window = lost
        start = time.monotonic()
        states = cloud.query("q")
        assert time.monotonic() - start < 8
        assert states == {
            info.nodes[0].node_id: NodeState.RUNNING,
            info.nodes[1].node_id: NodeState.TERMINATED,
        }
        start = time.monotonic()
        cloud.terminate("q")  # best effort: the lost node does not block it
        assert time.monotonic() - start < 10
        assert cloud.query("q") == {}
    finally:
        nodes.close()


def test_one_failed_probe_is_not_a_loss() -> None:
    """A host whose sshd comes back within the confirmation window is not lost."""
    import socket

    from launcher.clouds.ssh_health import HealthSettings, confirmed_unreachable

    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens yet: connection refused
    settings = HealthSettings(confirm_s=2.0, probes=3)
    assert confirmed_unreachable("127.0.0.1", port, HealthSettings(confirm_s=0.2, probes=2))
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    stop = threading.Event()

    def sshd_comes_back() -> None:
        server.bind(("127.0.0.1", port))
        server.listen()
        while not stop.is_set():
            server.settimeout(0.2)
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"SSH-2.0-test\r\n")
            conn.close()

    timer = threading.Timer(0.3, sshd_comes_back)
    timer.start()
    try:
        assert not confirmed_unreachable("127.0.0.1", port, settings)
    finally:
        stop.set()
        timer.join()
        server.close()


def test_replace_nodes_takes_a_spare_keeps_survivors_and_quarantines_the_lost_host(
    ssh_nodes: Callable[[int], SSHNodeSet], launcher_home: Path
) -> None:
    nodes = ssh_nodes(3)
    try:
        _write_config(
            launcher_home,
            {
                "r": {
                    "user": "root",
                    "identity_file": nodes.client_key_path,
                    "hosts": [{"host": n.host, "port": n.port} for n in nodes],
                }
            },
        )
        cloud = SSHCloud()
        info = cloud.provision(_req("rc", 2, pool="r"))
        lost = info.nodes[1].node_id
        nodes[1].kill()
        new = cloud.replace_nodes("rc", (lost,))
        assert new.nodes[0] == info.nodes[0]  # the survivor kept its host and rank
        assert new.nodes[1].rank == 1 and new.nodes[1].node_id == f"{nodes[2].host}:{nodes[2].port}"
        state = json.loads((launcher_home / "ssh_pools.json").read_text())
        assert lost in state["quarantine"] and state["allocations"]["rc"]["hosts"] == [
            n.node_id for n in new.nodes]
        # the cluster key works to the new node from the head (the gang can start)
        head = runner_for(new, new.nodes[0])
        try:
            r = head.run(f"ssh -T -o BatchMode=yes -o StrictHostKeyChecking=yes "
                         f"-o ConnectTimeout=5 -o UserKnownHostsFile="
                         f"{keys.head_known_hosts_path('rc')} -i {keys.head_internal_key_path('rc')}"
                         f" -p {new.nodes[1].ssh_port} root@{new.nodes[1].internal_ip} true",
                         timeout=20)
        finally:
            head.close()
        assert r.returncode == 0, r
        # no spare left (the lost host is quarantined, not free): replacing again fails
        with pytest.raises(CapacityError):
            cloud.replace_nodes("rc", (new.nodes[1].node_id,))
        with pytest.raises(CapacityError):
            cloud.provision(_req("other", 1, pool="r"))
        cloud.terminate("rc")
    finally:
        nodes.close()


def test_a_quarantined_host_whose_sshd_is_back_is_taken_again(
    lab: SSHNodeSet, launcher_home: Path
) -> None:
    """Issue 8 item 9: a host confirmed lost is quarantined; once its sshd answers again
    (and it has been out for LAUNCHER_SSH_REPROBE_AFTER_S), a launch short of hosts
    probes it and takes it (cleaned first) instead of failing for 600 s."""
    cloud = SSHCloud()
    addrs = [f"{n.host}:{n.port}" for n in lab]
    now = time.time()

    def quarantine(since: float) -> None:
        (launcher_home / "ssh_pools.json").write_text(json.dumps({
            "version": 1, "allocations": {}, "host_keys": {},
            "quarantine": {a: {"cluster": "old", "since": since, "until": now + 600,
                               "reason": "sshd unreachable on every probe (confirmed lost)"}
                           for a in addrs[2:]},
        }))

    quarantine(since=now)  # just lost: not probed yet
    with pytest.raises(CapacityError, match=r"2 quarantined after a loss: `launcher ssh pools`"):
        cloud.provision(_req("q", 4))
    quarantine(since=now - 120)
    info = cloud.provision(_req("q", 4))
    assert _hosts(info) == set(addrs)
    state = json.loads((launcher_home / "ssh_pools.json").read_text())
    assert state["quarantine"] == {}  # cleaned of "old" and handed out
    cloud.terminate("q")


def test_a_host_the_health_watch_excluded_stays_out_until_released(
    lab: SSHNodeSet, launcher_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host failing the health watch is quarantined for good: its sshd answering does not
    release it (unlike a lost host), nor do replace_nodes/terminate; `ssh release` does."""
    from launcher.clouds.ssh_hosts import release_answering, release_host
    from launcher.clouds.ssh_pool_state import PoolStateFile

    monkeypatch.setenv("LAUNCHER_SSH_REPROBE_AFTER_S", "0")
    cloud = SSHCloud()
    info = cloud.provision(_req("hx", 2))
    bad = info.nodes[1].node_id
    assert cloud.exclude_hosts("hx", (bad, "not-ours:22"), "node 1 failed the health watch: "
                               "Xid 79") == [bad]
    info2 = cloud.replace_nodes("hx", (bad,))
    assert bad not in _hosts(info2) and len(info2.nodes) == 2
    store = PoolStateFile()
    pools = list(load_config().ssh_node_pools.values())
    assert release_answering(store, pools) == []  # its sshd answers: still out
    entry = store.read().quarantine[bad]
    assert entry["health"] is True and "Xid 79" in str(entry["reason"])
    cloud.terminate("hx")
    assert store.read().quarantine[bad]["health"] is True
    with pytest.raises(CapacityError, match="1 quarantined"):
        cloud.provision(_req("hy", 4))
    release_host(store, "lab", bad)
    info3 = cloud.provision(_req("hy", 4))
    assert bad in _hosts(info3)
    cloud.terminate("hy")
