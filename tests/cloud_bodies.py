"""Bodies for a cloud fake's instances: one sshd node per live instance (see TESTING.md,
"Clouds end to end"). Shared by every cloud's tests; nothing here knows a cloud.

    bodies = CloudBodies(lab, list_instances)   # list_instances() -> [(id, private_ip, key)]
    bodies.start()                              # background poll every 50 ms
    ...                                         # the product creates instances in the fake
    nodes = bodies.wait_for(["i-1", "i-2"])     # {instance_id: SSHNode}
    bodies.kill(["i-1"])                        # the body dies now (preemption, lost host)
    bodies.close()                              # every node killed, thread stopped

`env` is the image's environment, set in every SSH session on a body (e.g. the AWS
adapter makes boto3 importable, as the Deep Learning AMI has it).

A cloud plugs in with one function, `list_instances()`, returning the fake's *live*
instances (those a real cloud would have booted: pending/running; not stopped,
terminated or gone) as `(instance_id, private_ip, authorized_public_key)`, optionally
with a 4th item, the port sshd listens on (default 22; RunPod maps 22 elsewhere); the key is
what the product registered for the instance (key pair, metadata ssh-keys, API key
list) — what cloud-init writes to authorized_keys. Login user: root. For each new
instance a node starts at its private IP; for each instance no longer listed its node
is destroyed. A stopped then started instance gets its node back with the same /root
and host key (its disk), as long as it keeps its id and IP.

Every private IP must lie inside the lab's subnet: an instance anywhere else gets no
body, and the error (an AssertionError naming the instance) is raised by `sync`,
`wait_for`, `check` and `close`, so the test fails rather than the product being led
to connect to an address the tests do not serve.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.netns import NetnsLab, NodeSpec, SSHNode

# (id, private_ip, key) or (id, private_ip, key, ssh_port): the port sshd listens on
ListInstances = Callable[[], Iterable[tuple[Any, ...]]]

POLL_INTERVAL = 0.05


NODE_START_ATTEMPTS = 3  # a body start that times out is retried (a loaded CI machine)

class CloudBodies:
    """Keeps one sshd node per live instance of a cloud fake, in a background thread."""

    def __init__(
        self,
        lab: NetnsLab,
        list_instances: ListInstances,
        *,
        name: str = "cloud",
        interval: float = POLL_INTERVAL,
        node_timeout: float = 20.0,
        env: dict[str, str] | None = None,
        env_for: Callable[[str], dict[str, str]] | None = None,
    ) -> None:
        if not lab.netns_mode:
            raise RuntimeError("cloud bodies need network-namespace nodes (at chosen IPs)")
        self.lab = lab
        self.name = name
        self.list_instances = list_instances
        self.interval = interval
        self.node_timeout = node_timeout
        self.env = env  # the "image": variables every SSH session on a body gets
        self.env_for = env_for  # or the image per instance id (e.g. its GPU model)
        self.nodes: dict[str, SSHNode] = {}  # instance id -> its live node
        self.errors: list[BaseException] = []  # refused instances, failed node starts
        self.started_total = 0  # nodes ever started (a test may assert on it)
        self._dirs = Path(lab.workdir) / f"bodies-{name}-{id(self):x}"
        self._killed: set[str] = set()  # bodies killed on purpose: never restarted
        self._refused: set[str] = set()
        self._list_error: BaseException | None = None
        self._lock = threading.RLock()  # one poll or kill at a time
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._requested = 0  # sync requests issued
        self._done = 0  # highest request served by a finished poll
        self._thread: threading.Thread | None = None

    # ---- life ----------------------------------------------------------------------

    def start(self) -> CloudBodies:
        self._thread = threading.Thread(target=self._loop, name=f"bodies-{self.name}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and destroy every node; then raise what went wrong, if anything."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        with self._lock:
            for node in self.nodes.values():
                node.destroy()
            self.nodes.clear()
        self.check()

    def wake(self) -> None:
        """Poll now rather than at the next tick."""
        self._wake.set()

    def sync(self, timeout: float = 10.0) -> None:
        """Return once a poll that started after this call has finished: every instance
        live now has its node, every instance gone now has none."""
        with self._cond:
            self._requested += 1
            target = self._requested
        self._wake.set()
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._done < target:
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    self.check()
                    raise TimeoutError(
                        f"{self.name} bodies: no complete poll in {timeout}s"
                        + (f" (listing fails: {self._list_error!r})" if self._list_error else "")
                    )
                self._cond.wait(min(left, 0.1))
        self.check()

    def check(self) -> None:
        """Raise the first recorded error (an instance refused, a node that failed)."""
        if self.errors:
            raise AssertionError(f"{self.name} bodies: {self.errors[0]}") from self.errors[0]

    # ---- what tests ask --------------------------------------------------------------

    def wait_for(self, instance_ids: Iterable[str], timeout: float = 10.0) -> dict[str, SSHNode]:
        """The nodes of these instances, once all are up."""
        ids = list(instance_ids)
        deadline = time.monotonic() + timeout
        while True:
            self.sync(timeout=max(0.1, deadline - time.monotonic()))
            with self._lock:
                if all(i in self.nodes for i in ids):
                    return {i: self.nodes[i] for i in ids}
            if time.monotonic() > deadline:
                missing = [i for i in ids if i not in self.nodes]
                raise TimeoutError(f"{self.name} bodies: no node for {missing} in {timeout}s")
            time.sleep(0.01)

    def node(self, instance_id: str) -> SSHNode | None:
        with self._lock:
            return self.nodes.get(instance_id)

    def live_nodes(self) -> dict[str, SSHNode]:
        with self._lock:
            return dict(self.nodes)

    def kill(self, instance_ids: Iterable[str]) -> None:
        """The bodies of these instances die now (every process SIGKILLed, namespace
        deleted) and are never restarted, whatever the fake says afterwards."""
        with self._lock:
            for iid in instance_ids:
                self._killed.add(iid)
                node = self.nodes.pop(iid, None)
                if node is not None:
                    node.destroy()

    # ---- the poll ------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._cond:
                serving = self._requested
            try:
                self.poll()
            except BaseException as e:  # listing failed (a fake mid-update): next tick
                self._list_error = e
                continue
            self._list_error = None
            with self._cond:
                self._done = max(self._done, serving)
                self._cond.notify_all()

    def poll(self) -> None:
        """One reconciliation: destroy nodes of instances gone, start nodes of new ones."""
        listed = list(self.list_instances())
        with self._lock:
            live: dict[str, tuple[str, str]] = {}
            ports: dict[str, int] = {}
            listed_ids = set()
            for iid, ip, key, *rest in listed:
                listed_ids.add(iid)
                if iid in self._killed or iid in self._refused:
                    continue
                if ip is None or not self._inside_lab(iid, ip):
                    continue
                live[iid] = (ip, key or "")
                ports[iid] = int(rest[0]) if rest and rest[0] else 22
            for iid, node in list(self.nodes.items()):
                if iid in listed_ids and iid not in live and iid not in self._killed:
                    continue  # still listed, address not shown in this answer: keep the body
                if iid not in live or live[iid][0] != node.host:
                    node.destroy()
                    del self.nodes[iid]
            new = [iid for iid in live if iid not in self.nodes]
            if not new:
                return
            taken = {n.host: i for i, n in self.nodes.items()}
            specs: list[tuple[str, NodeSpec]] = []
            for iid in new:
                ip, key = live[iid]
                if ip in taken:
                    self._refuse(iid, f"instance {iid} has IP {ip}, which {taken[ip]} still has")
                    continue
                taken[ip] = iid
                env = self.env_for(iid) if self.env_for is not None else self.env
                specs.append((iid, NodeSpec(ip, key, node_dir=self._dirs / iid, env=env,
                                            port=ports[iid])))
            if not specs:
                return
            # A start can miss its time limit on a loaded machine (sshd slow to listen);
            # the failed nodes are torn down by start_nodes_at, so try again: a refused
            # instance would leave the product waiting on an address nothing serves.
            for attempt in range(1, NODE_START_ATTEMPTS + 1):
                try:
                    started = self.lab.start_nodes_at([s for _, s in specs],
                                                      timeout=self.node_timeout)
                    break
                except Exception as e:  # noqa: BLE001 - recorded, raised in the test's thread
                    if attempt == NODE_START_ATTEMPTS:
                        for iid, _ in specs:
                            self._refuse(iid, f"starting a node for {iid} failed "
                                              f"{attempt} times: {e}")
                        return
            for (iid, _), node in zip(specs, started, strict=True):
                self.nodes[iid] = node
            self.started_total += len(specs)

    def _inside_lab(self, iid: str, ip: str) -> bool:
        if not ip:  # no address assigned yet: look again next tick
            return False
        try:
            addr = ipaddress.ip_address(ip or "")
        except ValueError:
            addr = None
        if addr is None or addr not in self.lab.network:
            self._refuse(
                iid,
                f"instance {iid} has private IP {ip!r}, outside the lab's subnet "
                f"{self.lab.subnet}: no body started (the fake's subnets must lie in the lab)",
            )
            return False
        return True

    def _refuse(self, iid: str, message: str) -> None:
        self._refused.add(iid)
        self.errors.append(AssertionError(message))
