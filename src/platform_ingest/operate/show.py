"""`show`: the state of books, runs and attempts, in the JSON shape docs/platform/cli.md documents.

    {"books": [{"book_id", "path", "error", "problems": [{"kind", "detail", "since", "seen_at"}],
      "actions": [{"action_id", "action", "engine_run_id", "by", "reason", "at", "evidence"}],
      "runs": [{"run_id", "state", "reason", "stop",
      "refusal", "outcome", "exit_code", "committed_micro_usd", "shortfall_micro_usd",
      "settled_micro_usd", "spent_micro_usd", "units": [...], "progress": {phase: {"done", "total"}} (phases in stream order),
      "attempts": [{"engine_run_id", "state", "last_seq", "exit_status",
                    "error": null | {"kind", "seq", "offset", "detail"}}]}],
      (an attempt whose last batch a projection refused shows
       {"kind": "projection_failed", "projection", "seq", "offset": null, "detail", "failures",
        "since"} while the book waits for its retry)
      "lag": {"bytes", "lines", "lines_exact", "journal", "last_applied_at", "lines_unread",
              "held_by": null | {"kind", "engine_run_id", "offset", "since"}},
      "waiting_to_be_named": [{"engine_run_id", "offset", "since"}]}]}

Runs oldest first, attempts in stream order (attempts named but not yet seen last). The book's
`error` (an addition to the contract's keys) is a problem that belongs to no stream: a line before
any hello in the journal. Its `problems` (an addition) are what stops the book as a whole: a
journal that is not a regular file, a directory swapped after registration, a value Postgres
refused, a second directory of the book's name. The book's `lag` (an addition too, `lag`) is
measured against the real head of its journal: bytes and complete lines past the last line the
platform decided on, whatever holds them (`held_by`: a quarantine, a stall, a refusal, a park, a
stream waiting to be named), and the age of the last applied line. A book's
`waiting_to_be_named` (an addition) lists the streams of a named-mode book that nobody named:
nothing of them is applied until `name` (or a sweep with `--auto`).

A run's `committed_micro_usd` is the engine's ledger as last seen on that run, and the ledger is
the book's, cumulative across runs; `spent_micro_usd` (an addition) is the run's own part of it,
so that a sum over runs is right, pruned runs included (`spent`: a prune changes no survivor's
part). Attempts are listed in stream order: the file order of their
hellos, whatever order they were named or first seen in.

A book's `actions` (an addition) are the audit of what operators and the launcher did to it
(`remedies`): every remedy, with who, why, when and the evidence it overrode, oldest first. An
attempt's `exit_status` (an addition) is what the launcher reported with `exited`, or null.

The text view prints every value from a journal or a directory name through `_plain.plain`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .._plain import counted, plain, usd
from ..decisions.problems import problem_json
from ..decisions.runs import progress_from_jsonb
from ..decisions.spent import spent_of_book
from ..errors import NotFound
from ..ingest.books import book_ref, find_book
from ..store import statements
from ..store.db import Database, Row
from .lag import lag_of_books

BOOKS_PAGE_ROWS = 500
"""Books are listed in pages of this many (an index range scan, never the whole table at once)."""


def _books_rows(db: Database, book_dirs: Sequence[str]) -> list[Row]:
    if book_dirs:
        ids = [find_book(db, book_dir).book_id for book_dir in book_dirs]
        return db.fetch_all(statements.BOOKS_BY_ID, (ids,))
    rows: list[Row] = []
    after = ""
    while True:
        page = db.fetch_all(statements.BOOKS_PAGE, (after, BOOKS_PAGE_ROWS))
        rows.extend(page)
        if len(page) < BOOKS_PAGE_ROWS:
            return rows
        after = page[-1]["book_id"]


def show_state(db: Database, book_dirs: Sequence[str] = ()) -> dict[str, Any]:
    """The state of the given books (all registered books when none is given)."""
    books = _books_rows(db, book_dirs)
    shown: list[dict[str, Any]] = []
    for first in range(0, len(books), BOOKS_PAGE_ROWS):
        shown.extend(_show_page(db, books[first : first + BOOKS_PAGE_ROWS]))
    return {"books": shown}


def show_books(db: Database, book_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The state of the books of these ids (`show_state`'s shape of each), in id order."""
    books = db.fetch_all(statements.BOOKS_BY_ID, (sorted(book_ids),))
    shown: list[dict[str, Any]] = []
    for first in range(0, len(books), BOOKS_PAGE_ROWS):
        shown.extend(_show_page(db, books[first : first + BOOKS_PAGE_ROWS]))
    return shown


