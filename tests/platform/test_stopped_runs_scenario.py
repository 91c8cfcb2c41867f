"""Six runs that end badly, each ended by the documented command — through the two CLIs only.

Every book is launched in named mode, as a real launcher does it: `platform-ingest name BOOK ID`,
then `engine-events demo BOOK --engine-run-id ID`, then `platform-ingest exited BOOK ID STATUS` with
the process's real exit status once it has ended. Each book then reaches one stopped state
(docs/platform/states.md, "What ends each stopped state") and the operator ends it:

1. SIGKILL, no `finished`           -> `exited ... -9` (run `failed`, `signal_9`), then `repair`
2. a refusal before the hello       -> `exited ... 12` (the attempt stops being `pending`)
3. a foreign stream parks the book  -> `disown`
4. a payload conflict (quarantined) -> `skip` without `--sha256` (nothing changes), then with it
5. a gap (stalled)                  -> `abandon`, then `repair`
6. an unread major (refused)        -> `release` (refused again), then `abandon`

At the end no run is `running` while no engine is live, every remedy is in its book's audit with
the `--by` and `--reason` given, and every run a real engine wrote holds the engine's own ledger.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from platform_journals import BIN, DEADLINE_S, _environment, wait_for, write

pytestmark = [pytest.mark.postgres, pytest.mark.crash]

UNIT_COST = 250_000
SLOW = ("--units", "40", "--pace-ms", "100")  # killed mid-run, after a few lines
FAST = ("--units", "3", "--pace-ms", "1")  # runs to its end at once

BOOKS = ("killed-book", "refused-book", "parked-book", "conflict-book", "gap-book", "major2-book")

# One engine_run_id per stream, recognisable in a failure message.
KILLED = "0000aaaa-0001-4000-8000-000000000001"
REFUSED = "0000aaaa-0002-4000-8000-000000000002"
PARKED = "0000aaaa-0003-4000-8000-000000000003"
FOREIGN = "0000ffff-0003-4000-8000-00000000000f"
CONFLICT = "0000aaaa-0004-4000-8000-000000000004"
GAP = "0000aaaa-0005-4000-8000-000000000005"
MAJOR_2 = "0000aaaa-0006-4000-8000-000000000006"

# Who did what: a distinct name for each hand, so that every audit row is told apart.
LAUNCHER = "launcher-scenario"
BY_REPAIR_KILLED = "oncall-repair-killed"
BY_DISOWN = "oncall-disown-parked"
BY_SKIP = "oncall-skip-conflict"
BY_ABANDON_GAP = "oncall-abandon-gap"
BY_REPAIR_GAP = "oncall-repair-gap"
BY_RELEASE = "oncall-release-major2"
BY_ABANDON_MAJOR = "oncall-abandon-major2"


def _run(argv: list[str], expect: int) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, check=False, capture_output=True, text=True, env=_environment(), timeout=DEADLINE_S
    )
    assert done.returncode == expect, (
        f"{' '.join(argv)}: exit {done.returncode}, expected {expect}\n"
        f"stdout: {done.stdout}\nstderr: {done.stderr}"
    )
    return done


def engine(*args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    """`engine-events ARGS...` to its end, its exit status checked."""
    return _run([str(BIN / "engine-events"), "--log-level", "WARNING", *args], expect)


def engine_status(book: Path, expect: int = 0) -> dict[str, Any]:
    """The engine's own view of its book (the repair channel): exit 12 while an engine is live."""
    status: dict[str, Any] = json.loads(engine("status", str(book), "--json", expect=expect).stdout)
    return status


def journal_lines(book: Path) -> list[bytes]:
    """The journal's complete lines (none when there is no journal)."""
    try:
        content = (book / "events.jsonl").read_bytes()
    except FileNotFoundError:
        return []
    return content[: content.rfind(b"\n") + 1].splitlines(keepends=True)


def offset_of(book: Path, engine_run_id: str) -> int:
    """Where the hello of that stream starts in the journal."""
    offset = 0
    for line in journal_lines(book):
        if b'"type":"hello"' in line and engine_run_id.encode() in line:
            return offset
        offset += len(line)
    raise AssertionError(f"no hello of {engine_run_id}")


