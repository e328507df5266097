"""What the `launcher api deploy` tests share: the "image" of the VM bodies, CLI runs in
a given home, and moto's view of what the deploy made.

The bodies boot this machine's files with its system python3 (like a stock image), so
the deploy creates a real venv there and pip-installs the uploaded wheel with its
`[server]` extra. Bodies cannot reach a package index: the image carries the
dependencies instead, as a directory on the bodies' PYTHONPATH holding this test
interpreter's installed packages except launcher itself (`image_dir`), and pip is told
`PIP_NO_INDEX=1`, so every dependency is found already satisfied and launcher comes
from the wheel alone. The bodies also get what the cloud gives a real VM: the AWS
endpoint (moto), its region, no instance metadata; and the controller's fast polls.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.aws_moto import AWSFake
from tests.server.conftest import FAST

CLI = [sys.executable, "-c", "from launcher.cli import main; main()"]
REPO = Path(__file__).resolve().parents[2]
_SKIP = ("launcher", "__editable__", "_distutils_hack", "pip", "setuptools", "pkg_resources",
         "_pytest", "pytest", "py.py")


def image_dir(root: Path) -> Path:
    """A site directory of this interpreter's packages, launcher left out (symlinks)."""
    image = root / "image-site"
    if image.exists():
        return image
    image.mkdir(parents=True)
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if entry.name.startswith(_SKIP) or entry.suffix == ".pth":
            continue
        (image / entry.name).symlink_to(entry)
    return image


def body_env(image: Path, endpoint: str) -> dict[str, str]:
    return {"PYTHONPATH": str(image), "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "AWS_ENDPOINT_URL": endpoint,
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
            **FAST, "LAUNCHER_JOBS_IDLE_EXIT_S": "120", "LAUNCHER_JOBS_LOG_SYNC_S": "0.5"}


@dataclass
class Run:
    rc: int
    out: str
    err: str


def cli(home: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> Run:
    """`launcher ARGS` with LAUNCHER_HOME=home (this test's AWS settings inherited)."""
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env={**os.environ, "LAUNCHER_HOME": str(home),
                                         "COLUMNS": "200", "NO_COLOR": "1", **(env or {})})
    return Run(proc.returncode, proc.stdout, proc.stderr)


def client_home(root: Path, name: str) -> Path:
    home = root / name
    home.mkdir(mode=0o700)
    return home


@pytest.fixture
def deploy_cloud(aws_cloud: AWSFake, launcher_home: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[AWSFake]:
    """moto with bodies booting the deploy's "image" (tests/server/deploy_env.py), and an
    AWS credentials file for `--with-credentials aws` to copy."""
    assert aws_cloud.bodies is not None
    image = image_dir(tmp_path_factory.getbasetemp())
    aws_cloud.bodies.env = body_env(image, aws_cloud.endpoint)
    aws_cloud.bodies.node_timeout = 30.0
    creds = Path(os.environ["AWS_SHARED_CREDENTIALS_FILE"])
    creds.write_text("[default]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    yield aws_cloud
