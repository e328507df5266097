"""A cluster left INIT after its nodes were provisioned (the launch was killed, or its
agent install failed): is its gang whole and healthy enough to be reused by the next
`launch -c NAME` instead of being provisioned again?

It is when every recorded node (ranks 0..num_nodes-1) is still reported RUNNING by the
cloud AND answers a command over its runner (SSH, or a process on the local cloud)
within `answer_timeout` seconds. Anything less (no nodes recorded: provisioning never
finished; a node gone, stopped or silent) is not, and says why. Blocking; never raises
for a cloud or node problem (that is a reason not to reuse).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from launcher.clouds.base import Cloud, ClusterInfo, NodeState
from launcher.state.db import ClusterRecord, ClusterStatus, StateDB

ANSWER_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class GangCheck:
    """`info` when the INIT cluster's gang can be reused; else `why` not."""

    info: ClusterInfo | None
    why: str


def check_init_gang(db: StateDB, rec: ClusterRecord, cloud: Cloud,
                    answer_timeout: float = ANSWER_TIMEOUT_S) -> GangCheck:
    """See the module docstring. `rec` must be INIT."""
    assert rec.status is ClusterStatus.INIT
    info = db.cluster_info(rec.name)
    ranks = sorted(n.rank for n in info.nodes)
    if ranks != list(range(rec.num_nodes)):
        return GangCheck(None, f"{len(ranks)} of its {rec.num_nodes} node(s) recorded "
                         "(its provisioning never finished)")
    try:
        view = cloud.query(rec.name)
    except Exception as exc:  # the cloud cannot say: do not bet a launch on it
        return GangCheck(None, f"{rec.cloud} could not be asked: {type(exc).__name__}: {exc}")
    bad = [f"{n.node_id} {view.get(n.node_id, NodeState.TERMINATED).value}"
           for n in info.nodes if view.get(n.node_id) is not NodeState.RUNNING]
    if bad:
        return GangCheck(None, "node(s) " + ", ".join(bad))
    silent = _not_answering(info, answer_timeout)
    if silent:
        return GangCheck(None, "node(s) not answering: " + "; ".join(silent))
    return GangCheck(info, "")


def _not_answering(info: ClusterInfo, timeout: float) -> list[str]:
    """`node_id: why` for every node that does not run `true` within `timeout`."""
    from launcher.runtime.execution import close_runners, open_runners

    runners = open_runners(info)

    def probe(i: int) -> str | None:
        try:
            result = runners[i].run("true", timeout=timeout)
        except Exception as exc:
            return f"{info.nodes[i].node_id}: {type(exc).__name__}: {exc}"
        if not result.ok:
            return f"{info.nodes[i].node_id}: `true` exited {result.returncode}"
        return None

    try:
        with ThreadPoolExecutor(max(1, len(runners))) as ex:
            return [why for why in ex.map(probe, range(len(runners))) if why]
    finally:
        close_runners(runners)
