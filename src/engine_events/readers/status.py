"""`engine-events status BOOK_DIR [--json] [--repair]`: the repair channel over a STOPPED run.

It takes the engine's own lock, non-blocking: while an engine is live it answers exit 12 and
`{"error": "project_locked"}` and touches nothing. Otherwise it reads the book's database and reports;
with `--repair` it first runs start-up recovery steps (1) and (2): the torn tail cut and the committed
rows that were never projected appended, byte-identical.

With `--json` (what the platform's `repair` reads) it prints one JSON object, the report or the
error; without it, a short summary of the same fields for a person, and an error as one line on
stderr. The exit code is the same in both forms.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import orjson

from .. import _outbox, _sql
from .._exit_codes import ExitCode
from .._journal_file import JournalFile, JournalIO, OsJournalIO
from .._lock import BookLock
from .._projection import Projector
from .._schema import connect, require_durable, require_known_version
from .._sqlite import translated
from ..errors import BookDatabaseError, BookDirectoryError, EngineEventsError, ProjectLocked
from .plain import plain, usd


@translated()
def read_status(conn: sqlite3.Connection) -> dict[str, Any]:
    """The status report of a book's database (see the module docstring for its shape)."""
    version = require_known_version(conn)
    # An older database is read as it is: the repair channel never migrates (an older engine
    # would then refuse its own book); the book's engine migrates it when it starts.
    summaries = version >= _sql.SUMMARY_SINCE
    if version == 0:  # the emitter never ran on this database
        states: list[_outbox.StreamState] = []
    else:
        states = _outbox.streams(conn, summaries=summaries)
    latest = states[-1] if states else None
    journal_row = None if not states else conn.execute(_sql.JOURNAL_STATE_GET).fetchone()

    def data_of(state: _outbox.StreamState, event_type: str) -> Any:
        line = _outbox.latest_line(conn, state, event_type, summaries=summaries)
        return None if line is None else orjson.loads(line)["data"]

    def newest(event_type: str) -> Any:
        """The latest event of a type across streams: the ledger and progress carry over."""
        for state in reversed(states):
            data = data_of(state, event_type)
            if data is not None:
                return data
        return None

    spend = newest("spend")
    progress = newest("progress")
    return {
        "book_id": None if latest is None else latest.book_id,
        "engine_run_id": None if latest is None else latest.engine_run_id,
        "streams": [
            {
                "engine_run_id": state.engine_run_id,
                "last_seq": state.last_seq,
                "projected_seq": state.projected_seq,
            }
            for state in states
        ],
        "journal": "ok" if journal_row is None else journal_row[0],
        "progress": None if progress is None else progress["phases"],
        "money": {"committed_micro_usd": 0 if spend is None else spend["committed_micro_usd"]},
        "ceiling": None if latest is None else data_of(latest, "ceiling"),
        "finished": None if latest is None else data_of(latest, "finished"),
    }


@translated()
def repair(conn: sqlite3.Connection, book_dir: Path, *, io: JournalIO | None = None) -> None:
    """Start-up recovery steps (1) and (2) over a stopped run; the caller holds the lock.

    `io` is the journal's system calls (the real ones unless a test injects faults). A repair that
    projected everything ends a degraded episode: the journal's state is recorded `ok` again."""
    version = require_known_version(conn)
    if version == 0:
        return  # the emitter never ran here: there is no outbox to project
    journal = JournalFile(book_dir, io or OsJournalIO())
    try:
        journal.open()
        projector = Projector(conn, journal, summaries=version >= _sql.SUMMARY_SINCE)
        projector.recover()
        projector.record_watermarks()
    finally:
        journal.close()
    # Every committed row is in the journal now: a degraded episode is over, as an engine's next
    # successful flush would have said.
    row = conn.execute(_sql.JOURNAL_STATE_GET).fetchone()
    if row is not None and row[0] == "degraded":
        conn.execute(_sql.BEGIN_IMMEDIATE)
        try:
            conn.execute(_sql.JOURNAL_STATE_SET, {"state": "ok"})
        except BaseException:
            conn.rollback()
            raise
        conn.commit()


