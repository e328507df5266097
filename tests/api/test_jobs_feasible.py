"""`jobs_check_feasible` (launcher/api/jobs.py): a managed job whose placements are all
not launchable is refused with each cloud's reason, as a launch is."""

from __future__ import annotations

import pytest

import launcher.api.planning as planning
import launcher.provisioning.planning as core_planning
from launcher.api.jobs import jobs_check_feasible
from launcher.clouds.base import CredentialStatus
from launcher.errors import NoPlacementError
from launcher.task.model import Task


def test_gpudirect_gangs_on_an_enabled_gcp_are_refused_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def status(c: str) -> CredentialStatus:
        return CredentialStatus(c in ("gcp", "local"), "no creds")

    # dry runs and cost queries ask the presence probe, launches the full check
    monkeypatch.setattr(core_planning, "_credential_status", status)
    monkeypatch.setattr(core_planning, "_credential_presence", status)
    task = Task.from_yaml_str("num_nodes: 2\nresources:\n  infra: gcp\n"
                              "  accelerators: H100:8\nrun: echo\n")
    assert planning.plan(task).chosen is None
    with pytest.raises(NoPlacementError) as err:
        jobs_check_feasible(task)
    text = str(err.value)
    assert text.startswith("No placement of this managed job can be launched here.")
    assert "gcp: planned only (GPUDirect)" in text
