"""What of the database driver (psycopg) code outside `store/` names: the connection a
projection's session wraps, composed SQL a projection may pass, the driver's own error (what a
projection's statements raise, to be classified by `db.classify`), and a value sent as jsonb.

The driver is imported in `store/` only (a contract of `lint-imports`, and a test that reads every
module's imports), so that a change of driver, or of its version, is a change of this folder."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

Connection = psycopg.Connection
"""The driver's connection (a projection's session runs its statements on the apply
transaction's own)."""
Composable = sql.Composable
"""SQL composed with the driver's `psycopg.sql` (identifiers quoted by it)."""
DriverError = psycopg.Error
"""The root of the driver's errors: a projection's statement that Postgres refused raises one."""


def jsonb(value: Any) -> Jsonb:
    """`value` (JSON-serialisable) sent as a `jsonb` parameter."""
    return Jsonb(value)
