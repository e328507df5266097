"""Launching an attempt: adopting a cluster a dead controller left provisioning, backing
off after a refused launch, choosing the market (DEADLINE jobs), waiting until the earlier
attempts' clusters are gone, recording the new attempt (its cluster name first: crash-safety
rules 1 and 3), provisioning it (a cancel aborts it), and deciding how a failed launch ends.
"""

from __future__ import annotations

import logging
import time

from launcher.clouds.sdk import error_text
from launcher.jobs import log_sync
from launcher.jobs.controller.context import Cancelled, Context, RecoverySteps
from launcher.jobs.controller.deadline import DeadlineDriver
from launcher.jobs.controller.deadline_events import SPOT, DeadlineEvents
from launcher.jobs.controller.finish import Finisher
from launcher.jobs.controller.loss import LossDetector
from launcher.jobs.controller.outcomes import CAUSE_AFTER, Decisions, Outcome
from launcher.jobs.controller.placement import LaunchRequests
from launcher.jobs.controller.preemption import Recovery
from launcher.jobs.controller.running import RunningRecorder
from launcher.jobs.controller.settings import ControllerConfig, cluster_name_for
from launcher.jobs.crash import SimulatedCrash
from launcher.jobs.ops_interface import (
    AttemptLaunch,
    LaunchAbortedError,
    LaunchRequest,
    NoCapacityError,
    PermanentLaunchError,
    RateLimitedOpsError,
    SetupFailedError,
    UnhealthyNodeError,
)
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow

log = logging.getLogger("launcher.jobs.controller")


def tail_count(attempts: list[AttemptRow], outcome: str) -> int:
    """How many of the last attempts in a row ended with `outcome`."""
    n = 0
    for a in reversed(attempts):
        if a.outcome != outcome:
            break
        n += 1
    return n


GATE_FAILED = "failed the health gate"
RATE_LIMITED = "rate limited by"  # in the reason of a launch the cloud throttled


def gate_failures_in_a_row(attempts: list[AttemptRow]) -> int:
    """How many of the last attempts in a row ended because a node failed the health gate."""
    n = 0
    for a in reversed(attempts):
        if GATE_FAILED not in (a.outcome_reason or ""):
            break
        n += 1
    return n


def launch_errors_in_a_row(attempts: list[AttemptRow]) -> int:
    """How many of the last attempts in a row ended with a launch error, not counting the
    launches a cloud throttled (those are retried however many there are)."""
    n = 0
    for a in reversed(attempts):
        if a.outcome != Outcome.LAUNCH_ERROR:
            break
        if RATE_LIMITED not in (a.outcome_reason or ""):
            n += 1
    return n


def backoff_s(cfg: ControllerConfig, attempts: list[AttemptRow]) -> float:
    """The wait before retrying a refused or failed launch: doubling with each retry in
    a row, from `backoff_min_s` up to `backoff_max_s`."""
    tail = tail_count(attempts, attempts[-1].outcome or "") if attempts else 0
    return min(cfg.backoff_max_s, cfg.backoff_min_s * 2 ** max(0, tail - 1))


def cause_after(attempts: list[AttemptRow]) -> str:
    """The cause of the next attempt: what ended the last attempt that ended the job's
    run ("preemption", "error-restart", ...); a retried launch keeps its own cause."""
    for a in reversed(attempts):
        cause = CAUSE_AFTER.get(a.outcome or "")
        if cause:
            return cause
        if a.outcome in (Outcome.NO_RESOURCE_RETRY, Outcome.LAUNCH_ERROR):
            return a.cause  # a retry of the same (re)launch
    return "initial"


