"""launcher/cli/table.py: fitting a table to the terminal (drop order, then cut cells),
wrapping lines, and where the width comes from."""

from __future__ import annotations

import io

import pytest

from launcher.cli.table import ELLIPSIS, Table, output_width, print_table, wrap


def table() -> Table:
    t = Table()
    t.add_column("NAME", min_width=6)
    t.add_column("A", drop=2)
    t.add_column("B", "right", drop=1)
    t.add_column("KEEP", "right")
    t.add_row("a-rather-long-name", "aaaaaaaa", "bbbbbbbb", "$1.00")
    t.add_row("short", "a", "b", "$10.00")
    return t


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_no_width_keeps_every_column() -> None:
    text = table().render()
    assert text.splitlines()[0].split() == ["NAME", "A", "B", "KEEP"]
    assert "a-rather-long-name" in text


def test_columns_are_dropped_in_their_order_first() -> None:
    t = table()
    full = widest(t.render())
    text = t.render(width=full - 1)  # dropping B (drop=1) alone is enough
    assert text.splitlines()[0].split() == ["NAME", "A", "KEEP"]
    assert t.hidden(full - 1) == ["B"]
    assert widest(text) <= full - 1 and "a-rather-long-name" in text


def test_then_cells_are_cut_but_not_below_min_width() -> None:
    t = table()
    text = t.render(width=20)
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "KEEP"] and t.hidden(20) == ["A", "B"]
    assert max(len(line) for line in lines) <= 20
    assert lines[1].split()[0].endswith(ELLIPSIS) and lines[1].split()[1] == "$1.00"
    narrow = t.render(width=5)  # cannot fit: NAME stops at 6, KEEP is never cut
    assert narrow.splitlines()[1].split() == ["a-rat" + ELLIPSIS, "$1.00"]


def test_print_table_fits_columns_env(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "20")
    assert print_table(table(), out) == ["A", "B"]  # in table order
    assert widest(out.getvalue()) <= 20


def test_width_comes_from_columns_else_only_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "93")
    assert output_width(io.StringIO()) == 93
    monkeypatch.delenv("COLUMNS")
    assert output_width(io.StringIO()) is None  # piped: every column, no wrapping
    monkeypatch.setenv("COLUMNS", "junk")
    assert output_width(io.StringIO()) is None


def test_wrap_indents_continuation_lines() -> None:
    text = "rejected: 9 offers (needs 8 x H100, offer has 1: 5; max 1 node < 2: 4)"
    assert wrap(text, None) == [text] and wrap(text, 200) == [text]
    lines = wrap(text, 30)
    assert all(len(line) <= 30 for line in lines) and len(lines) > 1
    assert all(line.startswith("  ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == text
