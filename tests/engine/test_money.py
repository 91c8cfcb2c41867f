"""Money on the wire: `usd_to_micro_usd` rounds up; `require_micro_usd` takes only int micro-USD."""

from __future__ import annotations

import decimal
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine_events._money import MICRO_USD_MAX, require_micro_usd, usd_to_micro_usd
from engine_events.errors import MoneyError

EXACT = decimal.Context(prec=200, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
USD_MAX = Decimal(MICRO_USD_MAX) / 10**6  # exact: a 19-digit integer over 10**6
assert Decimal("9223372036854.775807") == USD_MAX

usd_in_range = st.decimals(
    min_value=0, max_value=USD_MAX - 1, allow_nan=False, allow_infinity=False
)


def micro(usd: Decimal) -> Decimal:
    """`usd` in micro-USD, computed exactly."""
    return EXACT.multiply(usd, Decimal(10**6))


@given(usd_in_range)
def test_rounds_up_by_less_than_one_micro_usd(usd: Decimal) -> None:
    """The result covers the amount and over-states it by less than one micro-USD."""
    result = usd_to_micro_usd(usd)
    assert isinstance(result, int)
    assert not isinstance(result, bool)
    assert EXACT.compare(Decimal(result), micro(usd)) >= 0
    assert EXACT.compare(EXACT.subtract(Decimal(result), micro(usd)), Decimal(1)) < 0


@given(st.integers(min_value=0, max_value=MICRO_USD_MAX))
def test_exact_for_six_decimal_places(amount_micro_usd: int) -> None:
    """An amount with at most six decimal places converts exactly, with no rounding."""
    usd = Decimal(amount_micro_usd).scaleb(-6)
    assert usd_to_micro_usd(usd) == amount_micro_usd


@given(st.integers(min_value=0, max_value=MICRO_USD_MAX // 10**6))
def test_whole_dollars_as_int(dollars: int) -> None:
    """An int is a whole number of USD."""
    assert usd_to_micro_usd(dollars) == dollars * 10**6


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=7, max_value=30))
def test_any_fraction_below_a_micro_usd_rounds_up(amount_micro_usd: int, places: int) -> None:
    """A cost a hair above a whole micro-USD is charged the next micro-USD, never the one below."""
    usd = EXACT.add(Decimal(amount_micro_usd).scaleb(-6), Decimal(1).scaleb(-places))
    assert usd_to_micro_usd(usd) == amount_micro_usd + 1


def test_examples() -> None:
    """Worked examples: one tenth of a cent, a sub-micro cost, zero, the largest amount."""
    assert usd_to_micro_usd(Decimal("0.001")) == 1_000
    assert usd_to_micro_usd(Decimal("0.0000001")) == 1
    assert usd_to_micro_usd(Decimal("1.0000001")) == 1_000_001
    assert usd_to_micro_usd(Decimal("0")) == 0
    assert usd_to_micro_usd(Decimal("-0")) == 0
    assert usd_to_micro_usd(USD_MAX) == MICRO_USD_MAX


@given(st.decimals(min_value=USD_MAX + Decimal("0.000001"), max_value=Decimal("1e15")))
def test_refuses_amounts_past_64_bits(usd: Decimal) -> None:
    """An amount whose micro-USD does not fit a signed 64-bit integer is refused."""
    with pytest.raises(MoneyError):
        usd_to_micro_usd(usd)


BAD_USD: list[Any] = [
    1.5,
    0.0,
    float("nan"),
    float("inf"),
    "1.5",
    "0",
    None,
    True,
    False,
    Decimal("-0.000001"),
    Decimal("-1"),
    -1,
    Decimal("NaN"),
    Decimal("sNaN"),
    Decimal("Infinity"),
    Decimal("-Infinity"),
    [1],
]


@pytest.mark.parametrize("value", BAD_USD, ids=repr)
def test_refuses_what_is_not_a_non_negative_decimal_or_int(value: Any) -> None:
    """Floats, strings, None, bools, negatives, NaN and Infinity raise MoneyError."""
    with pytest.raises(MoneyError):
        usd_to_micro_usd(value)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_refuses_every_float(value: float) -> None:
    """A float is refused whatever its value: it has already lost the cents it was to carry."""
    with pytest.raises(MoneyError):
        usd_to_micro_usd(value)  # type: ignore[arg-type]


@given(st.decimals(max_value=Decimal("-1e-30"), allow_nan=False, allow_infinity=False))
def test_refuses_every_negative_decimal(value: Decimal) -> None:
    """A negative amount, however small, is refused, never read as zero."""
    with pytest.raises(MoneyError):
        usd_to_micro_usd(value)


def test_huge_exponent_is_a_money_error() -> None:
    """A Decimal far past the 64-bit bound is refused with MoneyError, not a decimal signal."""
    with pytest.raises(MoneyError):
        usd_to_micro_usd(Decimal("1E+999999"))


def test_tiny_positive_amount_rounds_up_to_one() -> None:
    """A positive amount below the decimal context's range still rounds UP to one micro-USD."""
    assert usd_to_micro_usd(Decimal("1E-2000000")) == 1


@given(st.integers(min_value=0, max_value=MICRO_USD_MAX))
def test_require_accepts_non_negative_64_bit_ints(value: int) -> None:
    """Every non-negative int up to 2**63-1 is a valid amount and comes back unchanged."""
    assert require_micro_usd(value, "field") == value


@given(
    st.one_of(
        st.integers(max_value=-1),
        st.integers(min_value=MICRO_USD_MAX + 1),
        st.floats(),
        st.text(),
        st.none(),
        st.booleans(),
        st.decimals(allow_nan=False),
        st.lists(st.integers(), max_size=2),
    )
)
def test_require_refuses_everything_else(value: Any) -> None:
    """Negatives, ints past 64 bits, floats, strings, None, bools, Decimals, lists: refused."""
    with pytest.raises(MoneyError) as caught:
        require_micro_usd(value, "committed_micro_usd")
    assert caught.value.field == "committed_micro_usd"


def test_require_refuses_integral_float_and_names_the_field() -> None:
    """12.0 is not 12: the error names the field and the reason."""
    with pytest.raises(MoneyError, match="spend_field") as caught:
        require_micro_usd(12.0, "spend_field")
    assert "integer" in caught.value.reason
    assert math.isclose(12.0, 12)
