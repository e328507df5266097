"""A cloud SDK that is not installed: one line naming the extra, never a traceback.

Each command runs in a fresh interpreter in which the cloud's SDK cannot be imported:
its top-level packages are set to None in `sys.modules` before `main()` runs (the
documented way to make `import X` raise ModuleNotFoundError, and what
`importlib.util.find_spec` reports as absent), exactly what a machine without
`pip install 'launcher[CLOUD]'` sees. Credentials for the cloud are configured (env
and files, no network), so the SDK is the only thing missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RUN = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from launcher.cli import main
main(sys.argv[2:])
"""

# cloud -> (top-level packages to hide, a task that can only run there)
CLOUDS: dict[str, tuple[str, str]] = {
    "aws": ("boto3,botocore",
            "resources:\n  cloud: aws\n  instance_type: m7i.large\nrun: echo hi\n"),
    "gcp": ("google",
            "resources:\n  cloud: gcp\n  instance_type: n2-standard-2\nrun: echo hi\n"),
    "azure": ("azure",
              "resources:\n  cloud: azure\n  instance_type: Standard_D2s_v5\nrun: echo hi\n"),
    "nebius": ("nebius,grpc",
               "resources:\n  cloud: nebius\n  accelerators: H100:8\nrun: echo hi\n"),
}


def _credentials(cloud: str, home: Path) -> dict[str, str]:
    """Environment that gives `cloud` credentials (and nothing else any credentials)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_", "NEBIUS_",
                                "RUNPOD_", "LAMBDA_", "VAST_", "MSI_", "IDENTITY_"))}
    env["HOME"] = str(home)
    env["CLOUDSDK_CONFIG"] = str(home / "gcloud")
    env["NO_GCE_CHECK"] = "True"
    if cloud == "aws":
        env.update(AWS_ACCESS_KEY_ID="AKIDEXAMPLE", AWS_SECRET_ACCESS_KEY="secret")
    elif cloud == "gcp":
        adc = home / "adc.json"
        adc.write_text(json.dumps({"type": "service_account", "project_id": "p-1",
                                   "client_email": "x@p-1.iam.gserviceaccount.com"}))
        env.update(GOOGLE_APPLICATION_CREDENTIALS=str(adc), GOOGLE_CLOUD_PROJECT="p-1")
    elif cloud == "azure":
        env.update(AZURE_CLIENT_ID="c", AZURE_TENANT_ID="t", AZURE_CLIENT_SECRET="s",
                   AZURE_SUBSCRIPTION_ID="00000000-0000-0000-0000-000000000000")
    elif cloud == "nebius":
        env.update(NEBIUS_IAM_TOKEN="token")
    return env


def run(cloud: str, tmp_path: Path, *args: str, hide: str | None = None,
        extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**_credentials(cloud, tmp_path), **(extra_env or {})}
    env["LAUNCHER_HOME"] = str(tmp_path / "launcher-home")
    env["COLUMNS"] = "200"
    hidden = CLOUDS[cloud][0] if hide is None else hide
    proc = subprocess.run([sys.executable, "-c", RUN, hidden, *args], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=120, stdin=subprocess.DEVNULL)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


def extra_hint(cloud: str) -> str:
    return f"pip install 'launcher[{cloud}]'"


def task_file(cloud: str, tmp_path: Path) -> str:
    path = tmp_path / f"{cloud}.yaml"
    path.write_text(CLOUDS[cloud][1])
    return str(path)


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
def test_check_names_the_extra(cloud: str, tmp_path: Path) -> None:
    proc = run(cloud, tmp_path, "check", "--json")
    assert proc.returncode == 0, proc.stderr
    row = next(r for r in json.loads(proc.stdout) if r["cloud"] == cloud)
    assert row["enabled"] is False
    assert extra_hint(cloud) in row["reason"] and "SDK is not installed" in row["reason"], row
    assert "ModuleNotFoundError" not in row["reason"]
    table = run(cloud, tmp_path, "check")
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith(cloud + " "))
    assert extra_hint(cloud) in line


def test_check_with_the_sdk_installed_says_nothing_of_it(tmp_path: Path) -> None:
    """The hint comes from the SDK being absent, not from the credentials being there."""
    proc = run("aws", tmp_path, "check", "--json", hide="")
    row = next(r for r in json.loads(proc.stdout) if r["cloud"] == "aws")
    assert "pip install" not in row["reason"], row


@pytest.mark.parametrize("cloud", sorted(CLOUDS))
def test_launch_refuses_in_one_line(cloud: str, tmp_path: Path) -> None:
    proc = run(cloud, tmp_path, "launch", task_file(cloud, tmp_path), "-y", "-c", "x")
    assert proc.returncode != 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and extra_hint(cloud) in errors[0], proc.stderr


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_managed_job_launch_refuses_in_one_line(cloud: str, tmp_path: Path) -> None:
    proc = run(cloud, tmp_path, "jobs", "launch", task_file(cloud, tmp_path), "-y")
    assert proc.returncode != 0
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and extra_hint(cloud) in errors[0], proc.stderr


def test_dry_run_says_why_the_cloud_is_not_enabled(tmp_path: Path) -> None:
    proc = run("aws", tmp_path, "launch", task_file("aws", tmp_path), "--dryrun", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["chosen"] is None
    assert extra_hint("aws") in json.dumps(plan), plan.keys()


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_catalog_refresh_fails_in_one_line(cloud: str, tmp_path: Path) -> None:
    proc = run(cloud, tmp_path, "catalog", "refresh", "--cloud", cloud)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().startswith("Error: the ")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert extra_hint(cloud) in proc.stderr


def test_azure_refresh_needs_no_sdk(tmp_path: Path) -> None:
    """Azure's prices come from a public API over plain HTTPS: no SDK, so no hint (it
    fails here on the network, pointed at a closed port, with its own message)."""
    nowhere = "http://127.0.0.1:9"  # refused at once
    proc = run("azure", tmp_path, "catalog", "refresh", "--cloud", "azure", "--region", "eastus",
               extra_env={"HTTPS_PROXY": nowhere, "https_proxy": nowhere})
    assert proc.returncode != 0
    assert "pip install" not in proc.stderr and "SDK" not in proc.stderr, proc.stderr


def test_down_of_an_aws_cluster_names_the_extra(tmp_path: Path) -> None:
    """Teardown reaches boto3 inside the provisioner: the error still reads as one line."""
    from launcher.state.db import PlacementRecord, StateDB

    with StateDB(tmp_path / "launcher-home" / "state.db") as db:
        db.create_cluster("c1", PlacementRecord(
            cloud="aws", region="us-east-1", zone=None, instance_type="m5.large", num_nodes=1,
            use_spot=False, accelerator=None, accelerator_count=0, hourly_cost=0.1,
            resources="1x m5.large"))
    proc = run("aws", tmp_path, "down", "c1", "-y")
    assert proc.returncode != 0
    assert extra_hint("aws") in proc.stderr and "ModuleNotFoundError" not in proc.stderr
