"""`launcher catalog refresh` as a real subprocess: the EC2 API is moto's server (reached
through the standard AWS_ENDPOINT_URL; its instance-type and offering data are recorded
from the real API, its spot history is junk but of the real shape), the price list is a
local HTTP server with recorded offer files, configured through config.yaml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clouds.aws.price_list_server import PriceListServer, serve_price_list

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def _run(home: Path, env_extra: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LAUNCHER_HOME": str(home),
        "LAUNCHER_LOCAL_GPUS": "none",
        "COLUMNS": "200",
        "NO_COLOR": "1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_CONFIG_FILE": str(home / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "no-aws-credentials"),
        **env_extra,
    }
    env.pop("LAUNCHER_CATALOG_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-c", "from launcher.cli import main; main()", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def _json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def price_list(launcher_home: Path) -> Iterator[PriceListServer]:
    with serve_price_list() as server:
        (launcher_home / "config.yaml").write_text(
            f"catalog:\n  aws:\n    price_list_url: {server.base_url}\n"
        )
        yield server


def test_refresh_then_gpus_and_status_use_the_refreshed_rows(
    launcher_home: Path, price_list: PriceListServer, moto_endpoint: str
) -> None:
    env = {"AWS_ENDPOINT_URL": moto_endpoint}
    out = _json(_run(launcher_home, env, "catalog", "refresh", "--cloud", "aws",
                     "--region", "us-east-1", "--json"))  # fmt: skip
    assert [(r["cloud"], r["regions"]) for r in out] == [("aws", ["us-east-1"])]
    rows = _json(_run(launcher_home, env, "gpus", "A10G", "--cloud", "aws", "--all-regions",
                      "--json"))  # fmt: skip
    g5 = [r for r in rows if r["instance_type"] == "g5.xlarge"]
    assert g5 and {(r["price"], r["region"], r["source"]) for r in g5} == {
        (1.006, "us-east-1", "AWS EC2 API + price list (refreshed)")
    }
    status = _json(_run(launcher_home, env, "catalog", "status", "--json"))
    aws = next(c for c in status["clouds"] if c["cloud"] == "aws")
    assert aws["origin"] == "refreshed" and aws["regions"] == ["us-east-1"]
    assert aws["rows"] == out[0]["rows"]
    table = _run(launcher_home, env, "catalog", "status")
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith("aws"))
    assert "refreshed" in line and "h old" in line
    assert "bundled snapshot" in next(ln for ln in table.stdout.splitlines() if ln.startswith("gcp"))


def test_failed_refresh_exits_non_zero_and_keeps_the_rows(
    launcher_home: Path, price_list: PriceListServer
) -> None:
    price_list.failing.add("us-east-1")
    before = _json(_run(launcher_home, {}, "gpus", "L4", "--cloud", "aws", "--json"))
    proc = _run(launcher_home, {}, "catalog", "refresh", "--cloud", "aws", "--region", "us-east-1")
    assert proc.returncode == 1
    assert "previous aws rows are kept" in proc.stderr and "HTTP 500" in proc.stderr
    assert _json(_run(launcher_home, {}, "gpus", "L4", "--cloud", "aws", "--json")) == before


def test_refresh_of_a_cloud_without_fetcher_is_refused(launcher_home: Path) -> None:
    proc = _run(launcher_home, {}, "catalog", "refresh", "--cloud", "nebius")
    assert proc.returncode == 2 and "no price fetcher for this cloud yet" in proc.stderr
