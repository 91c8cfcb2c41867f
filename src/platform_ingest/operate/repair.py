"""`repair`: settle a stopped run through the engine's own repair channel.

The platform never opens the engine's SQLite. It runs the engine's status command (`engine-events
status BOOK_DIR --json` unless configured otherwise; the `engine-events` beside the running
interpreter when there is one, as the `platform-ingest` distribution installs it, else the one on
`PATH`; `--status-command` names another, such as the engine's own install), which takes the
engine's book lock without
waiting: while an engine is live it exits 12 with `{"error": "project_locked"}` and the repair is
refused (`EngineLive`). Otherwise it prints the engine's ledger, and the run of its latest stream
gets `settled_micro_usd` = the engine's committed spend and the outcome it reports (`finished`
read through the exit code table (docs/reference/exit-codes.md); a `ceiling` without `finished` pauses; neither means the process stopped
without finishing, which reads as `failed`, reason `no_finished`).

The run settled is always the run of the stream the engine names as its latest; a stream Postgres
has not seen yet is refused (`StreamNotSeen`: sweep first), and a completed run is never rewritten.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import orjson

from engine_events.grammar import INTEGER_MAX

from .._defaults import DEFAULT_STATUS_COMMAND, STATUS_TIMEOUT_S
from ..decisions.exit_codes import ExitCode
from ..decisions.runs import RunView, StateEffect
from ..decisions.states import RunState
from ..errors import EngineLive, NotFound, StatusUnreadable, StreamDisowned, StreamNotSeen
from ..ingest.apply import run_params
from ..ingest.books import book_ref, register_book
from ..store import statements
from ..store.db import Database
from .remedies import default_operator, record_action

logger = logging.getLogger("platform_ingest")


STATUS_OUTPUT_BYTES_MAX = 16 * 1024 * 1024


@dataclass(frozen=True)
class Repaired:
    """What `repair` recorded."""

    book_id: str
    run_id: int | None
    engine_run_id: str | None
    state: RunState | None
    settled_micro_usd: int | None
    streams: list[dict[str, Any]]
    changed: bool = True
    """False when the run had completed (its ledger is recorded, its state is never rewritten),
    or when the status could not be read as a ledger (`reading` says why)."""
    reading: str = "ledger"
    """What the status command said: `ledger` (its money and outcome were read), or
    `schema_mismatch` (exit 13: the engine's database is newer than its status command)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "reading": self.reading,
            "changed": self.changed,
            "book_id": self.book_id,
            "run_id": self.run_id,
            "engine_run_id": self.engine_run_id,
            "state": self.state,
            "settled_micro_usd": self.settled_micro_usd,
            "streams": self.streams,
        }


def _money(value: object, field: str) -> int:
    if type(value) is not int or not 0 <= value <= INTEGER_MAX:
        raise StatusUnreadable(f"status: {field} is not a non-negative integer of micro-USD")
    return value


def status_argv(status_command: str, book_dir: str) -> list[str]:
    """What runs: `status_command` split as a shell splits words (`shlex`; no shell runs it),
    then BOOK_DIR and `--json`."""
    try:
        words = shlex.split(status_command)
    except ValueError as error:
        raise StatusUnreadable(
            f"the status command {status_command!r} cannot be split into words ({error}): "
            "correct --status-command"
        ) from error
    if not words:
        raise StatusUnreadable("the status command is empty: give it with --status-command CMD")
    return [*words, str(book_dir), "--json"]


def _not_found(program: str) -> str:
    return (
        f"status command not found: {program}; repair runs the engine's status command "
        "(engine-events, which the platform-ingest distribution installs beside it): install "
        "engine-events on this host, or give another command with --status-command CMD (run as "
        "CMD BOOK_DIR --json)"
    )


def require_status_command(status_command: str) -> None:
    """Refuse a status command that cannot run on this host (`StatusUnreadable`), before
    anything else is done (a host where `platform-ingest` was installed without its
    dependencies may have no `engine-events`)."""
    program = status_argv(status_command, "")[0]
    if shutil.which(program) is None:
        raise StatusUnreadable(_not_found(program))