def _show_page(db: Database, books: list[Row]) -> list[dict[str, Any]]:
    book_ids = [book["book_id"] for book in books]
    runs_by_book: dict[str, list[dict[str, Any]]] = {book_id: [] for book_id in book_ids}
    runs_by_id: dict[int, dict[str, Any]] = {}
    book_of_run: dict[int, str] = {}
    for row in db.fetch_all(statements.RUNS_OF_BOOKS, (book_ids,)):
        run = {
            "run_id": row["run_id"],
            "state": row["state"],
            "reason": row["reason"],
            "stop": row["stop"],
            "refusal": row["refusal"],
            "outcome": row["outcome"],
            "exit_code": row["exit_code"],
            "committed_micro_usd": row["committed_micro_usd"],
            "shortfall_micro_usd": row["shortfall_micro_usd"],
            "settled_micro_usd": row["settled_micro_usd"],
            "spent_micro_usd": 0,
            "units": [],
            "progress": progress_from_jsonb(row["progress"]),
            "attempts": [],
        }
        runs_by_book[row["book_id"]].append(run)
        runs_by_id[row["run_id"]] = run
        book_of_run[row["run_id"]] = row["book_id"]
    run_ids = sorted(runs_by_id)
    failures = {
        (row["book_id"], row["engine_run_id"]): row
        for row in db.fetch_all(statements.PROJECTION_FAILURES_OF_BOOKS, (book_ids,))
    }
    if run_ids:
        for run_id, unit in db.fetch_tuples(statements.UNITS_OF_RUNS, (run_ids,)):
            runs_by_id[run_id]["units"].append(unit)
        for row in db.fetch_all(statements.ATTEMPTS_OF_RUNS, (run_ids,)):
            failure = failures.pop((book_of_run[row["run_id"]], row["engine_run_id"]), None)
            runs_by_id[row["run_id"]]["attempts"].append(
                {
                    "engine_run_id": row["engine_run_id"],
                    "state": row["state"],
                    "last_seq": row["last_seq"],
                    "exit_status": row["exit_status"],
                    "error": problem_json(row) if failure is None else _failure_json(failure),
                }
            )
    problems: dict[str, list[dict[str, Any]]] = {book_id: [] for book_id in book_ids}
    if any(book["problem_kinds"] for book in books):
        for row in db.fetch_all(statements.BOOK_PROBLEMS_OF_BOOKS, (book_ids,)):
            problems[row["book_id"]].append(
                {
                    "kind": row["kind"],
                    "detail": row["detail"],
                    "since": row["since"].isoformat(),
                    "seen_at": row["seen_at"].isoformat(),
                }
            )
    actions: dict[str, list[dict[str, Any]]] = {book_id: [] for book_id in book_ids}
    for row in db.fetch_all(statements.ACTIONS_OF_BOOKS, (book_ids,)):
        actions[row["book_id"]].append(
            {
                "action_id": row["action_id"],
                "action": row["action"],
                "engine_run_id": row["engine_run_id"],
                "by": row["by_whom"],
                "reason": row["reason"],
                "at": row["at"].isoformat(),
                "evidence": row["evidence"],
            }
        )
    for (book_id, engine_run_id), row in failures.items():
        # A stream whose first batch a projection refused is not in Postgres yet: the book shows it.
        problem = _failure_json(row)
        problems[book_id].append(
            {
                "kind": "projection_failed",
                "detail": f"stream {engine_run_id} (seq {row['seq']}), projection "
                f"{row['projection']}: {row['detail']}",
                "since": problem["since"],
                "seen_at": row["seen_at"].isoformat(),
            }
        )
    for book_id, runs in runs_by_book.items():
        spent = spent_of_book(runs, actions[book_id])
        for run in runs:
            run["spent_micro_usd"] = spent[run["run_id"]]
    lags = lag_of_books(db, books)
    return [
        {
            "book_id": book["book_id"],
            "path": book["path"],
            "error": problem_json(book),
            "problems": problems[book["book_id"]],
            "actions": actions[book["book_id"]],
            "runs": runs_by_book[book["book_id"]],
            "lag": lags[book["book_id"]].as_json(),
            "waiting_to_be_named": [
                {key: value for key, value in hold.as_json().items() if key != "kind"}
                for hold in lags[book["book_id"]].holds
                if hold.kind == "unnamed"
            ],
        }
        for book in books
    ]


