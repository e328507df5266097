"""The managed-jobs controller: one asyncio loop driving every live managed job.

It is a small loop (`loop.Controller`) composed of parts, each given what it uses
(no part reaches into another's state; the shared plumbing is `context.Context`):

- `launch.AttemptLauncher`    launching an attempt (adopt after a crash, back off, record,
                              provision, decide how a failed launch ends);
- `placement.LaunchRequests`  the attempt's LaunchRequest: placement tiers of the job's
                              recovery strategy, the drains' gate, the environment;
- `running.RunningRecorder`   recording that an attempt runs (the job's RUNNING);
- `watch.Watcher`             watching a running attempt (notices, the cloud's view, the
                              run's end, the log sync, a DEADLINE tick);
- `poller.CloudPoller`        the cloud's view of every watched attempt, one query per
                              cloud and region per tick; it wakes a watch on a loss;
- `launch_gate.LaunchGate`    launch slots (`max_parallel_launches`; relaunches first)
                              and per-cloud back-off when a cloud rate-limits;
- `loss.LossDetector`         what the cloud says about an attempt's nodes (a loss);
- `preemption.Recovery`       deciding PREEMPTED (blocks, work lost, drains) or replacing
                              lost nodes in place;
- `deadline.DeadlineDriver`   the DEADLINE strategy's decisions and switches, over the
                              gang events `deadline_events.DeadlineEvents` writes;
- `finish.Finisher`           applying outcomes, drains, teardown, cancel;
- `logs.AttemptLogs`          an attempt's output: synced while it runs, saved before its
                              cluster goes;
- `outcomes.Decisions`        recording an attempt's outcome (before any side effect).

Crash-safety rules (a `kill -9` may hit between any two lines):
1. An attempt's cluster name is written to the DB before the cloud is asked for
   anything, so a restarted controller finds the cluster (adopts it or tears it down).
2. A decision about an attempt (its `outcome`) is written before its side effects
   (log fetch, teardown); the status transition that applies it is written with
   `outcome_applied = 1` in the same transaction. On restart, an outcome not yet
   applied is applied again; side effects are idempotent.
3. A new attempt is created only once the previous one has an outcome, so there
   is never more than one live cluster per job except while a preempted one drains
   after an interruption notice, and while a DEADLINE job's spot gang is set up to
   take over from its on-demand one (its name is written on the on-demand attempt,
   `switch_cluster`, before the cloud is asked: see deadline.py); every
   attempt not yet torn down is torn down by the driver or by the startup sweep (an
   abandoned switch's spot cluster by the driver). A new attempt is provisioned only
   once the earlier attempts' clusters are torn down (`Finisher.old_clusters_gone`) -
   except a preempted attempt's: its teardown runs in the background meanwhile, tracked
   by its row (outcome applied, `torn_down_at` NULL), which the startup sweep finishes.
4. A DEADLINE job's decisions are logged (deadline_store.py) before they are acted
   on, and its policy's observation is rebuilt from the DB only, so a restarted
   controller decides as before and acts on a decision it logged but had not acted on.
5. An in-place node replacement writes its intent (lost nodes, time, reason) before
   the cloud is asked and clears it with the new gang's job id; a restart that finds
   the intent recovers with a full relaunch (`Recovery.abandon_replace`).

Blocking calls (cloud, agent, teardown) run in bounded thread pools (see context.py):
one for launches/teardowns (slow), one for head-agent checks (fast), one for the batched
cloud poll, so a burst of relaunches never delays preemption detection. Nothing in the
controller costs a cloud call per job per tick: see docs/managed-jobs.md, "Scale".
"""

from launcher.jobs.controller.loop import Controller
from launcher.jobs.controller.settings import ControllerConfig

__all__ = ["Controller", "ControllerConfig"]
