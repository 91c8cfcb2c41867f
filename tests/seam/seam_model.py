"""The seam's model and its fault switches, shared by the seam tests.

- `PostgresFaults`: the one seam for Postgres faults. A deferred constraint trigger on `books`
  (every batch of a pass updates its book row once, at the end) refuses the COMMIT of a chosen
  transaction with a chosen SQLSTATE, and a commit hook terminates the pass's backend from a second
  connection at a chosen batch. Both are real failures of a real server.
- `expected_runs`: what Postgres must hold after a prefix of the committed lines was applied once
  each, in auto mode — written from SPEC § 6 and § 4, not from the platform's code.
- `observed_runs` and `applied_hashes`: what Postgres does hold.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo

from platform_ingest import Database
from platform_ingest._exit_codes import read_exit_code
from platform_ingest._show import show_state

Committed = tuple[str, int, str, dict[str, Any]]
"""(engine_run_id, seq, type, data) of one committed line."""


class Stats(Counter[str]):
    """The simulation's figures over a session (printed at its end, and written as JSON to the
    file `SEAM_STATS_JSON` names, when set)."""

    def report_lines(self) -> list[str]:
        lines = [f"{key}: {value:,}" for key, value in sorted(self.items())]
        target = os.environ.get("SEAM_STATS_JSON")
        if target:
            Path(target).write_text(json.dumps(dict(sorted(self.items())), indent=2) + "\n")
        return lines


STATS = Stats()


def dsn_for(admin_dsn: str, database: str) -> str:
    """The admin DSN pointed at another database of the same server."""
    params = conninfo.conninfo_to_dict(admin_dsn)
    params["dbname"] = database
    return conninfo.make_conninfo(**{key: str(value) for key, value in params.items()})


# --- Postgres faults ------------------------------------------------------------------------

_FAULT_DDL = (
    "CREATE SEQUENCE seam_commit_no",
    "CREATE TABLE seam_fail_commit (commit_no bigint PRIMARY KEY, sqlstate text NOT NULL)",
    """CREATE FUNCTION seam_fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$
       DECLARE
         number bigint := nextval('seam_commit_no');
         code text;
       BEGIN
         SELECT sqlstate INTO code FROM seam_fail_commit WHERE commit_no = number;
         IF code IS NOT NULL THEN
           RAISE EXCEPTION 'seam: the commit of transaction % is refused', number
             USING ERRCODE = code;
         END IF;
         RETURN NULL;
       END $$""",
    """CREATE CONSTRAINT TRIGGER seam_fail_commit AFTER INSERT OR UPDATE ON books
       DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION seam_fail_commit()""",
)

COMMIT_FAULTS = {
    # SQLSTATE -> what the platform makes of it
    "commit_serialization_failure": "40001",  # DatabaseTimeout: the pass starts over
    "commit_disk_full": "53100",  # DatabaseUnavailable: the pass reconnects, starts over
    "commit_refused": "P0001",  # DatabaseError: the pass fails; the next one goes on
}


class PostgresFaults:
    """Real Postgres failures, injected from a second connection."""

    def __init__(self, dsn: str) -> None:
        self.admin = psycopg.connect(dsn, autocommit=True)

    @staticmethod
    def install(dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as connection:
            for statement in _FAULT_DDL:
                connection.execute(statement)

    def close(self) -> None:
        self.admin.close()

    def fail_commit(self, sqlstate: str, *, nth: int = 1) -> None:
        """The `nth` transaction from now that writes a book row fails at COMMIT with
        `sqlstate` (its deferred constraint trigger raises)."""
        row = self.admin.execute("SELECT last_value, is_called FROM seam_commit_no").fetchone()
        assert row is not None
        last_value, is_called = row
        upcoming = last_value + 1 if is_called else last_value
        self.admin.execute(
            "INSERT INTO seam_fail_commit (commit_no, sqlstate) VALUES (%s, %s)",
            (upcoming + nth - 1, sqlstate),
        )

    def disarm(self) -> None:
        """Forget armed commit failures that did not happen (the pass had fewer batches)."""
        self.admin.execute("DELETE FROM seam_fail_commit")

    def kill_in_batch(self, db: Database, nth: int) -> Callable[[str], None]:
        """A commit hook that terminates the pass's backend inside its `nth` batch, once the
        batch holds its row locks."""
        seen = [0]

        def hook(stage: str) -> None:
            if stage != "locked":
                return
            seen[0] += 1
            if seen[0] == nth:
                self.terminate(db.backend_pid)

        return hook

    def terminate(self, backend_pid: int) -> None:
        self.admin.execute("SELECT pg_terminate_backend(%s)", (backend_pid,))

    def applied_hashes(self, book_id: str) -> dict[tuple[str, int], bytes]:
        rows = self.admin.execute(
            "SELECT a.engine_run_id, h.seq, h.sha256 FROM line_hashes h"
            " JOIN attempts a USING (attempt_id) WHERE a.book_id = %s",
            (book_id,),
        ).fetchall()
        return {(run_id, seq): bytes(digest) for run_id, seq, digest in rows}

    def spoil_hints(self, book_id: str, how: str) -> None:
        """Lose the tailer's hints the ways a hint can go wrong."""
        if how == "hash":
            self.admin.execute(
                "UPDATE books SET scan_sha256 = '\\x00' WHERE book_id = %s AND scan_offset > 0",
                (book_id,),
            )
            self.admin.execute(
                "UPDATE attempts SET hint_line_bytes = hint_line_bytes + 1 WHERE book_id = %s"
                " AND hint_offset > 0",
                (book_id,),
            )
        elif how == "offset_past_end":
            self.admin.execute(
                "UPDATE books SET scan_offset = scan_offset + 1000000 WHERE book_id = %s"
                " AND scan_offset > 0",
                (book_id,),
            )
            self.admin.execute(
                "UPDATE attempts SET hint_offset = hint_offset + 1000000 WHERE book_id = %s"
                " AND hint_offset > 0",
                (book_id,),
            )
        elif how == "offset_mid_line":
            self.admin.execute(
                "UPDATE books SET scan_offset = scan_offset - 1 WHERE book_id = %s"
                " AND scan_offset > 1",
                (book_id,),
            )
            self.admin.execute(
                "UPDATE attempts SET hint_offset = hint_offset - 1 WHERE book_id = %s"
                " AND hint_offset > 1",
                (book_id,),
            )
        elif how == "file":
            self.admin.execute("UPDATE books SET scan_file = 'gone' WHERE book_id = %s", (book_id,))
            self.admin.execute(
                "UPDATE attempts SET hint_file = 'gone' WHERE book_id = %s", (book_id,)
            )
        else:
            raise ValueError(how)


