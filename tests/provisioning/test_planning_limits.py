"""Placements a cloud's provisioner cannot build are planned but never enabled, so a
real launch fails over past them instead of stopping at an InvalidRequestError."""

from __future__ import annotations

import textwrap

import pytest

from launcher.clouds.base import CredentialStatus
from launcher.clouds.gcp.limits import GPUDIRECT_NOT_LAUNCHABLE
from launcher.provisioning import planning
from launcher.task.model import Task


def _task(text: str) -> Task:
    return Task.from_yaml_str(textwrap.dedent(text), source="t.yaml", require_values=False)


@pytest.fixture
def gcp_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    def status(cloud: str) -> CredentialStatus:
        return CredentialStatus(cloud == "gcp", "test")

    monkeypatch.setattr(planning, "_credential_status", status)
    monkeypatch.setattr(planning, "_credential_presence", status)


def test_multi_node_gpudirect_gangs_on_gcp_are_planned_not_enabled(gcp_enabled: None) -> None:
    p = planning.plan(_task("""\
        num_nodes: 2
        resources: {cloud: gcp, accelerators: H100:8}
        """))
    a3 = [i for i, pl in enumerate(p.placements) if pl.instance_type.startswith("a3-")]
    assert a3, "the catalog has a3 H100 machines on GCP"
    assert not any(p.enabled[i] for i in a3)
    assert GPUDIRECT_NOT_LAUNCHABLE in p.notes
    assert p.chosen is None or not p.placements[p.chosen].instance_type.startswith("a3-")


def test_one_node_of_the_same_type_stays_launchable(gcp_enabled: None) -> None:
    p = planning.plan(_task("resources: {cloud: gcp, accelerators: H100:8}\n"))
    assert p.chosen is not None and p.placements[p.chosen].instance_type.startswith("a3-")
    assert GPUDIRECT_NOT_LAUNCHABLE not in p.notes
