"""A group pass: the news of many books, each decided as its own pass decides it, committed in ONE
transaction (fan-in: docs/performance.md, "Many books, a line each").

A pass over one book costs a transaction, its commit and some fifteen round trips to Postgres
whether it applies one line or 20,000; when thousands of books each write a line now and then,
every line is the only news of its book, and a worker doing a pass a book spends its time on those
fixed costs, one book after another. A group pays them once for many books:

1. the books' advisory locks, taken for the transaction without waiting (a book another pass
   holds is busy, as for its own pass);
2. the books, their runs and their attempts loaded by three statements for them all;
3. each book's journal read from its verified hint and its lines decided by the rules, exactly as
   in its own pass (`book_pass.decide_in_group`), into one batch a book;
4. the batches written set-wise (`group_commit`): a statement a kind of row, not a statement a
   book; the rows locked without waiting, and a book whose row an operator's transaction holds is
   left out of the group and passed again shortly;
5. one commit.

What is not the common case goes to a pass of its own (`BookPass`), where it is handled as it
always was: a book whose news is longer than `GROUP_NEWS_BYTES_MAX` (its pass pipelines batch after
batch), a journal that cannot be read, a book no longer registered. A group whose transaction
fails (a projection raises, Postgres refuses a value, a cursor moved) is rolled back whole, then
split in two halves, each tried again as a group, down to the one book whose part fails, which
gets a pass of its own: there its failure is its state, shown by `show`, as it is today. So a
failing book costs its group's neighbours a logarithmic number of retries once, never a loop. A
bounded wait that ran out (a lock held, a slow projection) is not split (each half could wait out
the bound again): every book of the group gets a pass of its own.

Postgres lost mid-group is raised: nothing of the group is committed unless its commit was, and
each book's next pass starts from its cursor in Postgres as ever.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._plain import counted
from ..decisions.views import Mode
from ..errors import (
    DatabaseTimeout,
    DatabaseUnavailable,
    IngestError,
    JournalUnreadable,
)
from ..projections import Projection
from ..store import statements
from ..store.db import Database
from .apply import CommitHook
from .book_pass import NewsTooLong, PassReport, decide_in_group, state_queries, states_of
from .books import book_lock_key, book_ref
from .group_commit import Part, commit_group

logger = logging.getLogger("platform_ingest")

GROUP_BOOKS_MAX = 512
"""The most books one group's transaction takes: its locks, its statements' arrays and the time
it holds its rows stay bounded; a worker with more books due makes several groups in a row."""
GROUP_NEWS_BYTES_MAX = 64 * 1024
"""A book with more bytes of news than this gets a pass of its own, which commits batch after
batch on its writer thread while it reads on (a group's part is one batch, written at its end)."""


@dataclass
class GroupReport:
    """What a group did to each of its books."""

    passed: dict[str, PassReport] = field(default_factory=dict)
    """Books whose part was committed (or had nothing to write), with what their pass did."""
    busy: list[str] = field(default_factory=list)
    """Books another pass holds, or whose rows another transaction holds: passed again shortly."""
    alone: list[str] = field(default_factory=list)
    """Books that need a pass of their own (`BookPass`): long news, a journal in trouble, a part
    that failed the group's transaction."""
    commits: int = 0
    splits: int = 0


class GroupPass:
    """Passes over many registered books in one transaction; `run()` may be called again."""

    def __init__(
        self,
        db: Database,
        *,
        mode: Mode = "named",
        commit_hook: CommitHook | None = None,
        projections: Sequence[Projection] = (),
        news_bytes_max: int = GROUP_NEWS_BYTES_MAX,
    ) -> None:
        self.db = db
        self.mode: Mode = mode
        self.commit_hook = commit_hook
        self.projections = projections
        self.news_bytes_max = news_bytes_max

    def run(self, book_ids: Sequence[str]) -> GroupReport:
        """One group over `book_ids` (split while its transaction fails; see the module)."""
        report = GroupReport()
        self._try(sorted(set(book_ids)), report)
        return report

    def _try(self, book_ids: list[str], report: GroupReport) -> None:
        try:
            self._transaction(book_ids, report)
        except DatabaseUnavailable as error:
            # Said as a book's own pass says it; the worker waits for Postgres, and every book
            # goes on from its cursor.
            logger.warning(
                "pass over %d books in one transaction: %s", len(book_ids), type(error).__name__
            )
            raise
        except DatabaseTimeout as error:
            logger.warning(
                "a group of %d books: a bounded wait ran out (SQLSTATE %s); each book is passed"
                " on its own",
                len(book_ids),
                error.sqlstate,
            )
            report.alone.extend(book_ids)
        except IngestError as error:
            if len(book_ids) == 1:
                report.alone.extend(book_ids)
                return
            logger.info(
                "a group of %d books was rolled back (%s); tried again in two halves",
                len(book_ids),
                type(error).__name__,
            )
            report.splits += 1
            half = len(book_ids) // 2
            self._try(book_ids[:half], report)
            self._try(book_ids[half:], report)

    def _transaction(self, book_ids: list[str], report: GroupReport) -> None:
        db, hook = self.db, self.commit_hook
        if hook is not None:
            hook("before")
        passed: dict[str, PassReport] = {}
        busy: list[str] = []
        alone: list[str] = []
        parts: list[Part] = []
        with db.transaction():
            # The locks, then the state of every book asked for, in one round trip: Postgres runs
            # them in order, so what is read is what the locks' holders left; the state of a book
            # another pass holds is read for nothing, and thrown away.
            keys = {book_lock_key(book_id): book_id for book_id in book_ids}
            lock_rows, *state_rows = db.fetch_together(
                [
                    (statements.BOOKS_LOCK_FOR_TRANSACTION, (list(keys),)),
                    *state_queries(book_ids),
                ]
            )
            locked = {keys[row["key"]] for row in lock_rows}
            busy.extend(book_id for book_id in book_ids if book_id not in locked)
            ours = [book_id for book_id in book_ids if book_id in locked]
            run_rows, attempt_rows, book_rows = state_rows
            states = states_of(book_ids, run_rows, attempt_rows, book_rows)
            for book_id in ours:
                state = states.get(book_id)
                if state is None:
                    alone.append(book_id)  # gone from Postgres: its own pass says so
                    continue
                try:
                    pass_report, sealed = decide_in_group(
                        db,
                        state,
                        mode=self.mode,
                        projections=self.projections,
                        news_bytes_max=self.news_bytes_max,
                    )
                except (NewsTooLong, JournalUnreadable):
                    alone.append(book_id)
                    continue
                passed[book_id] = pass_report
                if sealed is not None:
                    parts.append(Part(book_id, sealed))
            if hook is not None:
                hook("locked")
            for part in commit_group(db, parts, self.projections):
                del passed[part.book_id]
                busy.append(part.book_id)
        for part in parts:
            if part.book_id in passed:
                passed[part.book_id].lines_applied = part.sealed.lines_applied
        applied = sum(pass_report.lines_applied for pass_report in passed.values())
        problems = sum(len(pass_report.problems) for pass_report in passed.values())
        if len(passed) == 1 and (applied or problems):
            # A group of one (a book alone in being due) says what the book's own pass says.
            ((book_id, pass_report),) = passed.items()
            logger.info(
                "pass over %s: %s read, %d applied, %s, %s",
                book_ref(book_id),
                counted(pass_report.lines_read, "line"),
                applied,
                counted(pass_report.duplicates, "duplicate"),
                counted(problems, "problem"),
            )
        elif applied or problems:
            logger.info(
                "pass over %d books in one transaction: %d lines read, %d applied, %d duplicates,"
                " %d problems",
                len(passed),
                sum(pass_report.lines_read for pass_report in passed.values()),
                applied,
                sum(pass_report.duplicates for pass_report in passed.values()),
                problems,
            )
        report.passed.update(passed)
        report.busy.extend(busy)
        report.alone.extend(alone)
        report.commits += 1
