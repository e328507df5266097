"""Run one function over several items at once, one thread per item (per node, mostly).

Below execution.py and storage_nodes.py, which both fan out over a cluster's runners.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`[fn(x) for x in items]` with one thread per item; raises the first error (by
    item order) after all have finished. A single item runs inline."""
    if len(items) == 1:
        return [fn(items[0])]
    results: list[R | None] = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)

    def work(i: int) -> None:
        try:
            results[i] = fn(items[i])
        except BaseException as exc:  # re-raised in the caller's thread
            errors[i] = exc

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(items))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for err in errors:
        if err is not None:
            raise err
    return [r for r in results]  # type: ignore[misc]
