"""What ends a stopped state: the launcher's report of an exit, and the operator's remedies.

Every one of them is a row in `operator_actions` — who (`by`), why (`reason`), when, and the
evidence it overrode — written in the same transaction as the change it makes, and shown by
`show --json` (the book's `actions`). The model is Postgres's `ALTER SUBSCRIPTION ... SKIP (lsn)`:
an operator-named, audited step over exactly one item, never a silent one.

- `exited`: the launcher reports a process's exit status (negative: a signal). Without a
  `finished`, the run takes its exit code's reading (docs/reference/exit-codes.md); a `finished` read later wins, and both are kept.
- `skip`: a quarantined line, named by its seq and the sha256 of its bytes, is passed with no
  effect; only that line (another line at that seq is still a conflict).
- `disown`: a foreign stream that is truly not ours stops parking the book, and none of its
  effects ever reach our run; `undisown` takes a mistaken `disown` back: the stream is foreign
  again (nothing of it was applied), the next pass reads the journal from byte 0, and `name`
  makes it ours (in auto mode the next pass starts an attempt for it).
- `abandon`: an attempt the operator gives up on; its run, if nothing else can end it, fails with
  reason `abandoned` (settle its money with `repair`).
- `release` (in `naming`) lifts a quarantine, a stall or a refusal, audited the same way.

Each change bumps the book's scan epoch, so a pass that began before it cannot write over it (its
compare-and-set fails and it starts over from what the remedy left).
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Literal

from psycopg.types.json import Jsonb

from ..decisions.runs import RunView, StateEffect
from ..decisions.states import RunState
from ..decisions.views import AWAITING_STATES, AttemptState, BookView, ProblemRecord, problem_json
from ..errors import (
    CompactedConflict,
    ConfigError,
    LineRefused,
    MalformedLine,
    NotFound,
    ProblemKind,
)
from ..ingest.books import book_ref, register_book, remedied_book, require_stream_id
from ..journal.decode import decode_line
from ..journal.reader import JOURNAL_NAME, open_journal
from ..store import statements
from ..store.db import Database, Row

logger = logging.getLogger("platform_ingest")

SKIPPABLE_KINDS: frozenset[ProblemKind] = frozenset(
    {"malformed", "payload_conflict", "database_refused"}
)
ABANDONABLE_STATES: frozenset[AttemptState] = frozenset(
    {"pending", "stalled", "parked", "quarantined", "refused", "exited"}
)
LIVE_RUN_STATES: frozenset[RunState] = frozenset({"running", "paused"})


def default_operator() -> str:
    """Who acts when `--by` is not given: the account running the command."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


ActionState = AttemptState | Literal["foreign"]
"""An attempt's state after a remedy, or `foreign`: the stream has no attempt any more
(`undisown`)."""


@dataclass(frozen=True)
class Action:
    """What a remedy did: the audit row's id (None: nothing was done nor recorded, a look at a
    line to skip), and the attempt's state after it (None, with no stream: a remedy of the
    book's own error)."""

    action_id: int | None
    book_id: str
    engine_run_id: str | None
    state: ActionState | None
    detail: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        # A look records nothing: no id to show, and it says so.
        done = {"recorded": False} if self.action_id is None else {"action_id": self.action_id}
        return {
            **done,
            "book_id": self.book_id,
            "engine_run_id": self.engine_run_id,
            "state": self.state,
            **self.detail,
        }


def record_action(
    db: Database,
    book_id: str,
    engine_run_id: str | None,
    action: str,
    *,
    by: str,
    reason: str,
    evidence: dict[str, Any],
) -> int:
    """Write one audit row (inside the caller's transaction); return its id."""
    row = db.fetch_one(
        statements.ACTION_INSERT, (book_id, engine_run_id, action, by, reason, Jsonb(evidence))
    )
    if row is None:
        raise NotFound("the audit row was not written")
    return int(row["action_id"])


def _require_reason(reason: str, by: str) -> None:
    if not reason.strip():
        raise ConfigError("a remedy needs --reason: the audit keeps why it was done")
    if not by.strip():
        raise ConfigError("a remedy needs --by: the audit keeps who did it")


def _attempt(db: Database, book_id: str, engine_run_id: str) -> Row:
    row = db.fetch_one(statements.ATTEMPT_BY_STREAM_LOCK, (book_id, engine_run_id))
    if row is None:
        raise NotFound(f"no attempt of stream {engine_run_id} on this book (name or sweep it)")
    return row


