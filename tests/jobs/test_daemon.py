"""The controller daemon: SIGUSR1 writes every thread's stack to its log; its settings
come from the config file's `jobs.controller` section and the environment."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from pathlib import Path

import pytest

from launcher.config.settings import parse_config
from launcher.errors import ConfigError
from launcher.jobs import daemon, paths


def test_sigusr1_appends_every_threads_stack_to_the_controller_log(launcher_home: Path) -> None:
    paths.jobs_dir().mkdir(parents=True, exist_ok=True)
    paths.controller_log_path().write_text("before\n")
    release = threading.Event()

    def stuck_in_a_launch() -> None:
        release.wait(30)

    worker = threading.Thread(target=stuck_in_a_launch, name="launch-0")
    worker.start()
    try:
        daemon._dump_stacks_on_sigusr1()
        os.kill(os.getpid(), signal.SIGUSR1)
    finally:
        faulthandler.unregister(signal.SIGUSR1)
        release.set()
        worker.join()
        for f in daemon._STACKS_FILE:
            f.close()
        daemon._STACKS_FILE.clear()
    text = paths.controller_log_path().read_text()
    assert text.startswith("before\n")  # appended, the log is kept
    assert "stuck_in_a_launch" in text  # the waiting thread's frame is named
    assert "test_sigusr1_appends" in text  # and the main thread's


def test_the_config_files_controller_section_sizes_the_controller(
        launcher_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (launcher_home / "config.yaml").write_text(
        "jobs:\n  controller:\n    max_parallel_launches: 24\n    agent_check_workers: 16\n"
        "    cloud_poll_interval: 2s\n")
    for var in ("LAUNCHER_JOBS_MAX_PARALLEL_LAUNCHES", "LAUNCHER_JOBS_CLOUD_POLL_S",
                "LAUNCHER_JOBS_WATCH_WORKERS"):
        monkeypatch.delenv(var, raising=False)
    cfg = daemon.config_from_env()
    assert (cfg.max_parallel_launches, cfg.watch_workers, cfg.cloud_poll_s) == (24, 16, 2.0)
    monkeypatch.setenv("LAUNCHER_JOBS_MAX_PARALLEL_LAUNCHES", "4")  # the environment wins
    assert daemon.config_from_env().max_parallel_launches == 4


@pytest.mark.parametrize(("body", "field"), [
    ("max_parallel_launches: 0", "jobs.controller.max_parallel_launches"),
    ("agent_check_workers: many", "jobs.controller.agent_check_workers"),
    ("cloud_poll_interval: 0.01", "jobs.controller.cloud_poll_interval"),
    ("poll_everything: true", "jobs.controller.poll_everything"),
])
def test_a_bad_controller_setting_is_named(body: str, field: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(f"jobs:\n  controller:\n    {body}\n")
    assert f"field '{field}'" in str(exc.value)