def book_of_ref(db: Database, ref: str) -> str:
    """The book id behind an opaque reference of the logs (`books.book_ref`): the logs never
    name a book, an operator with access to Postgres finds it here. `NotFound` when none is."""
    after = ""
    while True:
        page = db.fetch_all(statements.BOOKS_PAGE, (after, BOOKS_PAGE_ROWS))
        for book in page:
            if book_ref(book["book_id"]) == ref:
                return str(book["book_id"])
        if len(page) < BOOKS_PAGE_ROWS:
            raise NotFound(f"no registered book has the reference {ref!r}")
        after = page[-1]["book_id"]


def select_books(
    state: dict[str, Any],
    *,
    states: Sequence[str] = (),
    problems: Sequence[str] = (),
    lagging: bool = False,
    limit: int | None = None,
) -> dict[str, Any]:
    """`show_state`'s books narrowed for a fleet: with an attempt in one of `states`, with a
    standing problem of one of `problems` (a stream's, the book's, `projection_failed`, or
    `unnamed_stream`), with complete lines past the cursor; then, with `limit`, the books whose
    lag is oldest first (lagging books by the age of their last applied line, never applied
    first; books with no lag after them)."""
    books = state["books"]
    if states:
        books = [book for book in books if set(states) & _attempt_states(book)]
    if problems:
        books = [book for book in books if set(problems) & _problem_kinds(book)]
    if lagging:
        books = [book for book in books if book["lag"]["lines"] > 0]
    if limit is not None:
        books = sorted(books, key=_lag_age_order)[:limit]
    return {"books": books}


def _attempt_states(book: dict[str, Any]) -> set[str]:
    return {attempt["state"] for run in book["runs"] for attempt in run["attempts"]}


def _problem_kinds(book: dict[str, Any]) -> set[str]:
    kinds = {problem["kind"] for problem in book["problems"]}
    if book["error"] is not None:
        kinds.add(book["error"]["kind"])
    for run in book["runs"]:
        for attempt in run["attempts"]:
            if attempt["error"] is not None and attempt["state"] != "finished":
                kinds.add(attempt["error"]["kind"])
    if book["waiting_to_be_named"]:
        kinds.add("unnamed_stream")
    return kinds


def _lag_age_order(book: dict[str, Any]) -> tuple[int, str, str]:
    """Lagging books first, the oldest last applied line first (never applied: oldest of all)."""
    lag = book["lag"]
    if lag["lines"] == 0:
        return (2, "", book["book_id"])
    applied = lag["last_applied_at"]
    return (0, "", book["book_id"]) if applied is None else (1, applied, book["book_id"])


def _failure_json(row: Row) -> dict[str, Any]:
    """A projection's failure on an attempt (`projection_failures`): the batch was rolled back and
    the book waits for its retry. It stands in the attempt's `error` until a commit moves the
    attempt again."""
    return {
        "kind": "projection_failed",
        "projection": row["projection"],
        "seq": row["seq"],
        "offset": None,
        "detail": row["detail"],
        "failures": row["failures"],
        "since": row["since"].isoformat(),
    }