# --- the model ------------------------------------------------------------------------------

ENDED = ("completed", "failed", "refused")


def expected_runs(applied: Iterable[Committed]) -> list[dict[str, Any]]:
    """The runs of a book after `applied` (a prefix of the committed lines, in file order) was
    applied once each, in auto mode."""
    runs: list[dict[str, Any]] = []
    attempts: dict[str, dict[str, Any]] = {}
    run: dict[str, Any] | None
    for run_id, seq, kind, data in applied:
        if kind == "hello":
            run = runs[-1] if runs else None
            if run is None or run["state"] in ENDED:
                run = {
                    "state": "running",
                    "reason": None,
                    "stop": None,
                    "refusal": None,
                    "outcome": None,
                    "exit_code": None,
                    "committed_micro_usd": 0,
                    "shortfall_micro_usd": None,
                    "units": {},
                    "progress": {},
                    "attempts": [],
                }
                runs.append(run)
            for earlier in attempts.values():
                if earlier["state"] == "active":
                    earlier["state"] = "superseded"
            run.update(
                state="running",
                reason=None,
                stop=None,
                refusal=None,
                outcome=None,
                exit_code=None,
                shortfall_micro_usd=None,
            )
            attempt: dict[str, Any] = {
                "engine_run_id": run_id,
                "state": "active",
                "last_seq": 1,
                "error": None,
            }
            attempt["run"] = run
            attempts[run_id] = attempt
            run["attempts"].append(attempt)
            continue
        attempt = attempts[run_id]
        if seq != attempt["last_seq"] + 1:
            raise AssertionError(f"the applied lines are not dense: {run_id} {seq}")
        attempt["last_seq"] = seq
        run = attempt["run"]
        assert run is not None
        if kind == "spend":
            run["committed_micro_usd"] = max(
                run["committed_micro_usd"], data["committed_micro_usd"]
            )
        elif kind == "progress":
            run["progress"] = {
                name: {"done": count["done"], "total": count["total"]}
                for name, count in data["phases"].items()
            }
        elif kind == "unit_done":
            run["units"].setdefault(data["unit"], (data["index"], len(run["units"])))
        elif kind == "ceiling":
            run.update(state="paused", reason="ceiling", stop=None)
            if "shortfall_micro_usd" in data:
                run["shortfall_micro_usd"] = data["shortfall_micro_usd"]
        elif kind == "bank_stop":
            run.update(state="paused", reason="bank_stop", stop=None)
        elif kind == "finished":
            attempt["state"] = "finished"
            reading = read_exit_code(data["exit_code"])
            run.update(
                state=reading.state,
                outcome=reading.outcome,
                reason=reading.reason,
                refusal=(data["refusal"] or reading.refusal)
                if reading.state == "refused"
                else None,
                exit_code=data["exit_code"],
                stop=data["stop"],
            )
            run["committed_micro_usd"] = max(
                run["committed_micro_usd"], data["money"]["committed_micro_usd"]
            )
    for run in runs:
        run["units"] = [unit for unit, _ in sorted(run["units"].items(), key=lambda u: u[1])]
        for attempt in run["attempts"]:
            del attempt["run"]
    return runs


