"""Plain aligned tables and styled lines for the CLI, without rich.

Listings are the CLI's hot path (`launcher gpus`, `cost`, `launch --dryrun`,
`status`, `queue`): importing and rendering a rich table costs ~100 ms, more
than the whole query. These helpers print the same columns in about a
millisecond. Styles become ANSI codes only when the stream is a terminal and
`NO_COLOR` is unset, so piped output is plain text.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TextIO

_ANSI = {
    "bold": "1",
    "dim": "2",
    "green": "32",
    "red": "31",
    "yellow": "33",
    "cyan": "36",
}


def use_color(stream: TextIO) -> bool:
    """Whether to emit ANSI styles on `stream` (a terminal, and NO_COLOR unset)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def styled(text: str, style: str | None, color: bool) -> str:
    """`text` wrapped in the ANSI codes of `style` ("bold green", "dim"...) when `color`."""
    if not style or not color:
        return text
    codes = [_ANSI[word] for word in style.split() if word in _ANSI]
    if not codes:
        return text
    return f"\x1b[{';'.join(codes)}m{text}\x1b[0m"


@dataclass
class _Column:
    header: str
    justify: str = "left"


@dataclass
class Table:
    """Columns of text, aligned with two spaces between them.

    Accepts (and ignores) rich-style keyword arguments such as `box=None`, so
    call sites read like rich's Table.
    """

    header_style: str | None = "bold"
    columns: list[_Column] = field(default_factory=list)
    rows: list[tuple[list[str], str | None]] = field(default_factory=list)

    def __init__(self, header_style: str | None = "bold", **_ignored: object) -> None:
        self.header_style = header_style
        self.columns = []
        self.rows = []

    def add_column(self, header: str, justify: str = "left", **_ignored: object) -> None:
        self.columns.append(_Column(header, "right" if justify == "right" else "left"))

    def add_row(self, *cells: object, style: str | None = None) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(([("" if c is None else str(c)) for c in cells], style))

    def render(self, color: bool = False) -> str:
        """The table as text, one line per row, no trailing spaces."""
        widths = [len(c.header) for c in self.columns]
        for cells, _ in self.rows:
            for i, cell in enumerate(cells):
                widths[i] = max(widths[i], len(cell))
        # Columns whose header and cells are all empty take no space.
        visible = [i for i, w in enumerate(widths) if w > 0]

        def line(cells: list[str]) -> str:
            parts = []
            for i in visible:
                col, width, cell = self.columns[i], widths[i], cells[i]
                parts.append(cell.rjust(width) if col.justify == "right" else cell.ljust(width))
            return "  ".join(parts).rstrip()

        out = [styled(line([c.header for c in self.columns]), self.header_style, color)]
        out += [styled(line(cells), style, color) for cells, style in self.rows]
        return "\n".join(out)


def print_table(table: Table, stream: TextIO | None = None) -> None:
    """Write `table` to `stream` (stdout by default), styled only on a terminal."""
    out = stream or sys.stdout
    out.write(table.render(color=use_color(out)) + "\n")


def echo(text: str, style: str | None = None, *, err: bool = False) -> None:
    """One plain line on stdout (or stderr), styled only on a terminal."""
    out = sys.stderr if err else sys.stdout
    out.write(styled(text, style, use_color(out)) + "\n")


def format_duration(seconds: float | None) -> str:
    """One duration format for every listing: "45s", "3m05s", "2h03m", "3d04h"; None: "-"."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