_HELD = {
    "quarantined": "quarantined: look, then release or skip",
    "stalled": "stalled at a gap: look, then release",
    "refused": "refused: a stream major this platform does not read",
    "parked": "parked behind a foreign stream: name or disown it",
    "unnamed": "waiting to be named",
}
"""What each hold means to the person reading `show`, in a few words."""


def _age(applied_at: str) -> str:
    seconds = (datetime.now(UTC) - datetime.fromisoformat(applied_at)).total_seconds()
    return f"{max(0.0, seconds):.0f} s ago ({applied_at})"


def render_text(state: dict[str, Any], *, filtered: bool = False) -> str:
    """A short human reading of `show_state` (the JSON is the interface for scripts). Money is
    in dollars (`usd`); `filtered`: the books were narrowed (`select_books`), so none shown is
    "no book matches", not "no books registered"."""
    lines: list[str] = []
    for book in state["books"]:
        lines.append(f"book {plain(book['book_id'])}  {plain(book['path'])}")
        lag = book.get("lag")
        if lag is not None:
            applied = lag["last_applied_at"]
            age = "never applied" if applied is None else f"last applied {_age(applied)}"
            held = lag.get("held_by")
            why = (
                ""
                if held is None
                else f", held by stream {plain(held['engine_run_id'])} ({_HELD[held['kind']]})"
            )
            lines.append(
                f"  lag: {counted(lag['lines'], 'line')}, {counted(lag['bytes'], 'byte')} past"
                f" the cursor{why}; {age}"
            )
        for waiting in book.get("waiting_to_be_named", ()):
            lines.append(
                f"  stream {plain(waiting['engine_run_id'])}: waiting to be named (its hello at"
                f" byte {waiting['offset']}); nothing of it is applied: run `platform-ingest name"
                f" BOOK_DIR {plain(waiting['engine_run_id'])}`, or sweep with --auto"
            )
        if book["error"] is not None:
            error = book["error"]
            lines.append(f"  ! {_where(error)}: {plain(error['detail'])}")
        for problem in book.get("problems", ()):
            lines.append(
                f"  ! {problem['kind']} since {problem['since']}: {plain(problem['detail'])}"
            )
        for action in book.get("actions", ()):
            lines.append(
                f"  * {action['at']} {action['action']} {plain(action['engine_run_id'] or '')}"
                f" by {plain(action['by'])}: {plain(action['reason'])}"
            )
        for run in book["runs"]:
            why = plain(run["outcome"] or run["reason"] or run["refusal"] or "")
            if why == run["state"]:
                why = ""  # `completed` with outcome `completed`: said once
            ledger = run["committed_micro_usd"]
            lines.append(
                f"  run {run['run_id']}: {run['state']} {why}".rstrip()
                + f"  units {len(run['units'])}  spent {usd(run['spent_micro_usd'])}"
                + ("" if ledger is None else f" (ledger {usd(ledger)})")
            )
            for attempt in run["attempts"]:
                line = (
                    f"    stream {plain(attempt['engine_run_id'])}: {attempt['state']}"
                    f" at seq {attempt['last_seq']}"
                )
                error = attempt["error"]
                if error is not None and error["kind"] == "projection_failed":
                    line += (
                        f"  ! projection {error['projection']} failed {error['failures']}x"
                        f" (seq {error['seq']}): {plain(error['detail'])}"
                    )
                elif error is not None:
                    line += f"  ! {_where(error)}: {plain(error['detail'])}"
                lines.append(line)
    if not lines:
        lines.append("no book matches" if filtered else "no books registered")
    return "\n".join(lines)


def _where(error: dict[str, Any]) -> str:
    """A problem's kind and where it is: its byte offset and seq, each only when known (a line
    whose seq cannot be read has none)."""
    where = str(error["kind"])
    if error["offset"] is not None:
        where += f" at byte {error['offset']}"
    if error["seq"] is not None:
        where += f" (seq {error['seq']})"
    return where
