"""The one way launcher writes an amount of money, in tables and in messages alike.

`format_money(x)`: dollars with cents and thousands separators ("$1,234.56"). An amount
that is not zero but rounds to $0.00 keeps two significant digits instead ("$0.0042"),
so a small cost never reads as free; None (no price) is "-". Imported by the optimizer,
the planner and the CLI, so it stays free of imports.
"""

from __future__ import annotations

import math

__all__ = ["format_money"]


def format_money(amount: float | None) -> str:
    """ "$1,234.56"; sub-cent non-zero amounts with two significant digits ("$0.0042",
    "-$0.00013"); None -> "-"; infinity -> "$inf" (callers that mean "never" say so)."""
    if amount is None:
        return "-"
    if math.isinf(amount) or math.isnan(amount):
        return f"{'-' if amount < 0 else ''}${abs(amount)}"
    sign = "-" if amount < 0 else ""
    x = abs(amount)
    if x == 0 or round(x, 2) >= 0.01:
        text = f"{x:,.2f}"
        return f"{sign if text != '0.00' else ''}${text}"
    digits = 1 - math.floor(math.log10(x))  # two significant digits
    return f"{sign}${x:.{digits}f}"
