"""launcher/catalog/money.py: the one money format (cents; sub-cent amounts never read as $0.00)."""

from __future__ import annotations

import pytest

from launcher.catalog.money import format_money


@pytest.mark.parametrize("amount,text", [
    (None, "-"),
    (0, "$0.00"),
    (-0.0, "$0.00"),
    (1, "$1.00"),
    (50, "$50.00"),
    (98.3219, "$98.32"),
    (1234567.891, "$1,234,567.89"),
    (0.005, "$0.01"),
    (0.0042, "$0.0042"),
    (0.00049, "$0.00049"),
    (-1.5, "-$1.50"),
    (-0.0003, "-$0.00030"),
])
def test_format_money(amount: float | None, text: str) -> None:
    assert format_money(amount) == text


def test_no_non_zero_amount_reads_as_free() -> None:
    for exp in range(3, 12):
        assert format_money(10.0 ** -exp) != "$0.00"
