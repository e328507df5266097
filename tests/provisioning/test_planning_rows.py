"""launcher/provisioning/planning_rows.py: what makes a placement launchable, the short
reason when it is not, and the rows a plan is shown as (zones folded, launchable first)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from launcher.provisioning import planning_rows as pr


def placement(cloud: str, region: str, zone: str | None = None, *, price: float = 1.0,
              instance: str = "i", accelerator: str | None = "H100", nodes: int = 1) -> Any:
    return SimpleNamespace(
        cloud=cloud, region=region, zone=zone, instance_type=instance, use_spot=False,
        node_price=price, num_nodes=nodes, candidate=SimpleNamespace(preference=0),
        accelerator=accelerator, accelerator_count=8.0, fabric=None,
        expected_hourly_cost=price * nodes,
    )


def test_cloud_reasons_in_order_of_precedence() -> None:
    def reason(**kw: bool) -> str | None:
        args = {"enabled": True, "refused": False, "implemented": True, "kubernetes": False}
        return pr.cloud_reason("c", **{**args, **kw})

    assert reason() is None
    assert reason(enabled=False) == pr.REASON_NOT_ENABLED
    assert reason(enabled=False, refused=True) == pr.REASON_CONFIG
    assert reason(enabled=False, implemented=False) == pr.REASON_NO_PROVISIONER
    assert reason(kubernetes=True, implemented=False) == pr.REASON_KUBERNETES


def test_placement_limits_decide_before_the_cloud() -> None:
    ps = [placement("gcp", "r", accelerator="tpu-v5-8"), placement("gcp", "r", instance="a3-x"),
          placement("gcp", "r"), placement("aws", "r")]
    reasons = pr.launch_reasons(
        ps,
        lambda cloud: None if cloud == "aws" else pr.REASON_NOT_ENABLED,
        tpu=lambda p: (p.accelerator or "").startswith("tpu-"),
        gpudirect=lambda p: p.instance_type.startswith("a3-"),
    )
    assert reasons == [pr.REASON_TPU, pr.REASON_GPUDIRECT, pr.REASON_NOT_ENABLED, None]


def test_rows_fold_zones_and_put_launchable_first() -> None:
    ps = [
        placement("nebius", "eu", price=1.0),
        placement("gcp", "us-central1", "us-central1-a", price=2.0, instance="a"),
        placement("gcp", "us-central1", "us-central1-a", price=2.0, instance="b"),
        placement("gcp", "us-central1", "us-central1-b", price=2.0, instance="a"),
        placement("aws", "us-east-1", "use1-az1", price=3.0),
        placement("aws", "us-east-1", "use1-az2", price=3.0),
        placement("aws", "us-west-2", "usw2-az1", price=3.5),
    ]
    no = pr.REASON_NOT_ENABLED
    rows = pr.plan_rows(ps, [no, no, no, no, None, None, None])
    assert [(r.members, r.zones, r.launchable) for r in rows] == [
        ([4, 5], ["use1-az1", "use1-az2"], True),
        ([6], ["usw2-az1"], True),
        ([0], [], False),
        ([1, 3], ["us-central1-a", "us-central1-b"], False),  # same type: one row
        ([2], ["us-central1-a"], False),
    ]
    assert all(r.reason == no for r in rows[2:])
