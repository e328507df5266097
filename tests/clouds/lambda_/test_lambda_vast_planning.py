"""What the bundled catalog lets the optimizer do with Lambda and Vast (no network):
an RDMA gang never lands on Lambda (its on-demand rows' fabric is unknown: no source
says InfiniBand), Vast is refused for any gang (max_nodes 1), and Lambda has no spot."""

from __future__ import annotations

from launcher.provisioning.planning import plan
from launcher.task.model import Task


def _reasons(task: dict[str, object], cloud: str) -> set[str]:
    p = plan(Task.from_dict(task))
    assert all(pl.cloud != cloud for pl in p.placements), [pl.cloud for pl in p.placements]
    return {r.reason for r in p.rejected if r.cloud == cloud}


def test_rdma_gang_never_on_lambda_nor_vast() -> None:
    task = {"num_nodes": 2, "run": "true",
            "resources": {"accelerators": "H100:8", "network": {"fabric": "rdma"}}}
    assert "fabric unknown (no source)" in _reasons(task, "lambda")
    assert "max 1 node < 2" in _reasons(task, "vast")


def test_two_node_ethernet_gang_may_use_lambda_but_not_vast() -> None:
    task = {"num_nodes": 2, "run": "true", "resources": {"accelerators": "H100:8"}}
    p = plan(Task.from_dict(task))
    assert any(pl.cloud == "lambda" for pl in p.placements)
    assert all(pl.cloud != "vast" for pl in p.placements)


def test_no_spot_on_lambda_in_the_snapshot() -> None:
    task = {"run": "true", "resources": {"cloud": "lambda", "accelerators": "A10:1",
                                         "use_spot": True}}
    try:
        p = plan(Task.from_dict(task))
    except Exception as e:  # NoPlacementError: every Lambda row lacks a spot price
        assert "spot" in str(e).lower(), e
    else:
        assert p.placements == [], p.placements