def _drives_its_run(db: Database, attempt: Row) -> bool:
    """True when no other stream of the attempt's run lies after it in the file."""
    for other in db.fetch_all(statements.ATTEMPTS_OF_RUNS, ([attempt["run_id"]],)):
        if other["attempt_id"] == attempt["attempt_id"] or other["state"] == "disowned":
            continue
        if (other["stream_index"] or 0) > (attempt["stream_index"] or 0):
            return False
        if (
            attempt["stream_index"] is not None
            and other["stream_index"] is None
            and other["state"] in ("pending", "exited")
        ):
            return False  # a later launch of the run, not seen yet
    return True


def _move_run(db: Database, run_id: int, effect: StateEffect) -> tuple[RunState, RunState]:
    """Apply one state effect to a locked run; return its state before and after."""
    rows = db.fetch_all(statements.RUNS_LOCK, ([run_id],))
    if not rows:
        raise NotFound(f"run {run_id} vanished")
    run = RunView.from_row(rows[0])
    before = run.state
    run.apply_state(effect)
    db.execute(statements.RUN_UPDATE, run.update_params())
    return before, run.state


# --- the launcher's report ------------------------------------------------------------------


def report_exit(
    db: Database,
    book_dir: str,
    engine_run_id: str,
    exit_status: int,
    *,
    by: str | None = None,
    reason: str = "",
) -> Action:
    """Record a process's exit status on its attempt; without a `finished`, the run reads it."""
    if not -255 <= exit_status <= 255:
        raise ConfigError(f"exit status {exit_status} is not one (-255..255; negative: a signal)")
    by = by or default_operator()
    book = remedied_book(db, book_dir)
    with db.transaction():
        attempt = _attempt(db, book.book_id, engine_run_id)
        state: AttemptState = attempt["state"]
        run_moved: tuple[RunState, RunState] | None = None
        if state not in ("finished", "disowned", "abandoned") and _drives_its_run(db, attempt):
            run_moved = _move_run(
                db, attempt["run_id"], StateEffect("exited", exit_code=exit_status)
            )
        db.execute(statements.ATTEMPT_EXITED, (exit_status, attempt["attempt_id"]))
        after: AttemptState = "exited" if state in ("pending", "active") else state
        evidence = {
            "exit_status": exit_status,
            "attempt_state": state,
            "run_state": None
            if run_moved is None
            else {"before": run_moved[0], "after": run_moved[1]},
        }
        action_id = record_action(
            db,
            book.book_id,
            engine_run_id,
            "exited",
            by=by,
            reason=reason or "the launcher reported the process's exit",
            evidence=evidence,
        )
        _journal_missing_ended(db, book.book_id)
        db.execute(statements.BOOK_EPOCH_BUMP, (book.book_id,))
    logger.info(
        "book %s: stream %s exited (%d)", book_ref(book.book_id), engine_run_id, exit_status
    )
    return Action(action_id, book.book_id, engine_run_id, after, evidence)


# --- remedies ------------------------------------------------------------------------------


def _line_at(book_path: str, offset: int) -> tuple[bytes, int, int | None] | None:
    """The sha256, length and seq (None when none can be read) of the complete line that starts
    at `offset`, or None."""
    journal = open_journal(book_path)
    if journal is None:
        return None
    with journal:
        for start, raw in journal.lines(offset):
            if start != offset:
                return None
            if isinstance(raw, MalformedLine):
                if raw.line_sha256 is None:
                    return None
                return raw.line_sha256, raw.size_bytes, None
            try:
                seq: int | None = decode_line(raw).seq
            except LineRefused as refused:
                seq = refused.seq
            return hashlib.sha256(raw).digest(), len(raw), seq
    return None


