"""LambdaCloud against the Lambda API fake with an injected node waiter (no SSH): the
calls, the records, query/terminate, the SSH key, capacity before launch, 429 backoff."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.clouds.base import (
    CapacityError,
    ClusterInfo,
    InvalidRequestError,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.lambda_.cloud import RECORDS, LambdaCloud, Timeouts
from tests.lambda_fake import LambdaFake

FAST = Timeouts(boot=5, ssh=5, teardown=5, poll=0.01)


def waiter(info: ClusterInfo, deadline: float) -> ClusterInfo:
    return info


def cloud() -> LambdaCloud:
    return LambdaCloud(node_waiter=waiter, timeouts=FAST)


def req(name: str = "c1", n: int = 2, **kw: object) -> ProvisionRequest:
    args: dict[str, object] = dict(cluster_name=name, cloud="lambda", region="us-east-1",
                                   zone=None, instance_type="gpu_1x_a10", num_nodes=n,
                                   use_spot=False, accelerator="A10", accelerator_count=1)
    args.update(kw)
    return ProvisionRequest(**args)  # type: ignore[arg-type]


def test_provision_query_terminate(lambda_fake: LambdaFake) -> None:
    c = cloud()
    info = c.provision(req())
    assert len(info.nodes) == 2 and info.cloud == "lambda" and info.zone is None
    live = lambda_fake.live()
    assert sorted(i["name"] for i in live) == ["launcher-c1-0", "launcher-c1-1"]
    assert {n.node_id for n in info.nodes} == {i["id"] for i in live}
    assert all(n.internal_ip.startswith("10.123.255.") and n.external_ip is None
               and n.ssh_user == "root" for n in info.nodes)  # use_internal_ips from config
    assert len(lambda_fake.ssh_keys) == 1 and all(
        i["ssh_key_names"] == [lambda_fake.ssh_keys[0]["name"]] for i in live)
    launches = [c for c, s in lambda_fake.calls if c == "launch"]
    assert len(launches) == 2  # one node per request
    assert set(c.query("c1").values()) == {NodeState.RUNNING}
    assert c.list_tagged_clusters() == {"c1": sorted(n.node_id for n in info.nodes)}

    c.provision(req("c2", 1))  # the key is registered once, then reused
    assert len(lambda_fake.ssh_keys) == 1
    c.terminate("c1")
    assert sorted(i["name"] for i in lambda_fake.live()) == ["launcher-c2-0"]
    assert set(c.query("c1").values()) <= {NodeState.TERMINATED}
    c.terminate("c1")  # idempotent
    c.terminate("c2")
    assert lambda_fake.instances == {} and RECORDS.entries("c1") is None


def test_no_capacity_in_region_creates_nothing(lambda_fake: LambdaFake) -> None:
    lambda_fake.no_capacity.add(("gpu_1x_a10", "us-east-1"))
    with pytest.raises(CapacityError, match="us-east-1") as e:
        cloud().provision(req())
    assert e.value.region == "us-east-1"
    assert not any(c == "launch" for c, _ in lambda_fake.calls)


def test_unknown_type_spot_and_rdma_gangs_refused(lambda_fake: LambdaFake) -> None:
    with pytest.raises(InvalidRequestError, match="no instance type"):
        cloud().provision(req(instance_type="gpu_9x_nope"))
    with pytest.raises(InvalidRequestError, match="spot"):
        cloud().provision(req(use_spot=True))
    with pytest.raises(InvalidRequestError, match="infiniband"):
        cloud().provision(req(fabric="infiniband"))
    assert lambda_fake.instances == {}


def test_rate_limited_calls_are_retried(lambda_fake: LambdaFake) -> None:
    for route in ("instance-types", "launch", "instances"):
        lambda_fake.rate_limit(route, times=2)
    cloud().provision(req("rl", 1))
    assert sum(1 for _, s in lambda_fake.calls if s == 429) == 6
    assert len(lambda_fake.live()) == 1


def test_unhealthy_node_rolls_back_the_gang(lambda_fake: LambdaFake) -> None:
    lambda_fake.boot_polls = 3
    c = cloud()
    orig = c._list

    def listing(api: object) -> list[dict[str, object]]:
        out = orig(api)  # type: ignore[arg-type]
        for i in lambda_fake.instances.values():
            if i["name"] == "launcher-uh-1" and i["status"] == "booting":
                i["status"] = "unhealthy"
        return out

    c._list = listing  # type: ignore[method-assign]
    with pytest.raises(CapacityError, match="failed while booting"):
        c.provision(req("uh"))
    assert lambda_fake.live() == [] and RECORDS.entries("uh") is None


def test_key_file_and_check_without_network(lambda_fake: LambdaFake, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAMBDA_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))
    before = len(lambda_fake.calls)
    status = cloud().check()
    assert not status.enabled and "LAMBDA_API_KEY" in status.reason
    assert len(lambda_fake.calls) == before  # no network without a key
    (tmp_path / ".lambda_cloud").mkdir()
    (tmp_path / ".lambda_cloud" / "lambda_keys").write_text(f"api_key = {lambda_fake.key}\n")
    status = cloud().check()
    assert status.enabled and "lambda_keys" in status.reason
    (tmp_path / ".lambda_cloud" / "lambda_keys").write_text("api_key = wrong\n")
    status = cloud().check()
    assert not status.enabled and "invalid-api-key" in status.reason


def test_ports_open_firewall_rules_once(lambda_fake: LambdaFake) -> None:
    c = cloud()
    c.provision(req("p1", 1, ports=("8080", "9000-9010")))
    assert [r["port_range"] for r in lambda_fake.firewall] == [[22, 22], [8080, 8080],
                                                                [9000, 9010]]
    c.provision(req("p2", 1, ports=("9005",)))  # covered already: no PUT
    assert sum(1 for n, _ in lambda_fake.calls if n == "firewall-rules PUT") == 1
    with pytest.raises(InvalidRequestError, match="not a port"):
        c.provision(req("p3", 1, ports=("http",)))
    c.terminate("p1")
    c.terminate("p2")
    assert lambda_fake.live() == []