RUN_KEYS = (
    "state",
    "reason",
    "stop",
    "refusal",
    "outcome",
    "exit_code",
    "committed_micro_usd",
    "shortfall_micro_usd",
    "units",
    "progress",
)


def observed_runs(db: Database, book_dir: Path) -> tuple[list[dict[str, Any]], Any]:
    """The book's runs as `show --json` prints them (the model's keys), and the book's error."""
    (book,) = show_state(db, [str(book_dir)])["books"]
    runs = []
    for run in book["runs"]:
        shown = {key: run[key] for key in RUN_KEYS}
        shown["attempts"] = [
            {key: attempt[key] for key in ("engine_run_id", "state", "last_seq", "error")}
            for attempt in run["attempts"]
        ]
        runs.append(shown)
    return runs, book.get("error")


def applied_prefix(
    committed: list[Committed], cursors: dict[str, int]
) -> tuple[int, list[Committed]]:
    """The number of committed lines (in commit order) the cursors cover; they must be a prefix."""
    count = 0
    for run_id, seq, _, _ in committed:
        if seq <= cursors.get(run_id, 0):
            count += 1
        else:
            break
    covered = sum(min(cursors.get(run_id, 0), seq) >= seq for run_id, seq, _, _ in committed)
    if covered != count:
        raise AssertionError(
            f"the applied lines are not a prefix of the commit order ({count} vs {covered})"
        )
    known = {run_id for run_id, _, _, _ in committed}
    unknown = set(cursors) - known
    if unknown:
        raise AssertionError(f"Postgres holds streams nobody committed: {sorted(unknown)}")
    return count, committed[:count]


def sha256(raw: bytes) -> bytes:
    return hashlib.sha256(raw).digest()
