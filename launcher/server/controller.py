"""The managed-jobs controller inside the server process.

The same `launcher.jobs.controller.Controller` the `python -m launcher.jobs.daemon`
process runs, on its own thread with its own asyncio loop (its DB reads are
synchronous, so it must not share the loop that serves requests), under the same
`controller.lock` (`launcher.jobs.daemon.hold_lock`). So exactly one controller works
on a LAUNCHER_HOME's jobs, whoever started it; `jobs_launch` in the server finds the
lock held and starts no daemon; a server killed with `kill -9` drops the lock with
its process, and the next server resumes every job from the DB (the controller's
crash-safety rules, launcher/jobs/controller/__init__.py). Unlike the daemon it
never exits when idle.

On a team server (the state DB on PostgreSQL, shared by several replicas, each with its
own LAUNCHER_HOME) every replica runs one: the jobs are split between them by leases
(launcher/jobs/leases.py), and a replica killed or cut off has its jobs taken over by
the others once its leases expire.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from launcher.jobs import paths

log = logging.getLogger("launcher.server.controller")


class EmbeddedController:
    """Start with `start()`; `stop()` lets go (jobs keep running; the next one resumes)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopping = threading.Event()
        self.holding = threading.Event()  # set while this process holds the lock
        self.replica_id: str | None = None  # on a team server (launcher/jobs/leases.py)

    def start(self, wait_s: float = 10.0) -> bool:
        """Start the thread; True once it holds the controller lock (within `wait_s`).
        Asks a controller daemon already running on this home to stop first."""
        from launcher.jobs.daemon import probe

        if probe().running:
            from launcher.api.jobs import jobs_controller_stop

            log.info("a controller daemon runs on this home: stopping it (jobs resume here)")
            jobs_controller_stop()
        self._attach_log()
        self._thread = threading.Thread(target=self._main, name="jobs-controller", daemon=True)
        self._thread.start()
        return self.holding.wait(wait_s)

    def _attach_log(self) -> None:
        """The controller's lines go to managed_jobs/controller.log, as the daemon's do
        (`launcher jobs logs --controller` reads them there)."""
        paths.jobs_dir().mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(paths.controller_log_path())
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        jobs_log = logging.getLogger("launcher.jobs")
        jobs_log.addHandler(handler)
        jobs_log.setLevel(logging.INFO)

    def _main(self) -> None:
        from launcher.jobs.daemon import hold_lock

        while not self._stopping.is_set():
            with hold_lock() as got:
                if got:
                    self.holding.set()
                    try:
                        self._run()
                    finally:
                        self.holding.clear()
                    return
            # another controller (a daemon that was finishing up) still holds it
            if self._stopping.wait(0.5):
                return

    def _run(self) -> None:
        from launcher.jobs import leases
        from launcher.jobs.cluster_ops import RealClusterOps
        from launcher.jobs.controller import Controller
        from launcher.jobs.daemon import config_from_env, load_task
        from launcher.jobs.store import JobStore

        store = JobStore()
        try:
            for jid in store.forget_ended_secrets():
                log.info("job %d: deleted the secrets file it left behind", jid)
        finally:
            store.close()
        cfg = config_from_env()
        cfg.idle_exit_s = None  # the server's controller never leaves

        async def runner() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            if self._stopping.is_set():
                return
            ctrl = Controller(RealClusterOps(), load_task, config=cfg)  # type: ignore[arg-type]
            if leases.enabled():
                ctrl.leases = leases.Leases(ctrl.store, leases.REPLICA_ID)
                self.replica_id = ctrl.leases.replica_id
                log.info("server replica %s: jobs are leased", self.replica_id)
            # a clean stop gives the leases back (Controller.run): the others take them now
            await ctrl.run(self._stop)

        log.info("managed-jobs controller runs in the server")
        asyncio.run(runner())

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
