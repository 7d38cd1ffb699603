"""The one bool-safe integer check every option parser uses."""

from __future__ import annotations

import pytest

from rlvr.checks import check_int, is_int, is_number


def test_bools_are_not_numbers():
    assert is_int(3) and not is_int(True) and not is_int(3.0)
    assert is_number(0.5) and is_number(2) and not is_number(False)


@pytest.mark.parametrize(
    "value, low, high, message",
    [
        (True, 1, None, "n must be an integer ≥ 1, got True"),
        (0, 1, None, "n must be an integer ≥ 1, got 0"),
        (2.0, 1, None, "n must be an integer ≥ 1, got 2.0"),
        (7, 1, 6, "n must be an integer from 1 to 6, got 7"),
    ],
)
def test_check_int_names_the_field_bounds_and_value(value, low, high, message):
    with pytest.raises(ValueError, match=message):
        check_int("n", value, low, high)


def test_check_int_returns_a_valid_value():
    assert check_int("n", 0, low=0) == 0 and check_int("n", 6, 1, 6) == 6