def skip_line(
    db: Database,
    book_dir: str,
    engine_run_id: str,
    seq: int,
    *,
    sha256: str | None,
    reason: str,
    by: str | None = None,
) -> Action:
    """Pass one quarantined line with no effect: the one at `seq` whose bytes hash to `sha256`.

    Without `sha256` nothing changes and nothing is recorded: the returned action (no id) shows
    the line's hash, to be checked and given back.
    """
    by = by or default_operator()
    _require_reason(reason, by)
    book = register_book(db, book_dir)
    with db.transaction():
        attempt = _attempt(db, book.book_id, engine_run_id)
        error = ProblemRecord.from_row(attempt)
        if attempt["state"] != "quarantined" or error is None or error.kind not in SKIPPABLE_KINDS:
            raise ConfigError(
                f"stream {engine_run_id} is {attempt['state']}"
                + ("" if error is None else f" ({error.kind})")
                + "; only a line that quarantined its stream (malformed, payload_conflict, "
                "database_refused) can be skipped"
            )
        if CompactedConflict.recorded(
            error.kind, error.seq, error.detail, attempt["compacted_seq"] or 0
        ):
            raise ConfigError(
                f"stream {engine_run_id}'s conflict is of its compacted range (seqs 1.."
                f"{error.seq}): a line of it changed, and which one is no longer known, so no "
                "single line can be skipped. Put the journal back as it was and `release` the "
                "stream, or `abandon` it (then `repair` settles the run's money)"
            )
        expected = error.seq if error.seq is not None else attempt["last_seq"] + 1
        if seq != expected:
            raise ConfigError(f"the quarantined line is at seq {expected}, not {seq}")
        for _, skipped_seq, skipped in db.fetch_tuples(
            statements.LINE_SKIPS_OF_ATTEMPTS, ([attempt["attempt_id"]],)
        ):
            if skipped_seq == seq:
                raise ConfigError(
                    f"seq {seq} of stream {engine_run_id} already has a skipped line (sha256 "
                    f"{bytes(skipped).hex()}); this is another line at that seq, and a skip "
                    "passes one line only. Put the journal back and `release` the stream, or "
                    "`abandon` it"
                )
        if error.offset is None:
            raise ConfigError("the quarantine names no byte offset: nothing to skip")
        found = _line_at(book.path, error.offset)
        if found is None:
            raise ConfigError(
                f"no complete line starts at byte {error.offset} of the journal any more"
            )
        digest, size, found_seq = found
        if found_seq is not None and found_seq != seq:
            raise ConfigError(
                f"the line at byte {error.offset} is seq {found_seq} now, not the quarantined seq "
                f"{seq}: the journal was rewritten since the quarantine. `release` the stream to "
                "have it read again: a line still wrong is quarantined anew, where it is now"
            )
        evidence: dict[str, Any] = {
            "seq": seq,
            "offset": error.offset,
            "bytes": size,
            "sha256": digest.hex(),
            "error": problem_json(attempt),
        }
        if sha256 is None:
            return Action(None, book.book_id, engine_run_id, attempt["state"], evidence)
        if sha256.strip().lower() != digest.hex():
            raise ConfigError(
                f"the line at byte {error.offset} has sha256 {digest.hex()}, not the one given"
            )
        action_id = record_action(
            db, book.book_id, engine_run_id, "skip", by=by, reason=reason, evidence=evidence
        )
        db.execute(statements.LINE_SKIP_INSERT, (attempt["attempt_id"], seq, digest, action_id))
        state: AttemptState = "active" if attempt["last_seq"] > 0 else "pending"
        db.execute(statements.ATTEMPT_SET_STATE, (state, attempt["attempt_id"], "quarantined"))
        db.execute(statements.BOOK_SCAN_RESET, (book.book_id,))
    logger.warning(
        "book %s: stream %s, seq %d skipped by an operator",
        book_ref(book.book_id),
        engine_run_id,
        seq,
    )
    return Action(action_id, book.book_id, engine_run_id, state, evidence)


def _stream_remedy(
    db: Database, book_dir: str, engine_run_id: str, reason: str, by: str | None
) -> tuple[BookView, str]:
    """What `disown` and `undisown` check first: a stream id, a reason and who; the book."""
    require_stream_id(engine_run_id)
    by = by or default_operator()
    _require_reason(reason, by)
    return register_book(db, book_dir), by


def disown_stream(
    db: Database, book_dir: str, engine_run_id: str, *, reason: str, by: str | None = None
) -> Action:
    """Say a stream is not ours: it no longer parks the book and none of its effects apply."""
    book, by = _stream_remedy(db, book_dir, engine_run_id, reason, by)
    with db.transaction():
        if db.fetch_one(statements.PRUNED_STREAM_EXISTS, (book.book_id, engine_run_id)) is not None:
            raise ConfigError(
                f"stream {engine_run_id} was this book's and its run was pruned: its lines are "
                "never applied again, so there is nothing to disown"
            )
        existing = db.fetch_one(statements.ATTEMPT_BY_STREAM_LOCK, (book.book_id, engine_run_id))
        if existing is not None:
            raise ConfigError(
                f"stream {engine_run_id} is this book's ({existing['state']}); "
                "use abandon to give up on one of ours"
            )
        run = db.fetch_one(statements.RUN_CURRENT_LOCK, (book.book_id,))
        if run is None:
            raise ConfigError("the book has no run: nothing of ours to keep that stream from")
        row = db.fetch_one(
            statements.ATTEMPT_INSERT_DISOWNED, (book.book_id, run["run_id"], engine_run_id)
        )
        if row is None:
            raise NotFound("the disowned stream was not recorded")
        unparked = db.execute(statements.ATTEMPTS_UNPARK, (book.book_id,))
        evidence = {"run_id": run["run_id"], "attempts_unparked": unparked}
        action_id = record_action(
            db, book.book_id, engine_run_id, "disown", by=by, reason=reason, evidence=evidence
        )
        db.execute(statements.BOOK_SCAN_RESET, (book.book_id,))
    logger.warning(
        "book %s: stream %s disowned by an operator", book_ref(book.book_id), engine_run_id
    )
    return Action(action_id, book.book_id, engine_run_id, "disowned", evidence)


