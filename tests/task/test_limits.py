"""Input limits and node paths of the task model: oversized task files and scripts are
refused with a message naming the limit; file_mounts targets never climb out of the home."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from launcher.errors import TaskValidationError
from launcher.task.fields import node_path_problem
from launcher.task.model import (
    MAX_ENV_BYTES,
    MAX_SCRIPT_BYTES,
    MAX_TASK_FILE_BYTES,
    Task,
)


def test_task_file_over_the_limit_is_refused_before_parsing(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    # 1.3 M env entries, like the file that once took 22 s and 1.2 GB to refuse
    with open(big, "w") as f:
        f.write("run: echo\nenvs:\n")
        i = 0
        while f.tell() <= MAX_TASK_FILE_BYTES:
            f.write("".join(f"  E{j}: v\n" for j in range(i, i + 10_000)))
            i += 10_000
    tracemalloc.start()
    try:
        with pytest.raises(TaskValidationError) as err:
            Task.from_yaml(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    msg = str(err.value)
    assert "limited to 10.0 MiB" in msg and "big.yaml" in msg and "alias" not in msg
    assert peak < 1024 * 1024  # refused from its size alone: nothing of it was read


def test_task_file_at_the_limit_is_read(tmp_path: Path) -> None:
    f = tmp_path / "ok.yaml"
    body = "run: echo hi\n# "
    f.write_text(body + "x" * (MAX_TASK_FILE_BYTES - len(body) - 1) + "\n")
    assert os.path.getsize(f) == MAX_TASK_FILE_BYTES
    assert Task.from_yaml(f).run == "echo hi"


def test_task_string_over_the_limit_is_refused() -> None:
    with pytest.raises(TaskValidationError, match="limited to 10.0 MiB"):
        Task.from_yaml_str("run: echo\n#" + "x" * MAX_TASK_FILE_BYTES)


@pytest.mark.parametrize("key", ["run", "setup"])
def test_script_over_the_node_limit_names_it(key: str) -> None:
    body = "echo " + "x" * MAX_SCRIPT_BYTES
    with pytest.raises(TaskValidationError) as err:
        Task.from_dict({"run": "true", key: body} if key == "setup" else {"run": body})
    msg = str(err.value)
    assert err.value.field == key
    assert "the limit is 64.0 KiB" in msg and "Put a long script in a file under workdir" in msg


def test_script_at_the_limit_is_accepted() -> None:
    body = "#" * (MAX_SCRIPT_BYTES - len("\necho ok")) + "\necho ok"
    assert len(body.encode()) == MAX_SCRIPT_BYTES
    assert Task.from_dict({"run": body}).run == body


def test_envs_and_secrets_over_the_limit_are_refused() -> None:
    big = "v" * (MAX_ENV_BYTES // 2)
    with pytest.raises(TaskValidationError) as err:
        Task.from_dict({"run": "true", "envs": {"A": big}, "secrets": {"B": big}})
    assert err.value.field == "envs" and "the limit is 64.0 KiB" in str(err.value)
    # the same through a --env override on a task that fits
    with pytest.raises(TaskValidationError, match="limit is 64.0 KiB"):
        Task.from_yaml_str("run: true\nenvs:\n  A: small\n", env_overrides={"A": big * 3})
    ok = Task.from_dict({"run": "true", "envs": {"A": "v" * (MAX_ENV_BYTES // 2)}})
    assert len(ok.envs["A"]) == MAX_ENV_BYTES // 2


# ------------------------------------------------------------------ file_mounts targets


@pytest.mark.parametrize("target", [
    "../../../../tmp/x", "..", "~/..", "~/../x", "a/../../x", "./../x", "~/a/../../b",
])
def test_file_mount_target_climbing_out_of_home_is_refused(tmp_path: Path, target: str) -> None:
    src = tmp_path / "f.txt"
    src.write_text("x")
    with pytest.raises(TaskValidationError) as err:
        Task.from_dict({"run": "true", "file_mounts": {target: str(src)}})
    assert "climbs out of the node's home" in str(err.value)
    assert err.value.field == f"file_mounts.{target}"


@pytest.mark.parametrize("target", ["/data/x", "~/data", "data/x", "~", "a/../b", "~/a/.."])
def test_file_mount_targets_inside_home_or_absolute_are_fine(target: str) -> None:
    assert node_path_problem(target) is None


def test_file_mount_target_tilde_user_is_refused() -> None:
    assert "'~user' paths are not supported" in (node_path_problem("~bob/x") or "")


def test_file_mount_target_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    yaml_path = tmp_path / "t.yaml"
    yaml_path.write_text("run: true\nfile_mounts:\n  ../x: f\n")
    with pytest.raises(TaskValidationError) as err:
        Task.from_yaml(yaml_path)
    assert err.value.line == 3
