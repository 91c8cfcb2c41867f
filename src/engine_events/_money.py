"""Money on the wire: JSON integers of micro-USD (1 USD = 1 000 000), never anything else.

The engine's ledger is a lower bound of what was spent, so a Decimal cost is converted by rounding
UP: the stream may over-state a cost by less than one micro-USD, never under-state it.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

from .errors import MoneyError
from .grammar import INTEGER_MAX, MICRO_USD_PER_USD

MICRO_USD_MAX = INTEGER_MAX
"""Money must fit a signed 64-bit integer: every reader (SQLite, Postgres bigint) can hold it."""


def require_micro_usd(value: object, field: str) -> int:
    """Return `value` if it is a valid micro-USD amount, else raise `MoneyError` naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MoneyError(field, value, "must be a JSON integer of micro-USD")
    if value < 0:
        raise MoneyError(field, value, "must not be negative")
    if value > MICRO_USD_MAX:
        raise MoneyError(field, value, "does not fit a signed 64-bit integer")
    return value


def usd_to_micro_usd(usd: Decimal | int) -> int:
    """Convert a cost in USD to micro-USD, rounding UP to the next whole micro-USD.

    Only `Decimal` and `int` are accepted: a float has already lost the cents it was meant to carry.
    """
    if isinstance(usd, bool) or not isinstance(usd, (Decimal, int)):
        raise MoneyError("usd", usd, "must be a Decimal or an int, never a float or a string")
    amount = Decimal(usd)
    if not amount.is_finite():
        raise MoneyError("usd", usd, "must be finite")
    if amount < 0:
        raise MoneyError("usd", usd, "must not be negative")
    if amount.adjusted() > 19:  # 10**20 USD or more: far past MICRO_USD_MAX, too big to compute
        raise MoneyError("usd", usd, "does not fit a signed 64-bit integer of micro-USD")
    with decimal.localcontext() as context:
        context.prec = max(64, len(amount.as_tuple().digits) + 8)
        context.Emax = decimal.MAX_EMAX  # no decimal.Overflow escapes instead of a MoneyError
        context.Emin = decimal.MIN_EMIN  # a tiny positive amount does not underflow to 0
        context.traps[decimal.Inexact] = True  # the product is exact at this precision
        micro = (amount * MICRO_USD_PER_USD).to_integral_value(rounding=decimal.ROUND_CEILING)
    return require_micro_usd(int(micro), "usd")
