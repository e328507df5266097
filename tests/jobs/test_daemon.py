"""The controller daemon's diagnostics: SIGUSR1 writes every thread's stack to its log."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
from pathlib import Path

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
