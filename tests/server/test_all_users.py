"""`status --all-users` and `jobs queue --all-users`: a user sees only their own
clusters and is refused the flag; an admin sees only their own without it and every
user's with it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.server.conftest import Server, cli


def _names(home: Path, *args: str) -> list[str]:
    r = cli(home, "status", "--json", *args)
    assert r.rc == 0, r.err
    return sorted(row["name"] for row in json.loads(r.out))


def test_all_users_for_admins_only(server: Server, tmp_path: Path) -> None:
    alice, bob, admin = server.client("alice"), server.client("bob"), server.client("admin")
    task = tmp_path / "t.yaml"
    task.write_text("name: t\nresources:\n  infra: local\nrun: echo hi\n")
    for home, name in ((alice, "ca"), (bob, "cb")):
        r = cli(home, "launch", str(task), "-c", name, "-y", "-d")
        assert r.rc == 0, r.out + r.err

    assert _names(alice) == ["ca"] and _names(bob) == ["cb"]
    for args in (("status", "--all-users"), ("jobs", "queue", "--all-users")):
        refused = cli(bob, *args)
        assert refused.rc == 1, args
        assert "--all-users needs the admin role; 'bob' is a user." in refused.err, refused.err
        assert "Traceback" not in refused.err
    assert _names(admin) == []  # the admin's own: none
    assert _names(admin, "--all-users") == ["ca", "cb"]
    assert json.loads(cli(admin, "jobs", "queue", "--all-users", "--json").out) == []
    # the admin acts on what --all-users shows; the users keep seeing only their own
    assert cli(admin, "down", "cb", "-y").rc == 0
    assert _names(admin, "--all-users") == ["ca"] and _names(bob) == []
    assert cli(alice, "down", "ca", "-y").rc == 0
