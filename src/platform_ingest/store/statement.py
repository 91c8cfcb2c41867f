"""What a listed statement is, and the one registry every listed statement is made through.

`db` runs only a text made here. The modules of statements (`statements`, the queries of the
code; `migrations`, the frozen steps of the schema) make each of theirs with `query`, `ddl`,
`copy` or `session`, which record it in `LISTED`: the list of what may run is built as those
modules are read, and holds nothing that was not made on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Statement:
    """One listed statement. `kind` "ddl" has no query plan to check (migrations only); `kind`
    "copy" is a binary `COPY ... FROM STDIN` whose rows carry `types` (Postgres type names, one a
    column, in the order of the statement's columns); `kind` "session" changes only the session
    (`LISTEN`), and has no plan either."""

    name: str
    text: str
    kind: Literal["query", "ddl", "copy", "session"] = "query"
    types: tuple[str, ...] = ()


LISTED: list[Statement] = []
"""Every statement made so far, in the order made."""


def _listed(statement: Statement) -> Statement:
    LISTED.append(statement)
    return statement


def query(name: str, text: str) -> Statement:
    return _listed(Statement(name, " ".join(text.split())))


def ddl(name: str, text: str) -> Statement:
    return _listed(Statement(name, " ".join(text.split()), kind="ddl"))


def copy(name: str, text: str, types: tuple[str, ...]) -> Statement:
    return _listed(Statement(name, " ".join(text.split()), kind="copy", types=types))


def session(name: str, text: str) -> Statement:
    return _listed(Statement(name, " ".join(text.split()), kind="session"))