def command(book_dir: Path, *, database_name: str, repair_first: bool, as_json: bool) -> int:
    """Print the status of a stopped book, as JSON with `as_json` (the repair channel's form),
    else as a short text; return the process exit code (the same in both forms)."""
    _error = _json_error if as_json else _text_error
    try:
        with BookLock(book_dir):
            database = book_dir / database_name
            if not database.is_file():
                return _error("no_database", ExitCode.SOURCE_UNREADABLE, str(database))
            with translated():
                conn = connect(database)
                try:
                    require_durable(conn)
                    require_known_version(conn)  # a newer database is refused before any repair
                    if repair_first:
                        repair(conn, book_dir)
                    report = read_status(conn)
                finally:
                    conn.close()
    except ProjectLocked:
        return _error("project_locked", ExitCode.PROJECT_LOCKED)
    except BookDirectoryError as error:
        if book_dir.exists() and not book_dir.is_dir():
            return _error("book_directory", error.exit_code, f"not a directory: {book_dir}")
        return _error("book_directory", error.exit_code, str(error))
    except BookDatabaseError as error:  # SQLite's errors, translated once (`_sqlite`)
        return _error("unreadable", ExitCode.INFRA, str(error))
    except EngineEventsError as error:
        return _error(error.exit_code.outcome, error.exit_code, str(error))
    except OSError as error:
        return _error("unreadable", ExitCode.INFRA, str(error))
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(report) + b"\n")
    else:
        sys.stdout.write(format_text(report) + "\n")
    return ExitCode.CLEAN


def _json_error(kind: str, code: int, detail: str | None = None) -> int:
    payload: dict[str, Any] = {"error": kind}
    if detail is not None:
        payload["detail"] = detail
    sys.stdout.buffer.write(orjson.dumps(payload) + b"\n")
    return int(code)


LOCKED_TEXT = "an engine is live on the book (it holds the book's lock): status reads a stopped run"


def _text_error(kind: str, code: int, detail: str | None = None) -> int:
    """The error as one line on stderr (stdout stays empty), with the exit code of the JSON form."""
    said = LOCKED_TEXT if detail is None and kind == "project_locked" else detail
    text = kind if said is None else f"{kind}: {said}"
    print(f"engine-events status: {plain(text)}", file=sys.stderr)
    return int(code)


def _units(volume: object) -> str:
    if not isinstance(volume, dict):
        return ""
    return f", {volume.get('units_done')} of {volume.get('units_total')} units"


def _usd(micro_usd: object) -> str:
    """Money as dollars, like every text view (`usd`); a value that is not an amount, as it is."""
    if isinstance(micro_usd, int) and not isinstance(micro_usd, bool) and micro_usd >= 0:
        return usd(micro_usd)
    return plain(str(micro_usd))


def format_text(report: dict[str, Any]) -> str:
    """The short human summary of the report `--json` prints, field by field (every value that
    came from the book's database through `plain`)."""
    if report["engine_run_id"] is None:
        return "no stream: the emitter never ran on this book"
    finished = report["finished"]
    if isinstance(finished, dict):
        ended = (
            f"finished {plain(str(finished['outcome']))} (exit {finished['exit_code']})"
            + ("" if finished.get("stop") is None else f", {plain(str(finished['stop']))} stop")
            + (
                ""
                if finished.get("refusal") is None
                else f", refusal {plain(str(finished['refusal']))}"
            )
            + _units(finished.get("volume"))
        )
    else:
        ended = "stopped without finished"
    lines = [
        f"book {plain(str(report['book_id']))}: latest stream "
        f"{plain(report['engine_run_id'])} {ended}",
        f"  money: {_usd(report['money']['committed_micro_usd'])} committed",
    ]
    ceiling = report["ceiling"]
    if isinstance(ceiling, dict):
        shortfall = ceiling.get("shortfall_micro_usd")
        lines.append(
            f"  ceiling: {'halted' if ceiling.get('halted') else 'reached'}"
            f" ({plain(str(ceiling.get('scope')))})"
            + ("" if shortfall is None else f", shortfall {_usd(shortfall)}")
        )
    progress = report["progress"]
    if isinstance(progress, dict) and progress:
        phases = ", ".join(
            f"{plain(str(name))} {counts.get('done')}/{counts.get('total')}"
            for name, counts in progress.items()
            if isinstance(counts, dict)
        )
        lines.append(f"  progress: {phases}")
    lines.append(f"  journal: {plain(str(report['journal']))}")
    lines.extend(
        f"  stream {plain(stream['engine_run_id'])}: last seq {stream['last_seq']}, "
        f"projected seq {stream['projected_seq']}"
        for stream in report["streams"]
    )
    return "\n".join(lines)
