"""A ring all-reduce over plain TCP between the nodes of a launcher job.

Every rank listens on its own port (BASE + rank), so it works both on real
clusters and on the local cloud, where all nodes share 127.0.0.1. Each rank
contributes a vector filled with (rank + 1); after the all-reduce every rank
must hold n(n+1)/2 in every element. Stdlib only.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import time

CHUNK = 4  # elements per rank's chunk


def base_port() -> int:
    # Same on every rank of one job, different between jobs: derived from the task id.
    # Kept below Linux's ephemeral range (32768+), where an outgoing connection could
    # hold the port and make a rank's bind fail.
    key = os.environ.get("LAUNCHER_TASK_ID", "launcher")
    return 20000 + int(hashlib.sha1(key.encode()).hexdigest(), 16) % 12000


def send_floats(sock: socket.socket, values: list[float]) -> None:
    sock.sendall(struct.pack(f"!I{len(values)}d", len(values), *values))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        part = sock.recv(n - len(buf))
        if not part:
            raise ConnectionError("peer closed the connection")
        buf += part
    return buf


def recv_floats(sock: socket.socket) -> list[float]:
    (count,) = struct.unpack("!I", recv_exact(sock, 4))
    return list(struct.unpack(f"!{count}d", recv_exact(sock, 8 * count)))


def connect(host: str, port: int, deadline: float) -> socket.socket:
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the neighbour is still starting


def ring_allreduce(rank: int, ips: list[str], data: list[float]) -> list[float]:
    n = len(ips)
    if n == 1:
        return data
    port = base_port()
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port + rank))
    server.listen(1)
    deadline = time.monotonic() + 60
    right = connect(ips[(rank + 1) % n], port + (rank + 1) % n, deadline)
    server.settimeout(max(1.0, deadline - time.monotonic()))  # a dead neighbour: fail, not hang
    left, _ = server.accept()
    left.settimeout(None)
    left.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunks = [data[i * CHUNK : (i + 1) * CHUNK] for i in range(n)]
    # reduce-scatter: after n-1 steps rank r owns the full sum of chunk (r+1) % n
    for step in range(n - 1):
        send_idx = (rank - step) % n
        recv_idx = (rank - step - 1) % n
        send_floats(right, chunks[send_idx])
        incoming = recv_floats(left)
        chunks[recv_idx] = [a + b for a, b in zip(chunks[recv_idx], incoming, strict=True)]
    # all-gather: pass the reduced chunks around the ring
    for step in range(n - 1):
        send_idx = (rank + 1 - step) % n
        recv_idx = (rank - step) % n
        send_floats(right, chunks[send_idx])
        chunks[recv_idx] = recv_floats(left)
    for s in (left, right, server):
        s.close()
    return [x for chunk in chunks for x in chunk]


def main() -> None:
    rank = int(os.environ["LAUNCHER_NODE_RANK"])
    ips = os.environ["LAUNCHER_NODE_IPS"].split("\n")
    n = len(ips)
    t0 = time.monotonic()
    result = ring_allreduce(rank, ips, [float(rank + 1)] * (CHUNK * n))
    expected = n * (n + 1) / 2
    ok = all(x == expected for x in result)
    ms = (time.monotonic() - t0) * 1000
    print(f"rank {rank}/{n}: ring all-reduce {'OK' if ok else 'WRONG'} "
          f"(sum {result[0]:g}, expected {expected:g}, {ms:.0f} ms)", flush=True)
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