def attempt_of(run: dict[str, Any], engine_run_id: str) -> dict[str, Any]:
    (attempt,) = [a for a in run["attempts"] if a["engine_run_id"] == engine_run_id]
    assert isinstance(attempt, dict)
    return attempt


@dataclass
class Platform:
    """The platform's side of the scenario: its command, its launches and its audit so far."""

    dsn: str
    logs: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    audit: list[tuple[str, str, str, str]] = field(default_factory=list)
    """(book, action, --by, --reason) of every remedy given: each must be in the audit."""

    def ingest(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        """`platform-ingest --dsn DSN ARGS...`, its exit status checked."""
        return _run([str(BIN / "platform-ingest"), "--dsn", self.dsn, *args], expect)

    def remedy(
        self, action: str, book: Path, *args: str, by: str, reason: str, expect: int = 0
    ) -> str:
        """An audited command; what it prints."""
        done = self.ingest(action, str(book), *args, "--by", by, "--reason", reason, expect=expect)
        if expect == 0:
            self.audit.append((book.name, action, by, reason))
        return done.stdout

    def start_engine(
        self, book: Path, engine_run_id: str, *options: str
    ) -> subprocess.Popen[bytes]:
        """`engine-events demo BOOK --engine-run-id ID ...`, a process of its own."""
        argv = [str(BIN / "engine-events"), "--log-level", "WARNING", "demo", str(book)]
        argv += ["--engine-run-id", engine_run_id, "--unit-cost-micro-usd", str(UNIT_COST)]
        with open(self.logs / f"{engine_run_id}.log", "ab") as stderr:
            process = subprocess.Popen(
                [*argv, *options], stdout=subprocess.DEVNULL, stderr=stderr, env=_environment()
            )
        self.processes.append(process)
        return process

    def launch(self, book: Path, engine_run_id: str, *options: str) -> subprocess.Popen[bytes]:
        """What the platform does to launch an engine: name its stream, then start it with it."""
        self.ingest("name", str(book), engine_run_id)
        return self.start_engine(book, engine_run_id, *options)

    def exited(self, book: Path, engine_run_id: str, status: int) -> dict[str, Any]:
        """The launcher's report of a process's real exit status (negative: its signal)."""
        reason = f"{book.name}: the engine exited with {status}"
        printed = self.remedy(
            "exited", book, engine_run_id, str(status), by=LAUNCHER, reason=reason
        )
        reported: dict[str, Any] = json.loads(printed)
        return reported

    def sweep(self, book: Path) -> dict[str, Any]:
        """One pass over the book in named mode (no `--auto`)."""
        report: dict[str, Any] = json.loads(self.ingest("sweep", str(book), "--json").stdout)
        assert report["book_id"] == book.name
        return report

    def show(self, *books: Path) -> dict[str, dict[str, Any]]:
        """book_id -> its entry of `show --json` (every registered book when none is given)."""
        state = json.loads(self.ingest("show", *map(str, books), "--json").stdout)
        return {book["book_id"]: book for book in state["books"]}

    def run(self, book: Path) -> dict[str, Any]:
        """The book's only run."""
        (run,) = self.show(book)[book.name]["runs"]
        assert isinstance(run, dict)
        return run


def reap(process: subprocess.Popen[bytes]) -> int:
    return process.wait(timeout=DEADLINE_S)


# --- the six books ---------------------------------------------------------------------------


def sigkill_without_finished(platform: Platform, book: Path) -> None:
    engine_process = platform.launch(book, KILLED, *SLOW)
    wait_for("the engine wrote a few lines", lambda: len(journal_lines(book)) >= 5)
    platform.sweep(book)  # what a worker does while the engine runs
    assert platform.run(book)["state"] == "running"
    engine_process.kill()
    status = reap(engine_process)
    assert status == -9
    assert not [line for line in journal_lines(book) if b'"type":"finished"' in line]
    # No engine is live and nobody has said so yet: the run still reads `running`.
    platform.sweep(book)
    assert platform.run(book)["state"] == "running"
    reported = platform.exited(book, KILLED, status)
    assert reported["run_state"] == {"before": "running", "after": "failed"}
    run = platform.run(book)
    assert (run["state"], run["reason"], run["exit_code"]) == ("failed", "signal_9", -9)
    assert (attempt_of(run, KILLED)["state"], attempt_of(run, KILLED)["exit_status"]) == (
        "exited",
        -9,
    )
    # A SIGKILL may land between a step's commit and its line: the journal may lag the ledger.
    # `repair` settles the money from the engine's ledger; the reported exit stays the reading.
    repaired = json.loads(
        platform.remedy(
            "repair", book, by=BY_REPAIR_KILLED, reason="settle the killed run from its ledger"
        )
    )
    assert repaired["engine_run_id"] == KILLED
    run = platform.run(book)
    assert (run["state"], run["reason"]) == ("failed", "signal_9")


def refusal_before_hello(platform: Platform, book: Path) -> None:
    # Someone else holds the book's lock, as a second engine would: ours refuses before its
    # hello with exit 12 (project_locked).
    lock = os.open(book / ".engine.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        status = reap(platform.launch(book, REFUSED, *FAST))
    finally:
        os.close(lock)
    assert status == 12
    assert journal_lines(book) == []
    assert attempt_of(platform.run(book), REFUSED)["state"] == "pending"
    platform.exited(book, REFUSED, status)
    platform.sweep(book)
    run = platform.run(book)
    assert attempt_of(run, REFUSED)["state"] == "exited"
    assert (run["state"], run["refusal"], run["exit_code"]) == ("refused", "project_locked", 12)


def foreign_stream_parks_the_book(platform: Platform, book: Path) -> None:
    engine_process = platform.launch(book, PARKED, *SLOW)
    wait_for("the engine wrote a few lines", lambda: len(journal_lines(book)) >= 5)
    platform.sweep(book)
    engine_process.kill()
    status = reap(engine_process)
    assert status == -9
    # The launcher reports this exit late (below). Reported at once, it would have ended our
    # attempt as `exited`, and a foreign stream parks only an attempt still `active`.
    #
    # An engine nobody on the platform started, with an id nobody named. Its start appends our
    # killed stream's committed but unprojected rows first; then its ceiling (the ledger as it
    # stands) stops it before its first step: it spends nothing, and writes a `ceiling` that
    # must never pause our run.
    ledger = engine_status(book)["money"]["committed_micro_usd"]
    foreign = platform.start_engine(book, FOREIGN, *SLOW, "--ceiling-micro-usd", str(ledger))
    assert reap(foreign) == 4
    assert platform.sweep(book)["parked"] is True
    attempt = attempt_of(platform.run(book), PARKED)
    assert attempt["state"] == "parked"
    assert (attempt["error"]["kind"], attempt["error"]["offset"]) == (
        "foreign_stream_ahead",
        offset_of(book, FOREIGN),
    )
    platform.remedy(
        "disown", book, FOREIGN, by=BY_DISOWN, reason="a stray engine of another tenant"
    )
    assert platform.sweep(book)["parked"] is False
    run = platform.run(book)
    # The foreign hello tells that our process is gone (one engine holds the book at a time):
    # our attempt is superseded by it, and holds no lag behind its lines.
    assert attempt_of(run, PARKED)["state"] == "superseded"
    assert attempt_of(run, FOREIGN)["state"] == "disowned"
    assert (run["state"], run["reason"], run["shortfall_micro_usd"]) == ("running", None, None)
    # A run `running` with no engine live: the launcher's report ends it.
    platform.exited(book, PARKED, status)
    run = platform.run(book)
    assert attempt_of(run, PARKED)["state"] == "superseded"
    assert (run["state"], run["reason"]) == ("failed", "signal_9")


def payload_conflict(platform: Platform, book: Path) -> None:
    status = reap(platform.launch(book, CONFLICT, *FAST))
    assert status == 0
    platform.exited(book, CONFLICT, status)
    platform.sweep(book)
    run = platform.run(book)
    assert (run["state"], attempt_of(run, CONFLICT)["state"]) == ("completed", "finished")
    # One byte of an applied line changes: the first digit of the greatest `spend`, so that the
    # line would show in the money if it were ever applied. A modified copy replaces the file.
    lines = journal_lines(book)
    index = max(i for i, line in enumerate(lines) if b'"type":"spend"' in line)
    seq = json.loads(lines[index])["seq"]
    digits = lines[index].index(b'"committed_micro_usd":') + len(b'"committed_micro_usd":')
    digit = b"8" if lines[index][digits : digits + 1] == b"9" else b"9"
    lines[index] = lines[index][:digits] + digit + lines[index][digits + 1 :]
    assert json.loads(lines[index])["seq"] == seq  # still a valid line
    write(book, *lines)
    platform.sweep(book)
    before = platform.show(book)[book.name]
    attempt = attempt_of(before["runs"][0], CONFLICT)
    assert attempt["state"] == "quarantined"
    assert (attempt["error"]["kind"], attempt["error"]["seq"]) == ("payload_conflict", seq)
    # Without --sha256 nothing changes: the line's sha256 is printed (exit 2), to be given back.
    reason = "the journal was edited by hand; the applied bytes are the engine's"
    looked = json.loads(
        platform.remedy("skip", book, CONFLICT, str(seq), by=BY_SKIP, reason=reason, expect=2)
    )
    assert looked["sha256"] == hashlib.sha256(lines[index]).hexdigest()
    assert platform.show(book)[book.name] == before
    platform.remedy(
        "skip", book, CONFLICT, str(seq), "--sha256", looked["sha256"], by=BY_SKIP, reason=reason
    )
    platform.sweep(book)
    run = platform.run(book)
    attempt = attempt_of(run, CONFLICT)
    # `skip` releases the attempt: back to `active` (docs/platform/cli.md, `release`), though
    # its `finished` was applied before the conflict, so `finished` would read as well.
    assert attempt["state"] in ("active", "finished")
    assert attempt["error"] is None
    assert run["state"] == "completed"


def gap(platform: Platform, book: Path) -> None:
    status = reap(platform.launch(book, GAP, *FAST))
    assert status == 0
    platform.exited(book, GAP, status)
    lines = journal_lines(book)
    hole = len(lines) // 2
    missing = json.loads(lines[hole])["seq"]
    write(book, *lines[:hole], *lines[hole + 1 :])
    platform.sweep(book)
    run = platform.run(book)
    attempt = attempt_of(run, GAP)
    assert attempt["state"] == "stalled"
    assert (attempt["error"]["kind"], attempt["last_seq"]) == ("gap", missing - 1)
    # Nothing after the hole was applied: what the journal told lags the engine's ledger.
    assert run["committed_micro_usd"] < engine_status(book)["money"]["committed_micro_usd"]
    platform.remedy(
        "abandon", book, GAP, by=BY_ABANDON_GAP, reason="a line is lost; no copy to restore"
    )
    assert attempt_of(platform.run(book), GAP)["state"] == "abandoned"
    platform.remedy(
        "repair", book, by=BY_REPAIR_GAP, reason="settle the run of the abandoned stream"
    )


def unread_major(platform: Platform, book: Path) -> None:
    platform.ingest("name", str(book), MAJOR_2)
    # A newer engine's stream, written by hand (the demo emits only the versions it supports).
    (book / "events.jsonl").write_bytes(
        b'{"seq":1,"type":"hello","time":"2026-11-30T02:08:57.213Z","data":{"stream_version":"2.0",'
        b'"engine_run_id":"%s","book_id":"%s","chunker_version":"c1"}}\n'
        % (MAJOR_2.encode(), book.name.encode())
    )
    platform.sweep(book)
    run = platform.run(book)
    attempt = attempt_of(run, MAJOR_2)
    assert (attempt["state"], attempt["error"]["kind"]) == ("refused", "unsupported_version")
    assert (run["state"], run["reason"]) == ("paused", "unsupported_version")
    # `release` reads it again now, and it is refused again: this platform cannot read major 2.
    # (A platform upgraded to read major 2 reads the stream again on its own: no command.)
    platform.remedy("release", book, MAJOR_2, by=BY_RELEASE, reason="read it again")
    platform.sweep(book)
    assert attempt_of(platform.run(book), MAJOR_2)["state"] == "refused"
    platform.remedy(
        "abandon", book, MAJOR_2, by=BY_ABANDON_MAJOR, reason="no platform reads major 2 yet"
    )
    run = platform.run(book)
    assert attempt_of(run, MAJOR_2)["state"] == "abandoned"
    assert (run["state"], run["reason"]) == ("failed", "abandoned")


# --- the scenario ------------------------------------------------------------------------------


def test_six_stopped_runs_each_end_by_the_documented_command(
    fresh_dsn: str, tmp_path: Path
) -> None:
    root = tmp_path / "books"
    books = {name: root / name for name in BOOKS}
    for book in books.values():
        book.mkdir(parents=True)
    (tmp_path / "logs").mkdir()
    platform = Platform(fresh_dsn, tmp_path / "logs")
    try:
        sigkill_without_finished(platform, books["killed-book"])
        refusal_before_hello(platform, books["refused-book"])
        foreign_stream_parks_the_book(platform, books["parked-book"])
        payload_conflict(platform, books["conflict-book"])
        gap(platform, books["gap-book"])
        unread_major(platform, books["major2-book"])

        # No engine is live: every process has ended, and the engine's own lock is free on every
        # book (`status` would exit 12). Two books were never written by an engine.
        assert all(process.poll() is not None for process in platform.processes)
        ledgers: dict[str, int] = {}
        for name, book in books.items():
            if name in ("refused-book", "major2-book"):
                assert engine_status(book, expect=11)["error"] == "no_database"
            else:
                ledgers[name] = engine_status(book)["money"]["committed_micro_usd"]
        state = platform.show()
        assert sorted(state) == sorted(BOOKS)

        runs = {name: only for name, book in state.items() for only in book["runs"]}
        assert len(runs) == len(BOOKS)  # one run per book
        ends = {
            name: (run["state"], run["reason"] or run["refusal"] or run["outcome"])
            for name, run in runs.items()
        }
        assert ends == {
            "killed-book": ("failed", "signal_9"),
            "refused-book": ("refused", "project_locked"),
            "parked-book": ("failed", "signal_9"),
            "conflict-book": ("completed", "completed"),
            "gap-book": ("completed", "completed"),
            "major2-book": ("failed", "abandoned"),
        }
        assert [name for name, (run_state, _) in ends.items() if run_state == "running"] == []

        for name, action, by, reason in platform.audit:
            assert (action, by, reason) in [
                (row["action"], row["by"], row["reason"]) for row in state[name]["actions"]
            ], (name, action, by, reason)

        # The money of every run a real engine wrote is the engine's own ledger. Compared:
        # `settled_micro_usd` where `repair` read it from the engine (killed-book: a SIGKILL can
        # leave committed steps unprojected; gap-book: nothing after the hole was applied), and
        # `committed_micro_usd`, the greatest `spend` applied, elsewhere (parked-book: the
        # foreign engine's start projected our missing rows and it spent nothing itself;
        # conflict-book: the changed `spend` was skipped with no effect). With one run per book,
        # that run's own part, `spent_micro_usd`, is the whole ledger too.
        for name, ledger in ledgers.items():
            run = runs[name]
            money = (
                "settled_micro_usd"
                if name in ("killed-book", "gap-book")
                else "committed_micro_usd"
            )
            assert (run[money], run["spent_micro_usd"]) == (ledger, ledger), (name, run, ledger)
        for name in ("refused-book", "major2-book"):
            assert (runs[name]["committed_micro_usd"], runs[name]["settled_micro_usd"]) == (0, None)
    finally:
        for process in platform.processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
