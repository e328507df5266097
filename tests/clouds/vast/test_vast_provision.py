"""VastCloud against the Vast API fake with an injected node waiter (no SSH): offer
search, create, the SSH key, query (preemption told from termination), terminate, the
typed errors of Vast's error bodies, a fault at every call, failover, 429 backoff."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from launcher.clouds.base import (
    AuthError,
    CapacityError,
    CloudError,
    CloudQuotaError,
    ClusterInfo,
    InvalidRequestError,
    NodeState,
    ProvisionRequest,
)
from launcher.clouds.vast.cloud import RECORDS, Timeouts, VastCloud
from launcher.provisioning.failover import provision_with_failover
from launcher.state.db import StateDB
from tests.clouds.aws.test_aws_failover import FakeTask, _placement, plan_over
from tests.vast_fake import BAD_KEY, INVALID, NO_CREDIT, NO_SUCH_ASK, VastFake, err

FAST = Timeouts(boot=5, ssh=5, teardown=5, poll=0.01)
SHAPE = "1x-H100_SXM-32-65536"


def waiter(info: ClusterInfo, deadline: float) -> ClusterInfo:
    return info


def cloud() -> VastCloud:
    return VastCloud(node_waiter=waiter, timeouts=FAST)


def req(name: str = "v1", region: str = "Florida, US, NA", **kw: object) -> ProvisionRequest:
    args: dict[str, object] = dict(cluster_name=name, cloud="vast", region=region, zone=None,
                                   instance_type=SHAPE, num_nodes=1, use_spot=False,
                                   accelerator="H100", accelerator_count=1)
    args.update(kw)
    return ProvisionRequest(**args)  # type: ignore[arg-type]


def test_provision_query_terminate(vast_fake: VastFake) -> None:
    c = cloud()
    info = c.provision(req())
    (inst,) = vast_fake.live()
    (node,) = info.nodes
    assert inst["label"] == "launcher-v1-0" and inst["_offer"] == 9001  # cheapest in Florida
    assert not inst["is_bid"] and inst["image_uuid"] == "vastai/base-image:cuda-12.4.1-auto"
    assert node.node_id == str(inst["id"]) and node.external_ip == inst["public_ipaddr"]
    assert node.ssh_port == 22 and node.ssh_user == "root"
    assert len(vast_fake.ssh_keys) == 1 and inst["_keys"] == [vast_fake.ssh_keys[0]["public_key"]]
    assert c.query("v1") == {node.node_id: NodeState.RUNNING}
    assert c.list_tagged_clusters() == {"v1": [node.node_id]}
    c.provision(req("v2"))  # next offer; the key is not registered twice
    assert len(vast_fake.ssh_keys) == 1 and len(vast_fake.live()) == 2
    c.terminate("v1")
    assert c.query("v1") == {}
    c.terminate("v1")
    c.terminate("v2")
    assert vast_fake.instances == {} and RECORDS.entries("v1") is None


def test_spot_is_a_bid_and_outbid_is_preemption(vast_fake: VastFake) -> None:
    c = cloud()
    info = c.provision(req("sp", use_spot=True))
    inst = vast_fake.instances[info.head.node_id]
    assert inst["is_bid"] and inst["dph_total"] == 0.90  # the offer's min_bid
    vast_fake.outbid(info.head.node_id)
    assert c.query("sp") == {info.head.node_id: NodeState.PREEMPTED}
    c.terminate("sp")
    assert vast_fake.instances == {}


def test_gangs_bad_shapes_and_empty_regions(vast_fake: VastFake) -> None:
    with pytest.raises(InvalidRequestError, match="max 1 node"):
        cloud().provision(req(num_nodes=2))
    with pytest.raises(InvalidRequestError, match="not a Vast shape"):
        cloud().provision(req(instance_type="p5.48xlarge"))
    with pytest.raises(CapacityError, match="no rentable"):
        cloud().provision(req(region="Iceland, IS, EU"))
    assert vast_fake.instances == {}


def test_offer_taken_meanwhile_tries_the_next(vast_fake: VastFake) -> None:
    vast_fake.fail("create", *NO_SUCH_ASK)
    info = cloud().provision(req("nx"))
    assert vast_fake.instances[info.head.node_id]["_offer"] == 9002
    vast_fake.fail("create", *NO_SUCH_ASK, times=5)
    with pytest.raises(CapacityError, match="none rentable"):
        cloud().provision(req("nx2"))
    assert RECORDS.entries("nx2") is None


ERRORS: dict[str, tuple[tuple[int, Any], type[CloudError]]] = {
    "credit": (NO_CREDIT, CloudQuotaError), "auth": (BAD_KEY, AuthError),
    "invalid": (INVALID, InvalidRequestError), "500": (err(500, "", "oops"), CloudError)}


@pytest.mark.parametrize("kind", ERRORS)
def test_error_bodies_map_to_typed_errors(vast_fake: VastFake, kind: str) -> None:
    (status, body), cls = ERRORS[kind]
    vast_fake.fail("create", status, body)
    with pytest.raises(cls) as e:
        cloud().provision(req("e"))
    assert type(e.value) is cls and e.value.cloud == "vast"
    assert vast_fake.instances == {} and RECORDS.entries("e") is None


def test_fault_at_every_call_leaves_nothing(vast_fake: VastFake,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    c = cloud()
    start = len(vast_fake.calls)
    c.provision(req("f"))
    steps = [name for name, _ in vast_fake.calls[start:]]
    c.terminate("f")
    assert steps[:4] == ["ssh GET", "ssh POST", "bundles POST", "create"], steps
    faults = {"500": (err(500, "", "injected"), False), "answer-lost": (err(502, "", "lost"), True)}
    runs = 0
    for i, name in enumerate(steps):
        for fault, ((status, body), apply) in faults.items():
            vast_fake.reset()
            vast_fake.fail(name, status, body, skip=steps[:i].count(name), apply=apply)
            with pytest.raises(CloudError):
                c.provision(req("f"))
            assert vast_fake.instances == {}, (name, fault)
            assert RECORDS.entries("f") is None, (name, fault)
            c.terminate("f")
            runs += 1
    with capsys.disabled():
        print(f"\nvast fault injection: {len(steps)} steps x faults = {runs} runs, "
              "nothing left after any")


def test_rate_limits_and_check(vast_fake: VastFake, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    for route in ("bundles POST", "create", "instances"):
        vast_fake.rate_limit(route, times=2)
    cloud().provision(req("rl"))
    assert sum(1 for _, s in vast_fake.calls if s == 429) == 6
    assert "tester@example.com" in cloud().check().reason
    monkeypatch.delenv("VAST_API_KEY")
    monkeypatch.setenv("HOME", str(tmp_path))
    before = len(vast_fake.calls)
    status = cloud().check()
    assert not status.enabled and "VAST_API_KEY" in status.reason
    assert len(vast_fake.calls) == before
    (tmp_path / ".config" / "vastai").mkdir(parents=True)
    (tmp_path / ".config" / "vastai" / "vast_api_key").write_text("wrong\n")
    assert "not_authorized" in cloud().check().reason
    monkeypatch.setenv("VAST_API_KEY", vast_fake.key)
    cloud().terminate("rl")


def _vast(region: str) -> Any:
    p = _placement("vast", region, None)
    return dataclasses.replace(p, instance_type=SHAPE, num_nodes=1,
                               offer=dataclasses.replace(p.offer, instance_type=SHAPE))


def test_failover_to_the_next_region(vast_fake: VastFake) -> None:
    vast_fake.fail("create", *NO_SUCH_ASK, times=2)  # both Florida offers gone
    plan = plan_over([_vast("Florida, US, NA"), _vast("Vietnam, VN, AS")])
    with StateDB() as db:
        got = provision_with_failover(FakeTask(num_nodes=1), "fo", db, plan_fn=plan,  # type: ignore[arg-type]
                                      cloud_fn={"vast": cloud()}.__getitem__)
    assert [(a.region, a.error_type) for a in got.attempts] == [("Florida, US, NA", "CapacityError")]
    assert [i["geolocation"] for i in vast_fake.live()] == ["Vietnam, VN"]


def test_ports_are_mapped_through_env(vast_fake: VastFake) -> None:
    c = cloud()
    info = c.provision(req("pt", ports=("8080", "9000-9001")))
    inst = vast_fake.instances[info.head.node_id]
    assert inst["_env"] == {"-p 8080:8080": "1", "-p 9000:9000": "1", "-p 9001:9001": "1"}
    assert set(inst["ports"]) == {"22/tcp", "8080/tcp", "9000/tcp", "9001/tcp"}
    with pytest.raises(InvalidRequestError, match="over 32"):
        c.provision(req("pt2", ports=("1000-2000",)))
    c.terminate("pt")
    assert vast_fake.instances == {}
