"""What a state-store statement returns: rows readable by index and by column name, read
in full. Shared by both connection kinds (sqlite_conn.py, engine.py). Standard library only."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


class Row(tuple):
    """One result row: a tuple that also answers `row["column"]`."""

    _index: dict[str, int]

    def __new__(cls, values: Iterable[Any], index: dict[str, int]) -> Row:
        row = super().__new__(cls, values)
        row._index = index
        return row

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


class Result:
    """A statement's result, read in full (rows, rowcount, lastrowid)."""

    def __init__(self, rows: list[Row], rowcount: int, lastrowid: int | None) -> None:
        self._rows = rows
        self._pos = 0
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchone(self) -> Row | None:
        if self._pos >= len(self._rows):
            return None
        self._pos += 1
        return self._rows[self._pos - 1]

    def fetchall(self) -> list[Row]:
        rest = self._rows[self._pos:]
        self._pos = len(self._rows)
        return rest

    def __iter__(self) -> Iterator[Row]:
        return iter(self.fetchall())
