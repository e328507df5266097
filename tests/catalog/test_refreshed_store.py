"""The refreshed-rows store: one transaction per cloud, survives a writer killed mid-way."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from launcher.catalog import query, refreshed
from launcher.catalog.offer import Offer

REPO = Path(__file__).resolve().parents[2]


def _offer(it: str, price: float, zone: str = "use1-az1", source: str = "test refresh") -> Offer:
    return Offer(
        cloud="aws", region="us-east-1", zone=zone, instance_type=it, accelerator="H100",
        accelerator_count=8.0, accelerator_memory_gib=80.0, vcpus=192.0, memory_gib=2048.0,
        price=price, spot_price=None, fabric="efa", fabric_gbps=3200.0, nvlink=None,
        max_nodes=None, arch="x86_64", source=source, fetched_at="2026-11-23T12:00:00Z",
    )  # fmt: skip


def _fetched(rows: list[Offer], at: str = "2026-11-23T12:00:00Z") -> refreshed.FetchedCatalog:
    return refreshed.FetchedCatalog(
        cloud="aws", offers=tuple(dataclasses.replace(o, fetched_at=at) for o in rows),
        source="test refresh", upstream="recorded", fetched_at=at, regions=("us-east-1",),
    )  # fmt: skip


def test_replace_then_replace_again_keeps_only_the_newest(launcher_home: Path) -> None:
    refreshed.replace_cloud(_fetched([_offer("p5.48xlarge", 98.0), _offer("p5.4xlarge", 12.0)]))
    info = refreshed.replace_cloud(
        _fetched([_offer("p5.48xlarge", 90.0)], at="2026-11-24T00:00:00Z"),
        enrich=refreshed.nvlink_filler({"p5.48xlarge": True}),
    )
    assert info.rows == 1 and info.fetched_at == "2026-11-24T00:00:00Z"
    rows = query.offers(["H100"], clouds=["aws"])
    assert [(o.instance_type, o.price, o.nvlink, o.fetched_at) for o in rows] == [
        ("p5.48xlarge", 90.0, True, "2026-11-24T00:00:00Z")
    ]
    assert set(refreshed.infos()) == {"aws"}


def test_a_writer_killed_inside_the_transaction_leaves_the_old_rows(launcher_home: Path) -> None:
    """kill -9 after the old rows were deleted and while the new ones are written: SQLite
    rolls the hot journal back on the next open, readers see the old rows only."""
    refreshed.replace_cloud(_fetched([_offer("p5.48xlarge", 98.0)]))
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(REPO)!r})
from launcher.catalog import refreshed
from tests.catalog.test_refreshed_store import _fetched, _offer
real = refreshed._values
n = 0
def dying(o, pid):
    global n
    n += 1
    if n == 500:  # the DELETE has run inside the open transaction by now
        os.kill(os.getpid(), signal.SIGKILL)
    return real(o, pid)
refreshed._values = dying
rows = [_offer("p5.48xlarge", 1.0, zone=f"z{{i}}") for i in range(2000)]
refreshed.replace_cloud(_fetched(rows, at="2026-11-25T00:00:00Z"))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == -9, proc.stderr
    assert os.path.exists(refreshed.store_path() + "-journal")  # a hot journal was left
    query.clear_process_cache()
    rows = query.offers(["H100"], clouds=["aws"])
    assert [(o.price, o.fetched_at) for o in rows] == [(98.0, "2026-11-23T12:00:00Z")]
    assert refreshed.infos()["aws"].fetched_at == "2026-11-23T12:00:00Z"


def test_forget_and_rows_of_another_cloud_are_refused(launcher_home: Path) -> None:
    import pytest

    bundled = query.offers(["H100"], clouds=["aws"])
    refreshed.replace_cloud(_fetched([_offer("p5.48xlarge", 98.0)]))
    assert len(query.offers(["H100"], clouds=["aws"])) == 1
    assert refreshed.forget_cloud("aws") is True
    query.clear_process_cache()
    assert query.offers(["H100"], clouds=["aws"]) == bundled
    with pytest.raises(ValueError, match="a gcp row in a aws refresh"):
        refreshed.replace_cloud(_fetched([dataclasses.replace(_offer("x", 1.0), cloud="gcp")]))
