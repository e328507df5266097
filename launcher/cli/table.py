"""Plain aligned tables and styled lines for the CLI, without rich.

Listings are the CLI's hot path (`launcher gpus`, `cost`, `launch --dryrun`,
`status`, `queue`): importing and rendering a rich table costs ~100 ms, more
than the whole query. These helpers print the same columns in about a
millisecond. Styles become ANSI codes only when the stream is a terminal and
`NO_COLOR` is unset, so piped output is plain text.

Width: `print_table` and `echo(..., fit=True)` fit the terminal (`output_width`:
`COLUMNS` when set, else the terminal's width; unlimited when the stream is not a
terminal and `COLUMNS` is unset, so piped output keeps every column). A table too
wide first drops the columns marked droppable, in their `drop` order, then cuts the
cells of the columns given a `min_width` (ending them with "…"), widest first.
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


ELLIPSIS = "…"  # ends a cut cell


def output_width(stream: TextIO | None = None) -> int | None:
    """The width to fit output on `stream` (stdout by default): `COLUMNS` when it is a
    positive number, else the terminal's width when the stream is a terminal, else None
    (no limit: piped output keeps every column and is never wrapped)."""
    text = os.environ.get("COLUMNS", "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    out = stream or sys.stdout
    isatty = getattr(out, "isatty", None)
    if not (isatty and isatty()):
        return None
    try:
        return os.get_terminal_size(out.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        return None


def cut(text: str, width: int) -> str:
    """`text` cut to `width` characters, the last one ELLIPSIS when anything was cut."""
    if len(text) <= width:
        return text
    return text[: max(width - 1, 0)] + ELLIPSIS if width > 0 else ""


@dataclass
class _Column:
    header: str
    justify: str = "left"
    drop: int | None = None  # dropped in this order (1 first) when too wide; None: kept
    min_width: int | None = None  # cells may be cut down to this width; None: never cut


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

    def add_column(
        self,
        header: str,
        justify: str = "left",
        *,
        drop: int | None = None,
        min_width: int | None = None,
        **_ignored: object,
    ) -> None:
        """Add a column. `drop`: when the table is too wide, droppable columns go in
        this order (1 first); `min_width`: then cells may be cut down to this width."""
        self.columns.append(
            _Column(header, "right" if justify == "right" else "left", drop, min_width)
        )

    def add_row(self, *cells: object, style: str | None = None) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"row has {len(cells)} cells for {len(self.columns)} columns")
        self.rows.append(([("" if c is None else str(c)) for c in cells], style))

    def fit(self, width: int | None) -> tuple[list[int], list[int]]:
        """(visible column indexes, their widths) for a table at most `width` wide
        (None: natural widths). Drops droppable columns in `drop` order, then shrinks
        the columns with a `min_width`, widest first, until the table fits or nothing
        more can give."""
        widths = [len(c.header) for c in self.columns]
        for cells, _ in self.rows:
            for i, cell in enumerate(cells):
                widths[i] = max(widths[i], len(cell))
        # Columns whose header and cells are all empty take no space.
        visible = [i for i, w in enumerate(widths) if w > 0]

        def total() -> int:
            return sum(widths[i] for i in visible) + 2 * max(len(visible) - 1, 0)

        if width is None or total() <= width:
            return visible, [widths[i] for i in visible]
        droppable = sorted((self.columns[i].drop, i) for i in visible
                           if self.columns[i].drop is not None)
        for _, i in droppable:
            if total() <= width:
                break
            visible.remove(i)
        while total() > width:
            shrinkable = [i for i in visible if (m := self.columns[i].min_width) is not None
                          and widths[i] > m]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: (widths[i], -i))
            widths[widest] -= 1
        return visible, [widths[i] for i in visible]

    def hidden(self, width: int | None) -> list[str]:
        """Headers of the non-empty columns `fit(width)` drops."""
        visible, _ = self.fit(width)
        return [c.header for i, c in enumerate(self.columns)
                if i not in visible and c.drop is not None
                and (c.header or any(cells[i] for cells, _ in self.rows))]

    def render(self, color: bool = False, width: int | None = None) -> str:
        """The table as text, one line per row, no trailing spaces; at most `width`
        characters a line where dropping and cutting columns allows (see `fit`)."""
        visible, widths = self.fit(width)

        def line(cells: list[str]) -> str:
            parts = []
            for i, w in zip(visible, widths, strict=True):
                col, cell = self.columns[i], cut(cells[i], w)
                parts.append(cell.rjust(w) if col.justify == "right" else cell.ljust(w))
            return "  ".join(parts).rstrip()

        out = [styled(line([c.header for c in self.columns]), self.header_style, color)]
        out += [styled(line(cells), style, color) for cells, style in self.rows]
        return "\n".join(out)


def print_table(table: Table, stream: TextIO | None = None) -> list[str]:
    """Write `table` to `stream` (stdout by default), fitted to `output_width` and
    styled only on a terminal. Returns the headers of the columns dropped to fit."""
    out = stream or sys.stdout
    width = output_width(out)
    out.write(table.render(color=use_color(out), width=width) + "\n")
    return table.hidden(width)


def wrap(text: str, width: int | None, indent: str = "  ") -> list[str]:
    """`text` as lines of at most `width` characters (None: one line), the later lines
    indented by `indent`; words longer than a line are broken."""
    if width is None or len(text) <= width:
        return [text]
    import textwrap  # only when something needs wrapping

    return textwrap.wrap(text, width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def echo(text: str, style: str | None = None, *, err: bool = False, fit: bool = False) -> None:
    """One plain line on stdout (or stderr), styled only on a terminal; with `fit`,
    wrapped to `output_width` (indented continuation lines)."""
    out = sys.stderr if err else sys.stdout
    color = use_color(out)
    lines = wrap(text, output_width(out)) if fit else [text]
    out.write("".join(styled(line, style, color) + "\n" for line in lines))


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