class AttemptLauncher:
    """Launches a job's next attempt (see the module docstring). Returns once the attempt
    runs or has an outcome (which the loop applies)."""

    def __init__(self, ctx: Context, requests: LaunchRequests, decisions: Decisions,
                 recovery: Recovery, loss: LossDetector, finisher: Finisher,
                 running: RunningRecorder, deadline: DeadlineDriver,
                 deadline_events: DeadlineEvents, steps: RecoverySteps) -> None:
        self.ctx = ctx
        self.store = ctx.store
        self.requests = requests
        self.decisions = decisions
        self.recovery = recovery
        self.loss = loss
        self.finisher = finisher
        self.running = running
        self.deadline = deadline
        self.deadline_events = deadline_events
        self.steps = steps
        self._throttled_on: dict[int, str] = {}  # job -> the cloud that last throttled it

    async def launch(self, job: JobRow, attempts: list[AttemptRow]) -> None:
        """One step of launching job `job` (STARTING or RECOVERING), whose attempts are
        `attempts`: resume what a crash interrupted, or record and launch a new attempt."""
        ctx, cfg, ops = self.ctx, self.ctx.cfg, self.ctx.ops
        last = attempts[-1] if attempts else None
        if last is not None and last.outcome is None and last.replacing:
            self.recovery.abandon_replace(job, last)  # crashed while replacing nodes in place
            return
        if last is not None and last.outcome is None and last.phase == AttemptPhase.RUNNING:
            # Crash window: attempt recorded RUNNING, job transition lost.
            self.running.to_running(job, last)
            return
        if last is not None and last.outcome is None and last.phase == AttemptPhase.PROVISIONING:
            adopted = await ctx.launch_call(ops.adopt, last.cluster_name)
            log_sync.note_controller_restart(last, adopted=adopted is not None)
            if adopted is not None:
                log.info("job %d: adopted cluster %s", job.id, last.cluster_name)
                self.running.record(job, last, adopted)
                return
            await ctx.launch_call(ops.teardown, last.cluster_name)  # partial leftovers
            att = last
        else:
            deadline = job.deadline is not None
            if deadline and last is not None and await self.deadline.resume_switch(job, last):
                return  # the next pass adopts the switch's spot cluster
            if last is not None and last.outcome in (Outcome.NO_RESOURCE_RETRY,
                                                     Outcome.LAUNCH_ERROR) and not (
                    deadline and last.market == SPOT):  # a refused spot launch: by ticks
                await ctx.cancels.sleep(job.id, backoff_s(cfg, attempts))
            market = None
            if deadline:
                market = await self.deadline.market(job, attempts)
                if market is None:
                    return  # waited for the next tick: decide again
                self.steps.mark(job.id, "decided")  # (a recovery's breakdown: waiting is deciding)
            await self.finisher.old_clusters_gone(attempts)
            self.steps.mark(job.id, "old_gone")
            n = last.attempt + 1 if last else 1
            att = self.store.add_attempt(
                job.id, n, cluster_name_for(cfg.cluster_prefix, job.id, n),
                cause_after(attempts), market=market,
            )
            ctx.hit("attempt_recorded")
        self.steps.mark(job.id, "attempt")
        req = self.requests.build(job, att, attempts, market=att.market)
        try:
            launch = await self._launch_gated(job, att, attempts, req)
        except LaunchAbortedError:
            raise Cancelled from None
        except RateLimitedOpsError as exc:  # not the launch's fault: retried, not counted
            wait = ctx.launches.throttled(exc.cloud, exc.retry_after_s)
            self._throttled_on[job.id] = exc.cloud
            log.warning("job %d: %s throttled the launch; launches there back off %.0f s",
                        job.id, exc.cloud, wait)
            self.decisions.decide(job, att, Outcome.LAUNCH_ERROR,
                                  reason=f"{RATE_LIMITED} {exc.cloud}: {error_text(exc)}")
            return
        except NoCapacityError as exc:
            if job.deadline is not None and att.market == SPOT:  # spot is down: by ticks
                self.deadline_events.refused(job, att, str(exc))
                self.decisions.decide(job, att, Outcome.NO_RESOURCE_RETRY,
                                      reason=f"no spot capacity: {exc}")
                return
            final = att.cause == "initial" or tail_count(
                attempts, Outcome.NO_RESOURCE_RETRY) + 1 >= cfg.max_no_capacity_retries
            self.decisions.decide(job, att, Outcome.NO_RESOURCE if final
                                  else Outcome.NO_RESOURCE_RETRY, reason=str(exc))
            return
        except PermanentLaunchError as exc:
            self.decisions.decide(job, att, Outcome.LAUNCH_FAILED, reason=str(exc))
            return
        except UnhealthyNodeError as exc:  # like a lost node: replace it (docs/health.md)
            reason = f"node {exc.rank} {GATE_FAILED}: {exc.finding}"
            in_a_row = gate_failures_in_a_row(attempts) + 1
            if in_a_row >= cfg.max_launch_errors:  # an image without a driver never heals
                self.decisions.decide(job, att, Outcome.LAUNCH_FAILED, reason=(
                    f"{in_a_row} launches in a row failed the health gate; last: {reason}"))
                return
            self.recovery.decide_preempted(job, att, reason, time.time(), draining=False)
            return
        except SetupFailedError as exc:
            lost = await self.loss.confirm_lost(att.cluster_name, ())
            if lost:
                self.recovery.decide_preempted(
                    job, att, f"node(s) {', '.join(lost)} preempted during setup", time.time(),
                    draining=False)
            else:
                self.decisions.decide(job, att, Outcome.SETUP_FAILED, reason=str(exc))
            return
        except (Cancelled, SimulatedCrash):
            raise
        except Exception as exc:  # transient or unexpected: the cloud decides what it was
            lost = await self.loss.confirm_lost(att.cluster_name, ())
            if lost:
                self.recovery.decide_preempted(
                    job, att, f"node(s) {', '.join(lost)} preempted during launch",
                    time.time(), draining=False)
                return
            errors = launch_errors_in_a_row(attempts) + 1
            outcome = Outcome.LAUNCH_FAILED if errors >= cfg.max_launch_errors else (
                Outcome.LAUNCH_ERROR)
            log.warning("job %d: launch error %d: %r", job.id, errors, exc)
            self.decisions.decide(job, att, outcome,
                                  reason=f"launch error: {error_text(exc)}")
            return
        ctx.launches.succeeded(launch.cloud)
        self._throttled_on.pop(job.id, None)
        ctx.hit("provisioned")
        self.steps.mark(job.id, "submitted")
        if ctx.cancels.requested(job.id):
            self.store.update_attempt(job.id, att.attempt, phase=AttemptPhase.RUNNING,
                                      cluster_job_id=launch.cluster_job_id)
            raise Cancelled
        self.running.record(job, att, launch)

    async def _launch_gated(self, job: JobRow, att: AttemptRow, attempts: list[AttemptRow],
                            req: LaunchRequest) -> AttemptLaunch:
        """Wait while a cloud this launch is likely to go to backs off (the one that last
        throttled the job, else its last attempt's), then launch in one of the
        `max_parallel_launches` slots (launch_gate.py); a relaunch is served first."""
        gate = self.ctx.launches
        last_cloud = next((a.cloud for a in reversed(attempts) if a.cloud), None)
        clouds = (self._throttled_on.get(job.id, last_cloud),)
        while (wait := gate.wait_s(clouds)) > 0:
            await self.ctx.cancels.sleep(job.id, wait)
        async with gate.slot(urgent=att.cause != "initial"):
            return await self._launch_cancellable(job.id, att, req)

    async def _launch_cancellable(self, job_id: int, att: AttemptRow, req: LaunchRequest
                                  ) -> AttemptLaunch:
        """provision_and_start in a worker thread; a cancel meanwhile aborts it at once
        (its nodes are terminated under it) instead of waiting for setup to end."""
        return await self.ctx.call_cancellable(job_id, att.cluster_name, "launch",
                                               self.ctx.ops.provision_and_start, req)
