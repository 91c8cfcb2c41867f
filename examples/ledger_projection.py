"""A double-entry spend ledger in integer micro-USD, as a `platform_ingest` projection.

Every `spend` line (and the money of a `finished` line) carries the engine's committed spend, which
is cumulative for the book, across its runs. The ledger posts one entry per *increase* of it, on
the run whose line carried it, as two rows that sum to zero:

    account "run_spend"      +delta   (what the run consumed)
    account "provider_owed"  -delta   (what is owed to the provider for it)

It keeps the book's high-water mark in `ledger_books`, so a repeated, late or lower value posts
nothing. Its invariants, checked by `check_ledger`:

- every posting balances: the entries of each (attempt, seq) sum to zero;
- for every book, the sum of its `run_spend` entries equals the greatest `committed_micro_usd` of
  its runs in the platform's `runs` table (the engine's cumulative figure, as of its latest run);
- no entry is doubled: an entry's key is (attempt_id, seq, account).

Use it from the command line (the directory holding this file on PYTHONPATH):

    PYTHONPATH=examples platform-ingest run ROOT --projection ledger_projection:LedgerProjection

The entries are written in the apply transaction: they commit with the platform's cursor or not
at all, so a crash, a retry or a duplicate line never posts twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from platform_ingest.projections import Event, ProjectionSession


class LedgerProjection:
    """The spend ledger (see the module docstring)."""

    name = "spend_ledger"
    version = 1

    def setup(self, session: ProjectionSession) -> None:
        # Keyed by the posting itself: one index a row (a batch posts thousands of rows, each
        # index maintained per row is most of the ledger's cost).
        session.execute(
            """CREATE TABLE IF NOT EXISTS ledger_entries (
                 attempt_id bigint NOT NULL,
                 seq bigint NOT NULL,
                 account text NOT NULL CHECK (account IN ('run_spend', 'provider_owed')),
                 run_id bigint NOT NULL,
                 amount_micro_usd bigint NOT NULL,
                 posted_at timestamptz NOT NULL DEFAULT now(),
                 PRIMARY KEY (attempt_id, seq, account))"""
        )
        session.execute(
            """CREATE TABLE IF NOT EXISTS ledger_books (
                 book_id text PRIMARY KEY,
                 spent_micro_usd bigint NOT NULL CHECK (spent_micro_usd >= 0))"""
        )

    def apply(self, session: ProjectionSession, events: Sequence[Event]) -> None:
        # Most events carry no money: they are passed over first, without a call apiece.
        spends = [event for event in events if event.type in _MONEY_TYPES]
        if not spends:
            return
        first = spends[0]  # one attempt's events: one run of one book
        run_id, book_id = first.run_id, first.book_id
        row = session.execute(
            "SELECT spent_micro_usd FROM ledger_books WHERE book_id = %s FOR UPDATE", (book_id,)
        ).fetchone()
        spent = 0 if row is None else int(row[0])
        attempt_ids: list[int] = []
        seqs: list[int] = []
        deltas: list[int] = []
        for event in spends:
            amount = _committed(event)
            if amount is not None and amount > spent:
                delta, spent = amount - spent, amount
                attempt_ids.append(event.attempt_id)
                seqs.append(event.seq)
                deltas.append(delta)
        if not deltas:
            return
        # One COPY for all of the attempt's postings, not a statement per row: a batch holds
        # thousands of spends. Each posting is two rows, one per side.
        with session.copy(
            "COPY ledger_entries (run_id, attempt_id, seq, account, amount_micro_usd) FROM STDIN"
        ) as copy:
            for attempt_id, seq, delta in zip(attempt_ids, seqs, deltas, strict=True):
                copy.write_row((run_id, attempt_id, seq, "run_spend", delta))
                copy.write_row((run_id, attempt_id, seq, "provider_owed", -delta))
        session.execute(
            "INSERT INTO ledger_books (book_id, spent_micro_usd) VALUES (%s, %s)"
            " ON CONFLICT (book_id) DO UPDATE SET spent_micro_usd = EXCLUDED.spent_micro_usd",
            (book_id, spent),
        )


_MONEY_TYPES = frozenset({"spend", "finished"})
"""The events that may carry the committed spend."""


def _committed(event: Event) -> int | None:
    """The cumulative committed spend a line carries, if any."""
    if event.type == "spend":
        return int(event.data["committed_micro_usd"])
    if event.type == "finished":
        money: Any = event.data.get("money")
        if money is not None:
            return int(money["committed_micro_usd"])
    return None


def check_ledger(connection: psycopg.Connection[Any]) -> list[str]:
    """The ledger's invariants over the whole database; each broken one, described."""
    broken = [
        f"posting of attempt {attempt_id} seq {seq} sums to {total}"
        for attempt_id, seq, total in connection.execute(
            "SELECT attempt_id, seq, sum(amount_micro_usd) FROM ledger_entries"
            " GROUP BY attempt_id, seq HAVING sum(amount_micro_usd) <> 0"
        )
    ]
    broken += [
        f"book {book_id!r}: ledger {ledger} micro-USD, platform {platform} micro-USD"
        for book_id, ledger, platform in connection.execute(
            """SELECT r.book_id, coalesce(sum(e.total), 0), max(r.committed_micro_usd)
               FROM runs r LEFT JOIN (
                 SELECT run_id, sum(amount_micro_usd) AS total FROM ledger_entries
                 WHERE account = 'run_spend' GROUP BY run_id) e USING (run_id)
               GROUP BY r.book_id
               HAVING coalesce(sum(e.total), 0) <> max(r.committed_micro_usd)"""
        )
    ]
    return broken
