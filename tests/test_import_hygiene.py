"""`launcher --help` and `launcher gpus` must not import cloud SDKs or paramiko.

Each case runs the CLI's main() in a fresh interpreter and then lists which of the
forbidden top-level modules ended up in sys.modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FORBIDDEN = ("boto3", "botocore", "google.cloud", "azure", "nebius", "grpc", "paramiko",
             "requests")

PROBE = """
import importlib, json, os, sys
if os.environ.get("PROBE_PREIMPORT"):
    importlib.import_module(os.environ["PROBE_PREIMPORT"])
from launcher.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
bad = sorted(m for m in sys.modules
             if any(m == f or m.startswith(f + ".") for f in {forbidden!r}))
sys.stderr.write("\\nPROBE " + json.dumps({{"code": code, "bad": bad, "rich": "rich" in sys.modules}}) + "\\n")
"""


def probe(args: list[str], home: Path, preimport: str = "") -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(forbidden=FORBIDDEN), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "LAUNCHER_HOME": str(home), "PROBE_PREIMPORT": preimport},
        timeout=60,
    )
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE "))
    result: dict[str, object] = json.loads(line[len("PROBE ") :])
    return result


@pytest.mark.parametrize(
    "args",
    [["--help"], ["gpus"], ["gpus", "H100:8"], ["gpus", "H100:8", "--json"], ["gpus", "--json"],
     ["catalog", "status"], ["cost-report", "--json"], ["catalog", "refresh", "--help"]],  # fmt: skip
)
def test_no_cloud_sdk_or_paramiko(args: list[str], tmp_path: Path) -> None:
    result = probe(args, tmp_path)
    assert result["code"] == 0
    assert result["bad"] == [], f"`launcher {' '.join(args)}` imported {result['bad']}"


def test_probe_detects_a_forbidden_import(tmp_path: Path) -> None:
    """The probe is not blind: a module imported before main() is reported."""
    result = probe(["--help"], tmp_path, preimport="paramiko")
    assert "paramiko" in result["bad"]  # type: ignore[operator]


def test_json_output_does_not_load_rich(tmp_path: Path) -> None:
    """Rich is only for tables: `gpus --json` never pays for it."""
    assert probe(["gpus", "H100:8", "--json"], tmp_path)["rich"] is False


def _no_azure_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith(("AZURE_", "MSI_", "IDENTITY_"))]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.azure/azureProfile.json


@pytest.mark.parametrize("args", [["check"], ["launch", "--dryrun", "-y", "TASK"]])
def test_azure_sdk_not_imported_without_azure_credentials(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check` decides from env and files that Azure has no credentials (no SDK import);
    a dry run of an Azure task plans without it too."""
    _no_azure_env(tmp_path, monkeypatch)
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  cloud: azure\n  instance_type: Standard_D2s_v5\nrun: echo\n")
    result = probe([str(task) if a == "TASK" else a for a in args], tmp_path / "home")
    assert result["code"] in (0, 1), result
    assert [m for m in result["bad"] if m.startswith("azure")] == [], result  # type: ignore[union-attr]


def _no_gcp_credentials_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT",
                        "CLOUDSDK_CORE_PROJECT", "CLOUDSDK_API_ENDPOINT_OVERRIDES_COMPUTE")}
    (tmp_path / "gcloud").mkdir(exist_ok=True)
    env["CLOUDSDK_CONFIG"] = str(tmp_path / "gcloud")  # no ADC file, no gcloud config
    return env


@pytest.mark.parametrize("args", [["check"], ["launch", "TASK", "--dryrun"]])
def test_gcp_sdk_not_imported_without_gcp_credentials(args: list[str], tmp_path: Path) -> None:
    """`launcher check` and a dry run of a GCP task, without GCP credentials: the gcp
    cloud answers from env/files alone, google-cloud-compute (~1-2 s) is not imported."""
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  cloud: gcp\n  instance_type: n2-standard-2\nrun: echo hi\n")
    argv = [str(task) if a == "TASK" else a for a in args]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(forbidden=("google",)), *argv],
        capture_output=True, text=True, timeout=60,
        env={**_no_gcp_credentials_env(tmp_path), "LAUNCHER_HOME": str(tmp_path / "home"),
             "PROBE_PREIMPORT": ""})
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE "))
    result = json.loads(line[len("PROBE "):])
    assert result["bad"] == [], f"`launcher {' '.join(args)}` imported {result['bad']}"
    if args == ["check"]:
        assert "no GCP credentials" in proc.stdout + proc.stderr, proc.stdout


