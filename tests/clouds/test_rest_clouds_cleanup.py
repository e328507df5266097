"""`launcher clouds cleanup` on the account-wide leftovers of Lambda (the SSH key launcher
registers, the firewall rules it adds for `ports:`) and Vast (the SSH key it registers),
against their API fakes: kept while something uses them, deleted after `down`,
registered again by the next launch; what launcher did not add is never listed. Clouds
that keep nothing outside their clusters say so."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.api.cleanup import DELETED, KEPT, WOULD_DELETE, cleanup_leftovers
from tests.clouds.lambda_.test_lambda_provision import cloud as lambda_cloud_obj
from tests.clouds.lambda_.test_lambda_provision import req as lambda_req
from tests.clouds.vast.test_vast_provision import cloud as vast_cloud_obj
from tests.clouds.vast.test_vast_provision import req as vast_req
from tests.lambda_fake import LambdaFake, lambda_fake  # noqa: F401 - the fixture
from tests.vast_fake import VastFake, vast_fake  # noqa: F401 - the fixture

USER_SSH_RULE = {"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0",
                 "description": "Allow SSH"}


def _actions(report: object) -> list[tuple[str, str]]:
    return sorted((i.kind, i.action) for i in report.items)  # type: ignore[attr-defined]


def test_lambda_key_and_port_rules(lambda_fake: LambdaFake) -> None:  # noqa: F811
    c = lambda_cloud_obj()
    c.provision(lambda_req("c1", n=1, ports=("8080",)))
    assert [k["name"].startswith("launcher-") for k in lambda_fake.ssh_keys] == [True]
    assert len(lambda_fake.firewall) == 2
    report = cleanup_leftovers("lambda")
    assert _actions(report) == [("SSH key", KEPT), ("firewall rule", KEPT)]
    assert all(i.reason.startswith("used by instance(s) ") for i in report.items)
    c.terminate("c1")
    dry = cleanup_leftovers("lambda", dryrun=True)
    assert _actions(dry) == [("SSH key", WOULD_DELETE), ("firewall rule", WOULD_DELETE)]
    assert "tcp 8080 from 0.0.0.0/0" in [i.name for i in dry.items]
    assert _actions(cleanup_leftovers("lambda")) == [("SSH key", DELETED),
                                                     ("firewall rule", DELETED)]
    assert lambda_fake.ssh_keys == [] and lambda_fake.firewall == [USER_SSH_RULE]
    c.provision(lambda_req("c2", n=1))  # the next launch registers the key again
    assert len(lambda_fake.ssh_keys) == 1
    c.terminate("c2")


def test_vast_key_only_when_the_account_has_no_instance(vast_fake: VastFake) -> None:  # noqa: F811
    vast_fake.ssh_keys.append({"id": 77, "user_id": 4242, "created_at": "2026-11-25T00:00:00Z",
                               "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMine me@laptop"})
    c = vast_cloud_obj()
    c.provision(vast_req("v1"))
    report = cleanup_leftovers("vast")
    assert _actions(report) == [("SSH key", KEPT)]  # the laptop key is not launcher's
    assert "Vast puts account keys on every instance" in report.items[0].reason
    c.terminate("v1")
    assert _actions(cleanup_leftovers("vast")) == [("SSH key", DELETED)]
    assert [k["id"] for k in vast_fake.ssh_keys] == [77]
    assert cleanup_leftovers("vast").note == "no leftovers of vast."


@pytest.mark.parametrize("name", ["runpod", "nebius", "azure", "local", "ssh"])
def test_clouds_that_keep_nothing_say_so(name: str, launcher_home: Path) -> None:
    report = cleanup_leftovers(name)
    assert report.items == [] and "keeps nothing outside its clusters" in report.note
