"""A live Slurm cluster per test (tests/clouds/slurm/lab.py), configured as the
`slurm` cloud's cluster `lab` with `login: localhost`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.clouds.slurm.lab import LabNode, LabPartition, SlurmLab, unavailable_reason
from tests.fakes import gpu_image

LabFactory = Callable[..., SlurmLab]


@pytest.fixture
def slurm_lab(tmp_path: Path, launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LabFactory]:
    """lab(nodes, partitions=None, config="", proctrack="linuxproc") -> a started SlurmLab, with
    SLURM_CONF pointing at it and config.yaml naming it `lab`. Torn down after."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    labs: list[SlurmLab] = []

    def start(nodes: list[LabNode], partitions: list[LabPartition] | None = None,
              config: str = "", proctrack: str = "linuxproc") -> SlurmLab:
        workdir = tmp_path / f"slurm{len(labs)}"
        workdir.mkdir()
        lab = SlurmLab(workdir, nodes, partitions or [], proctrack=proctrack)
        labs.append(lab)
        lab.start()
        for k, v in lab.env.items():
            monkeypatch.setenv(k, v)
        # The nodes' "image": the fake nvidia-smi of tests/fakes, describing the lab's 4
        # A100s per node, so the health gate before setup finds the GPUs that were paid for
        # (srun passes this environment on to the job steps).
        for k, v in gpu_image(workdir, count=4, name="NVIDIA A100-SXM4-80GB",
                              memory_mib=81920).items():
            monkeypatch.setenv(k, v if k != "PATH" else f"{v.split(':')[0]}:{os.environ['PATH']}")
        launcher_home.mkdir(parents=True, exist_ok=True)
        (launcher_home / "config.yaml").write_text(
            "slurm:\n  clusters:\n    lab:\n      login: localhost\n" + config)
        return lab

    yield start
    for lab in labs:
        lab.close()