@pytest.mark.parametrize("args", [["check"], ["launch", "--dryrun", "-y", "TASK"]])
def test_nebius_sdk_not_imported_without_nebius_credentials(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check` decides from env and files that Nebius has no credentials (no SDK, no
    grpc import); a dry run of a Nebius task plans without them too."""
    for var in [v for v in os.environ if v.startswith("NEBIUS_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.nebius/config.yaml
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  cloud: nebius\n  accelerators: H100:8\nrun: echo\n")
    result = probe([str(task) if a == "TASK" else a for a in args], tmp_path / "home")
    assert result["code"] in (0, 1), result
    found: list[str] = result["bad"]  # type: ignore[assignment]
    bad = [m for m in found if m.split(".")[0] in ("nebius", "grpc")]
    assert bad == [], result


@pytest.mark.parametrize("args", [["check"], ["launch", "--dryrun", "-y", "TASK"]])
def test_runpod_needs_no_requests_without_a_key(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No RUNPOD_API_KEY and no ~/.runpod/config.toml: `check` says so without importing
    requests (no network), and a dry run of a RunPod task plans without it."""
    monkeypatch.delenv("RUNPOD_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  cloud: runpod\n  accelerators: A100-80GB:1\nrun: echo\n")
    result = probe([str(task) if a == "TASK" else a for a in args], tmp_path / "home")
    assert result["code"] in (0, 1), result
    assert "requests" not in result["bad"], result  # type: ignore[operator]


# The modules that hold each cloud's provisioner (registry.IMPLEMENTED's targets).
def _provisioner_modules() -> tuple[str, ...]:
    from launcher.clouds.registry import IMPLEMENTED

    return tuple(target.split(":")[0] for target in IMPLEMENTED.values())


def _with_credentials(tmp_path: Path) -> dict[str, str]:
    """Credentials configured (env only, nothing that works) for several clouds."""
    return {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x",
            "NEBIUS_IAM_TOKEN": "t", "LAMBDA_API_KEY": "k", "RUNPOD_API_KEY": "k",
            "VAST_API_KEY": "k", "HOME": str(tmp_path)}


def _probe_modules(args: list[str], home: Path, env: dict[str, str],
                   modules: tuple[str, ...]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(forbidden=modules), *args],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, **env, "LAUNCHER_HOME": str(home), "PROBE_PREIMPORT": ""})
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE "))
    result: dict[str, object] = json.loads(line[len("PROBE "):])
    return result


@pytest.mark.parametrize("credentials", [False, True], ids=["no-credentials", "credentials"])
@pytest.mark.parametrize("args", [
    ["launch", "task_examples/train-2node-rdma.yaml", "--dryrun"],
    ["launch", "task_examples/aws-hello.yaml", "--dryrun", "--json"],
    ["jobs", "launch", "task_examples/spot-ordered.yaml", "--dryrun"],
    ["cost", "task_examples/any-of-gpus.yaml"],
])
def test_dry_run_imports_no_provisioner(args: list[str], credentials: bool,
                                        tmp_path: Path) -> None:
    """Whether a cloud is enabled in a dry run or a cost query comes from env and files
    (launcher.clouds.presence): no cloud's provisioner module is imported, with or
    without credentials configured."""
    env = _with_credentials(tmp_path) if credentials else {"HOME": str(tmp_path)}
    repo = Path(__file__).resolve().parents[1]
    argv = [str(repo / a) if a.startswith("task_examples/") else a for a in args]
    result = _probe_modules(argv, tmp_path / "home", env, _provisioner_modules())
    assert result["code"] == 0, result
    assert result["bad"] == [], f"`launcher {' '.join(args)}` imported {result['bad']}"


def test_probe_sees_a_provisioner_import(tmp_path: Path) -> None:
    """`check` proves credentials through the cloud itself: the probe sees the import."""
    result = _probe_modules(["check"], tmp_path / "home", _with_credentials(tmp_path),
                            _provisioner_modules())
    assert "launcher.clouds.aws.cloud" in result["bad"], result  # type: ignore[operator]


def test_dry_run_asks_only_the_clouds_with_placements(tmp_path: Path) -> None:
    """Credentials configured for AWS: a 2-node H100:8 RDMA dry run (placements on aws,
    azure, gcp, nebius, oci) never runs the credential probe of a cloud without a
    placement (runpod, lambda, vast), and a task that names its cloud asks only it."""
    probes = {"aws": "launcher.clouds.aws.session", "gcp": "launcher.clouds.gcp.session",
              "azure": "launcher.clouds.azure.session",
              "nebius": "launcher.clouds.nebius.session",
              "runpod": "launcher.clouds.runpod.credentials",
              "lambda": "launcher.clouds.lambda_.api", "vast": "launcher.clouds.vast.api"}
    env = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x",
           "HOME": str(tmp_path)}
    repo = Path(__file__).resolve().parents[1]
    result = _probe_modules(
        ["launch", str(repo / "task_examples" / "train-2node-rdma.yaml"), "--dryrun", "--json"],
        tmp_path / "home", env, tuple(probes.values()))
    assert result["code"] == 0, result
    asked = {cloud for cloud, module in probes.items() if module in result["bad"]}  # type: ignore[operator]
    assert "aws" in asked and not asked & {"runpod", "lambda", "vast"}, asked

    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  cloud: aws\n  instance_type: m7i.large\nrun: echo hi\n")
    result = _probe_modules(["launch", str(task), "--dryrun"], tmp_path / "home", env,
                            tuple(probes.values()))
    assert result["code"] == 0, result
    assert result["bad"] == [probes["aws"]], result


@pytest.mark.parametrize(
    "args",
    [["--help"], ["gpus"], ["gpus", "H100:8", "--json"], ["cost", "TASK"],
     ["launch", "--dryrun", "-y", "TASK"]],  # fmt: skip
)
def test_no_sqlalchemy_where_no_state_db_is_needed(args: list[str], tmp_path: Path) -> None:
    """The state layer's SQLAlchemy/Alembic (~100 ms) is imported on the first DB open,
    never by commands that need no DB."""
    task = tmp_path / "t.yaml"
    task.write_text("resources:\n  cloud: local\nrun: echo hi\n")
    argv = [str(task) if a == "TASK" else a for a in args]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(forbidden=("sqlalchemy", "alembic", "psycopg")),
         *argv], capture_output=True, text=True, timeout=60,
        env={**os.environ, "LAUNCHER_HOME": str(tmp_path / "home"), "PROBE_PREIMPORT": ""})
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE "))
    result = json.loads(line[len("PROBE "):])
    assert result["code"] in (0, None), proc.stderr[-2000:]
    assert result["bad"] == [], f"`launcher {' '.join(args)}` imported {result['bad']}"


def test_sqlalchemy_only_when_the_sqlite_schema_must_change(tmp_path: Path) -> None:
    """The first `status` on a fresh home creates the schema (Alembic: SQLAlchemy is
    loaded, so the probe is not blind); later commands read and write the SQLite file
    with sqlite3 alone (launcher/state/sqlite_conn.py)."""
    def bad() -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE.format(forbidden=("sqlalchemy", "alembic")), "status"],
            capture_output=True, text=True, timeout=60,
            env={**os.environ, "LAUNCHER_HOME": str(tmp_path / "home"), "PROBE_PREIMPORT": ""})
        line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("PROBE "))
        found: list[str] = json.loads(line[len("PROBE "):])["bad"]
        return found

    first = bad()
    assert "sqlalchemy" in first and "alembic" in first
    assert bad() == []
