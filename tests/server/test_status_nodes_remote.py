"""`launcher status --nodes` logged in to a server: the node table comes from the
server's `GET /clusters/NAME/nodes` (what the dashboard's node table reads), under its
RBAC: alice sees her cluster's nodes, bob does not see her cluster at all."""

from __future__ import annotations

import json

import pytest

from launcher.api.server_store import ServerStore
from tests.cli.test_status_nodes_cli import seed_lab
from tests.server.conftest import Server, cli


def test_status_nodes_through_the_server(server: Server,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", str(server.home))  # the server's state DB
    now = seed_lab("alices")
    with ServerStore() as s:
        s.set_cluster_launcher("alices", "alice")
    alice, bob = server.client("alice"), server.client("bob")

    got = cli(alice, "status", "--nodes", "--json")
    assert got.rc == 0, got.err
    (row,) = json.loads(got.out)
    assert row["name"] == "alices"
    assert [(n["rank"], n["node_id"], n["internal_ip"], n["state"], n["health"],
             n["health_source"], n["state_seen_at"]) for n in row["nodes"]] == [
        (0, "h1:22", "10.0.0.1", "up", "ok", "health gate", now),
        (1, "h2:22", "10.0.0.2", "unreachable", "warn", "health gate", now)]

    table = cli(alice, "status", "alices", "--nodes", env={"COLUMNS": "250"})
    assert table.rc == 0, table.err
    assert "Nodes of alices:" in table.out and "warn: GPU 3 at 91 C" in table.out

    # bob does not see alice's cluster, so not its nodes either
    other = cli(bob, "status", "alices", "--nodes", "--json")
    assert other.rc == 4 and json.loads(other.out) == []
    assert "does not exist" in other.err and "Traceback" not in other.err
