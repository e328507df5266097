"""Fault injection at every ARM call of the provisioning path (each PUT, in turn):
answered with an error on the request itself, or accepted and failed in its long-running
operation. After each, the fake holds nothing (the resource group was deleted and waited
on), the cluster record is clean, and `terminate` is a no-op. Prints steps x faults.
By default each step meets one of the synchronous errors, in turn, and the operation
failure; LAUNCHER_FULL_SWEEPS=1 (tests/README.md) tries every error at every step."""

from __future__ import annotations

import re

import pytest

from launcher.clouds.azure import records
from launcher.clouds.azure.cloud import AzureCloud
from launcher.clouds.base import CloudError
from tests import sweeps
from tests.azure_fake import AzureFake
from tests.clouds.azure.test_azure_provision import FakeWaiter, req

FAULTS = {
    "sync-409-SkuNotAvailable": dict(status=409, code="SkuNotAvailable", in_operation=False),
    "sync-400-InvalidParameter": dict(status=400, code="InvalidParameter", in_operation=False),
    "operation-failed-AllocationFailed": dict(status=200, code="AllocationFailed",
                                              in_operation=True),
}


def _steps(fake: AzureFake, cloud: AzureCloud) -> list[tuple[str, str]]:
    start = len(fake.calls)
    cloud.provision(req("f", num_nodes=2))
    steps = [(m, p) for m, p in fake.calls[start:]
             if m in ("PUT", "POST") and not p.startswith("/fake-operations/")]
    cloud.terminate("f")
    assert fake.inventory() == []
    return steps


def test_a_fault_at_every_call_leaves_nothing(azure_fake: AzureFake,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    cloud = AzureCloud(node_waiter=FakeWaiter())
    steps = _steps(azure_fake, cloud)
    assert len(steps) >= 8  # group, nsg, vnet, 2x (public IP, NIC, VM)
    tried = 0
    sync_faults = [n for n, f in FAULTS.items() if not f["in_operation"]]
    for i, (method, path) in enumerate(steps):
        lro = "/resourcegroups/" not in path.lower() or "/providers/" in path
        for name, fault in FAULTS.items():
            if fault["in_operation"] and not lro:
                continue  # a resource group PUT is synchronous: no operation to fail
            if (not sweeps.full_sweeps() and not fault["in_operation"]
                    and name != sync_faults[i % len(sync_faults)]):
                # by default one sync error per step, in turn (every code is used);
                # each with LAUNCHER_FULL_SWEEPS=1 (tests/sweeps.py)
                continue
            azure_fake.fail(method, re.escape(path) + "$", fault["status"],  # type: ignore[arg-type]
                            fault["code"], f"injected {name}",  # type: ignore[arg-type]
                            in_operation=fault["in_operation"])  # type: ignore[arg-type]
            with pytest.raises(CloudError) as err:
                cloud.provision(req("f", num_nodes=2))
            assert fault["code"] in str(err.value), (path, name, err.value)
            assert azure_fake.inventory() == [], (path, name)
            assert not records.groups("f"), (path, name)
            cloud.terminate("f")
            tried += 1
    with capsys.disabled():
        print(f"\nazure fault injection: {len(steps)} steps x faults = {tried} runs, "
              "nothing left after any")