def undisown_stream(
    db: Database, book_dir: str, engine_run_id: str, *, reason: str, by: str | None = None
) -> Action:
    """Take a `disown` back: the stream is foreign again, as it was before it was disowned."""
    book, by = _stream_remedy(db, book_dir, engine_run_id, reason, by)
    with db.transaction():
        if db.fetch_one(statements.PRUNED_STREAM_EXISTS, (book.book_id, engine_run_id)) is not None:
            raise ConfigError(
                f"stream {engine_run_id}'s run was pruned; its lines are never applied again"
            )
        existing = db.fetch_one(statements.ATTEMPT_BY_STREAM_LOCK, (book.book_id, engine_run_id))
        if existing is None or existing["state"] != "disowned":
            raise ConfigError(
                f"stream {engine_run_id} is not disowned on this book"
                + ("" if existing is None else f" (it is {existing['state']})")
                + "; only a disowned stream can be taken back"
            )
        if existing["last_seq"] != 0 or not db.execute(
            statements.ATTEMPT_DELETE_DISOWNED, (existing["attempt_id"],)
        ):
            raise NotFound(f"stream {engine_run_id} is no longer a disowned stream")
        evidence = {"run_id": existing["run_id"], "attempt_state": "disowned"}
        action_id = record_action(
            db, book.book_id, engine_run_id, "undisown", by=by, reason=reason, evidence=evidence
        )
        # Passes walked past the stream: the next one reads its hello again.
        db.execute(statements.BOOK_SCAN_RESET, (book.book_id,))
    logger.warning(
        "book %s: stream %s taken back from disowned by an operator",
        book_ref(book.book_id),
        engine_run_id,
    )
    return Action(action_id, book.book_id, engine_run_id, "foreign", evidence)


def _journal_missing_ended(db: Database, book_id: str) -> None:
    """A remedy left no attempt awaiting lines: the book's `journal_missing` ends with it (a
    worker passes a gone directory no more, so no pass would clear it)."""
    db.execute(statements.BOOK_JOURNAL_MISSING_ENDED, (book_id, book_id, sorted(AWAITING_STATES)))


def abandon_attempt(
    db: Database, book_dir: str, engine_run_id: str, *, reason: str, by: str | None = None
) -> Action:
    """Give up on one of our attempts; its run fails (`abandoned`) if nothing else can end it."""
    by = by or default_operator()
    _require_reason(reason, by)
    book = remedied_book(db, book_dir)
    journal_gone = not os.path.lexists(os.path.join(book.path, JOURNAL_NAME))
    with db.transaction():
        attempt = _attempt(db, book.book_id, engine_run_id)
        state = attempt["state"]
        if state not in ABANDONABLE_STATES and not (state == "active" and journal_gone):
            raise ConfigError(
                f"stream {engine_run_id} is {state}; only a "
                + ", ".join(sorted(ABANDONABLE_STATES))
                + " attempt can be abandoned (an active one too once its journal is gone)"
            )
        run_moved: tuple[str, str] | None = None
        run_row = db.fetch_all(statements.RUNS_LOCK, ([attempt["run_id"]],))
        if run_row and run_row[0]["state"] in LIVE_RUN_STATES and _drives_its_run(db, attempt):
            run_moved = _move_run(db, attempt["run_id"], StateEffect("abandoned"))
        db.execute(statements.ATTEMPT_SET_STATE, ("abandoned", attempt["attempt_id"], state))
        evidence = {
            "attempt_state": state,
            "journal_gone": journal_gone,
            "last_seq": attempt["last_seq"],
            "error": problem_json(attempt),
            "run_state": None
            if run_moved is None
            else {"before": run_moved[0], "after": run_moved[1]},
        }
        action_id = record_action(
            db, book.book_id, engine_run_id, "abandon", by=by, reason=reason, evidence=evidence
        )
        _journal_missing_ended(db, book.book_id)
        db.execute(statements.BOOK_EPOCH_BUMP, (book.book_id,))
    logger.warning(
        "book %s: stream %s abandoned by an operator", book_ref(book.book_id), engine_run_id
    )
    return Action(action_id, book.book_id, engine_run_id, "abandoned", evidence)
