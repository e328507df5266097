"""Building blocks for tests of one controller part at a time: a Context over a FakeOps and
the real JobStore (the test's own LAUNCHER_HOME), rows of a job whose attempt runs on a
FakeOps cluster, and recording stand-ins for the collaborators a part hands work to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from launcher.clouds.base import NodeState
from launcher.jobs.controller.context import Context
from launcher.jobs.crash import CrashPoints, SimulatedCrash
from launcher.jobs.deadline_store import DeadlineSpec
from launcher.jobs.state_machine import ManagedJobStatus as S
from launcher.jobs.store import AttemptPhase, AttemptRow, JobRow, JobStore
from tests.jobs.fake_ops import Behaviour, FakeCluster, FakeOps, Place
from tests.jobs.harness import fast_config, loader_for

T = TypeVar("T")

PLACES = [
    Place("aws", "us-east-1", "us-east-1a", 1.0),
    Place("aws", "us-east-1", "us-east-1b", 1.1),
    Place("aws", "us-west-2", "us-west-2a", 1.2),
    Place("gcp", "us-central1", "us-central1-a", 1.3),
]


@contextmanager
def context(ops: FakeOps | None = None, *, num_nodes: int = 1, crash_at: str = "",
            **cfg: Any) -> Iterator[Context]:
    """A Context over `ops` (default: FakeOps(PLACES)) and the test's JobStore; its pools
    are shut down and its store closed at the end. `crash_at`: a crash point that raises
    SimulatedCrash."""
    def die() -> None:
        raise SimulatedCrash()

    ctx = Context(ops or FakeOps(PLACES), loader_for(num_nodes), JobStore(),
                  fast_config(**cfg), CrashPoints(crash_at, die))
    try:
        yield ctx
    finally:
        ctx.shutdown(crashed=False)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def add_job(store: JobStore, *, strategy: str = "EAGER_NEXT_REGION", max_restarts: int = 0,
            codes: tuple[int, ...] = (), deadline: DeadlineSpec | None = None) -> JobRow:
    return store.add_job(name="job", task_yaml="run: true\n", task_source=None,
                         strategy=strategy, max_restarts_on_errors=max_restarts,
                         recover_on_exit_codes=codes, deadline=deadline)


def start_cluster(ops: FakeOps, name: str, *, place: Place = PLACES[0], nodes: int = 1,
                  behaviour: Behaviour | None = None) -> FakeCluster:
    """A cluster of `nodes` running nodes on `ops`, its job started now."""
    with ops.lock:
        c = FakeCluster(name, place, nodes,
                        {f"{name}-{i}": NodeState.RUNNING for i in range(nodes)}, time.time(),
                        behaviour or Behaviour(duration_s=60.0))
        ops.clusters[name] = c
        return c


def running_job(ctx: Context, *, attempt: int = 1, nodes: int = 1, place: Place = PLACES[0],
                behaviour: Behaviour | None = None, job: JobRow | None = None,
                market: str | None = None, **job_kw: Any) -> tuple[JobRow, AttemptRow]:
    """A job RUNNING attempt `attempt` (earlier attempts are not written) on a FakeOps
    cluster, its rows as the controller writes them."""
    assert isinstance(ctx.ops, FakeOps)
    store = ctx.store
    job = job or add_job(store, **job_kw)
    if job.status == S.PENDING:
        store.transition(job.id, S.STARTING, "test")
    name = f"mj-{job.id}-{attempt}"
    c = start_cluster(ctx.ops, name, place=place, nodes=nodes, behaviour=behaviour)
    store.add_attempt(job.id, attempt, name, "initial" if attempt == 1 else "preemption",
                      market=market)
    att = store.update_attempt(
        job.id, attempt, phase=AttemptPhase.RUNNING, cloud=place.cloud, region=place.region,
        zone=place.zone, instance_type="fake.1", num_nodes=nodes, use_spot=market != "on_demand",
        node_price=place.price, cluster_job_id=c.job_id, checkpoint_dir=None,
        running_at=time.time(), node_ids=tuple(c.nodes))
    job = store.transition(job.id, S.RUNNING, "test", attempt=attempt)
    return job, att


@dataclass
class RecordingRecovery:
    """Stands in for preemption.Recovery: records what it is handed."""

    preemptions: list[dict[str, Any]] = field(default_factory=list)
    decided: list[dict[str, Any]] = field(default_factory=list)

    async def on_preemption(self, job: JobRow, att: AttemptRow, lost: tuple[str, ...],
                            reason: str, at: float, *, draining: bool,
                            grace_s: float = 0.0) -> None:
        self.preemptions.append(dict(job=job.id, attempt=att.attempt, lost=lost, reason=reason,
                                     at=at, draining=draining, grace_s=grace_s))

    def decide_preempted(self, job: JobRow, att: AttemptRow, reason: str, at: float, *,
                         draining: bool, grace_s: float = 0.0) -> None:
        self.decided.append(dict(job=job.id, attempt=att.attempt, reason=reason, at=at,
                                 draining=draining))


class NoDeadline:
    """Stands in for the DeadlineDriver where no DEADLINE job is involved."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the deadline driver was asked for {name} (no DEADLINE job)")