def run_status(
    book_dir: str, status_command: str = DEFAULT_STATUS_COMMAND, timeout_s: float = STATUS_TIMEOUT_S
) -> dict[str, Any]:
    """Run the engine's status command over the book; return its JSON, or refuse."""
    argv = status_argv(status_command, book_dir)
    try:
        completed = subprocess.run(  # the operator's configured command, no shell
            argv, capture_output=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as error:
        raise StatusUnreadable(_not_found(argv[0])) from error
    except subprocess.TimeoutExpired as error:
        raise StatusUnreadable(f"status command did not answer within {timeout_s:g} s") from error
    stdout = completed.stdout[:STATUS_OUTPUT_BYTES_MAX]
    try:
        status = orjson.loads(stdout) if stdout.strip() else None
    except orjson.JSONDecodeError:
        status = None
    locked = isinstance(status, dict) and status.get("error") == "project_locked"
    if completed.returncode == ExitCode.PROJECT_LOCKED or locked:
        raise EngineLive(
            "the engine is live (it holds the book's lock): repair only settles a stopped run"
        )
    if completed.returncode == ExitCode.SCHEMA_MISMATCH:
        # A reading, not a failure: the engine's database is newer than this status command.
        return {"error": "schema_mismatch"}
    if completed.returncode != 0:
        stderr = completed.stderr.decode("utf-8", "replace").strip()[-500:]
        raise StatusUnreadable(f"status command exited {completed.returncode}: {stderr}")
    if not isinstance(status, dict):
        raise StatusUnreadable("status command did not print a JSON object")
    return status


def repair_book(
    db: Database,
    book_dir: str,
    *,
    status_command: str = DEFAULT_STATUS_COMMAND,
    timeout_s: float = STATUS_TIMEOUT_S,
    by: str | None = None,
    reason: str = "",
) -> Repaired:
    """Record the engine's ledger and outcome on the run of its latest stream (audited)."""
    book = register_book(db, book_dir)
    status = run_status(book_dir, status_command, timeout_s)
    by = by or default_operator()
    if status.get("error") == "schema_mismatch":
        with db.transaction():
            record_action(
                db,
                book.book_id,
                None,
                "repair",
                by=by,
                reason=reason or "settle a stopped run",
                evidence={"reading": "schema_mismatch"},
            )
        logger.warning(
            "book %s: repair read schema_mismatch: the engine's database is newer than its "
            "status command",
            book_ref(book.book_id),
        )
        return Repaired(book.book_id, None, None, None, None, [], False, "schema_mismatch")
    if status.get("book_id") != book.book_id:
        raise StatusUnreadable("status is for another book than this directory's")
    money = status.get("money")
    if not isinstance(money, dict):
        raise StatusUnreadable("status has no money object")
    settled = _money(money.get("committed_micro_usd"), "money.committed_micro_usd")
    engine_run_id = status.get("engine_run_id")
    finished = status.get("finished")
    ceiling = status.get("ceiling")
    effect = _outcome(finished, ceiling)
    listed = status.get("streams")
    streams: list[Any] = listed if isinstance(listed, list) else []
    with db.transaction():
        attempt = _attempt_of(db, book.book_id, engine_run_id)
        run_id = int(attempt["run_id"])
        if effect.kind == "stopped_without_finished" and attempt["exit_status"] is not None:
            # No `finished`, but the launcher reported how the process ended: that is the reading.
            effect = StateEffect("exited", exit_code=attempt["exit_status"])
        rows = db.fetch_all(statements.RUNS_LOCK, ([run_id],))
        if not rows:
            raise NotFound(f"run {run_id} vanished during repair")
        run = RunView.from_row(rows[0])
        run.settled_micro_usd = settled
        run.spend(settled)
        if isinstance(finished, dict) and "money" in finished:
            finished_money = finished["money"]
            if isinstance(finished_money, dict):
                run.spend(_money(finished_money.get("committed_micro_usd"), "finished.money"))
        # A completed run ended on its own `finished`: its ledger is recorded, its state never
        # rewritten (a later repair must not turn it into `failed/no_finished`).
        changed = run.state != "completed"
        before = run.state
        if changed:
            run.apply_state(effect)
        db.execute(statements.RUN_UPDATE, run_params(run))
        record_action(
            db,
            book.book_id,
            engine_run_id if isinstance(engine_run_id, str) else None,
            "repair",
            by=by,
            reason=reason or "settle a stopped run",
            evidence={
                "reading": effect.kind,
                "run_id": run_id,
                "run_state": {"before": before, "after": run.state},
            },
        )
    logger.info("book %s: run %d repaired -> %s", book_ref(book.book_id), run_id, run.state)
    return Repaired(
        book.book_id,
        run_id,
        engine_run_id if isinstance(engine_run_id, str) else None,
        run.state,
        settled,
        [stream for stream in streams if isinstance(stream, dict)],
        changed=changed,
    )


def _outcome(finished: object, ceiling: object) -> StateEffect:
    if isinstance(finished, dict):
        code = finished.get("exit_code")
        if type(code) is not int:
            raise StatusUnreadable("status: finished.exit_code is not an integer")
        stop = finished.get("stop")
        refusal = finished.get("refusal")
        return StateEffect(
            "finished",
            exit_code=code,
            stop=stop if stop in ("soft", "hard") else None,
            refusal=refusal if isinstance(refusal, str) else None,
        )
    if finished is not None:
        raise StatusUnreadable("status: finished is neither an object nor null")
    if isinstance(ceiling, dict):
        shortfall = ceiling.get("shortfall_micro_usd")
        return StateEffect(
            "ceiling",
            shortfall_micro_usd=None
            if shortfall is None
            else _money(shortfall, "ceiling.shortfall_micro_usd"),
        )
    return StateEffect("stopped_without_finished")


def _attempt_of(db: Database, book_id: str, engine_run_id: object) -> dict[str, Any]:
    """The run of the engine's latest stream; refused when Postgres has not seen that stream.

    Never the book's current run instead: the engine's latest stream may belong to a run that a
    sweep has not created yet, and settling another run with its ledger would rewrite that run
    and count the book's money twice."""
    if not isinstance(engine_run_id, str) or not engine_run_id:
        raise StatusUnreadable("status names no stream: the engine never started one")
    row = db.fetch_one(statements.ATTEMPT_BY_STREAM_LOCK, (book_id, engine_run_id))
    if row is None:
        raise StreamNotSeen(
            f"stream {engine_run_id} is not yet seen by the platform: sweep the book first"
        )
    if row["state"] == "disowned":
        raise StreamDisowned(
            f"the engine's latest stream {engine_run_id} was disowned: its ledger and outcome "
            "are not this book's runs'"
        )
    return row
