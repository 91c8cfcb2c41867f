"""The life the restore and promotion tests give Postgres to lose: real engines writing four books,
two workers tailing them, the operator's commands (`repair`, `compact`, `prune`), then the checks
that the platform, after Postgres went back in time, ends where a clean run ends.

The books:

- `long`: one engine run of many units, going on while the backup is taken and after;
- `two-runs`: a run to its end, then a second engine run on the same book (a new run, the first
  having ended), so that `prune` has a run to delete;
- `killed`: an engine killed with SIGKILL midway, its book repaired (`engine-events status
  --repair` cuts what the kill left, `platform-ingest repair` settles the run);
- `late`: a book whose directory is made after the backup, so that the restored Postgres has
  never heard of it.

Every engine prunes its outbox as soon as it may (`--outbox-retention-s 0`): once a stream is in
the journal and can grow no more, the journal is its only copy, which is what the platform reads
again after a restore.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from platform_journals import log_entries, wait_for, worker_metrics
from postgres_cluster import (
    Cluster,
    command,
    engine,
    engine_status,
    projection_rows,
    show,
    start_worker,
    stop_process,
)

BOOKS = ("long", "two-runs", "killed", "late")
WORKERS = ("w-east", "w-west")
PACE = ("--pace-ms", "200")
RETENTION = ("--outbox-retention-s", "0", "--outbox-prune-interval-s", "0")
LONG_UNITS = 14
SHORT_UNITS = 3


@dataclass
class Life:
    """The books, the workers and the engines of one test."""

    root: Path
    dsn: str
    logs: list[Path]
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    engines: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def book(self, name: str) -> Path:
        return self.root / name

    @property
    def books(self) -> list[Path]:
        return [self.book(name) for name in BOOKS]

    def start(self) -> None:
        """Two workers, then the engines of every book but `late`."""
        for name in BOOKS[:3]:
            self.book(name).mkdir()
        for worker_id, log in zip(WORKERS, self.logs, strict=True):
            self.workers.append(start_worker(self.dsn, self.root, log, worker_id=worker_id))
        units = ("--units", str(LONG_UNITS))
        self.engines["long"] = engine(self.book("long"), *units, *PACE, *RETENTION)
        self.engines["two-runs"] = engine(
            self.book("two-runs"), "--units", str(SHORT_UNITS), "--pace-ms", "50", *RETENTION
        )
        self.engines["killed"] = engine(self.book("killed"), *units, *PACE, *RETENTION)

    def stop(self) -> list[int | None]:
        """Every process still running is stopped; the workers' exit statuses."""
        for process in self.engines.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
        return [stop_process(worker) for worker in self.workers]

    def lines_applied(self) -> int:
        """What the workers have committed so far, by their own metrics."""
        return sum(
            int(worker_metrics(log)["platform_ingest_lines_applied_total"]) for log in self.logs
        )

    def entries(self) -> list[dict[str, Any]]:
        return [entry for log in self.logs for entry in log_entries(log)]


def journal_streams(book: Path) -> dict[str, int]:
    """Each stream of the book's journal and its last seq, from the file's complete lines."""
    path = book / "events.jsonl"
    content = path.read_bytes() if path.exists() else b""
    streams: dict[str, int] = {}
    stream = ""
    for raw in content[: content.rfind(b"\n") + 1].splitlines():
        line = orjson.loads(raw)
        if line["type"] == "hello":
            stream = line["data"]["engine_run_id"]
        streams[stream] = max(streams.get(stream, 0), line["seq"])
    return streams


def lines_in(books: Sequence[Path]) -> int:
    """The distinct lines of the journals (a repeat is a line met again, not a new one)."""
    return sum(
        len(set((book / "events.jsonl").read_bytes().splitlines()))
        for book in books
        if (book / "events.jsonl").exists()
    )


def pruned_streams(book: dict[str, Any]) -> dict[str, int]:
    return {
        stream["engine_run_id"]: stream["last_seq"]
        for action in book["actions"]
        if action["action"] == "prune"
        for stream in action["evidence"]["streams"]
    }


def applied_streams(book: dict[str, Any]) -> dict[str, int]:
    """Each stream's cursor as `show --json` gives it, pruned streams by their audit record."""
    streams = pruned_streams(book)
    for run in book["runs"]:
        for attempt in run["attempts"]:
            streams[attempt["engine_run_id"]] = attempt["last_seq"]
    return streams


def caught_up(dsn: str, books: Sequence[Path]) -> bool:
    """Every stream of every journal applied to its last complete line."""
    try:
        state = show(dsn)
    except Exception:  # noqa: BLE001 - Postgres may be on its way back: not there yet
        return False
    for book in books:
        found = state.get(book.name)
        if found is None or found["lag"]["lines"]:
            return False
        applied = applied_streams(found)
        if any(applied.get(run, 0) < seq for run, seq in journal_streams(book).items()):
            return False
    return True


def wait_caught_up(dsn: str, books: Sequence[Path]) -> None:
    wait_for("every line of every journal applied", lambda: caught_up(dsn, books))


def applied_to(cluster: Cluster, book: str) -> int:
    """How many lines of the book Postgres holds (its line hashes)."""
    return int(
        cluster.scalar(
            "SELECT count(*) FROM line_hashes JOIN attempts USING (attempt_id) WHERE book_id = %s",
            (book,),
        )
    )


def after_the_backup(life: Life) -> None:
    """What happens once the backup is taken, engines still writing: the `killed` engine is
    killed (and its book repaired by the engine's channel), `two-runs` gets its second engine
    run, and the `late` book is made and written."""
    killed = life.engines["killed"]
    at_backup = sum(journal_streams(life.book("killed")).values())
    wait_for(
        "the killed book has lines past the backup",
        lambda: sum(journal_streams(life.book("killed")).values()) >= at_backup + 6,
    )
    assert killed.poll() is None, "the engine to kill ended first"
    killed.kill()
    killed.wait(timeout=30)
    # What a launcher does after a kill: the engine's own repair cuts a torn tail and writes the
    # committed rows not yet in the journal.
    repaired = command("engine-events", "status", str(life.book("killed")), "--json", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert life.engines["two-runs"].wait(timeout=60) == 0
    life.engines["two-runs-again"] = engine(
        life.book("two-runs"), "--units", str(SHORT_UNITS), *RETENTION
    )
    life.book("late").mkdir()
    life.engines["late"] = engine(
        life.book("late"), "--units", str(SHORT_UNITS), "--pace-ms", "50", *RETENTION
    )


@dataclass
class Before:
    """What Postgres held, and what the operators' commands did, before it went back in time."""

    lines: int
    lines_applied: int
    digests: dict[tuple[str, str], tuple[int, str]]
    pruned: list[tuple[Any, ...]]
    projection: list[tuple[Any, ...]]


def finish(cluster: Cluster, life: Life) -> Before:
    """The engines end, every line is applied, then the operator repairs the killed book,
    compacts every quiet attempt and prunes every run that may go."""
    for name, process in life.engines.items():
        if name != "killed":
            assert process.wait(timeout=120) == 0, name
    wait_caught_up(cluster.dsn(), life.books)
    repaired = command(
        "platform-ingest", "--dsn", cluster.dsn(), "repair", str(life.book("killed"))
    )
    assert repaired.returncode == 0, repaired.stderr
    assert orjson.loads(repaired.stdout)["state"] == "failed"
    lines = lines_in(life.books)
    assert cluster.scalar("SELECT count(*) FROM line_hashes") == lines
    projection = projection_rows(cluster)
    digests = compact(cluster)
    assert digests, "nothing was compacted"
    pruned = prune(cluster)
    assert [(book, state) for book, state, _ in pruned] == [("two-runs", "completed")]
    return Before(lines, life.lines_applied(), digests, pruned, projection)


def compact(cluster: Cluster) -> dict[tuple[str, str], tuple[int, str]]:
    """`platform-ingest compact --quiet-for-s 0` until it skips nothing (an attempt whose book a
    pass is reading is skipped, and taken by the next run): every attempt in a quiet state is
    compacted. The digests, by book and stream."""
    for _ in range(10):
        done = command(
            "platform-ingest", "--dsn", cluster.dsn(), "compact", "--quiet-for-s", "0", "--json"
        )
        assert done.returncode == 0, done.stderr
        if not orjson.loads(done.stdout)["skipped"]:
            return digests(cluster)
    raise AssertionError(f"compaction still skips attempts: {done.stdout!r}")


def digests(cluster: Cluster) -> dict[tuple[str, str], tuple[int, str]]:
    with cluster.connect() as connection:
        rows = connection.execute(
            "SELECT book_id, engine_run_id, compacted_seq, encode(compacted_sha256, 'hex')"
            " FROM attempts WHERE compacted_sha256 IS NOT NULL"
        ).fetchall()
    return {(book, stream): (seq, digest) for book, stream, seq, digest in rows}


def prune(cluster: Cluster) -> list[tuple[Any, ...]]:
    """`platform-ingest prune --older-than-s 0` until it skips nothing (a run whose book a pass is
    reading is skipped): what it pruned, by book and streams (not by run id)."""
    pruned: list[tuple[Any, ...]] = []
    for _ in range(10):
        done = command(
            "platform-ingest", "--dsn", cluster.dsn(), "prune", "--older-than-s", "0", "--json"
        )
        assert done.returncode == 0, done.stderr
        report = orjson.loads(done.stdout)
        pruned.extend(
            (run["book_id"], run["state"], tuple(orjson.dumps(s) for s in run["streams"]))
            for run in report["pruned"]
        )
        if not any(why == "a pass is reading the book" for why in report["skipped"].values()):
            return sorted(pruned)
    raise AssertionError(f"prune still skips runs: {done.stdout!r}")


def check_projection_rebuilds_the_same(cluster: Cluster) -> int:
    """The recording projection's rows (fed live by the workers, across whatever happened to
    Postgres) equal what `platform-ingest rebuild` gives from the journals: a version 2 of it
    is reset and caught up from scratch. The number of rows."""
    live = projection_rows(cluster)
    done = command(
        "platform-ingest",
        "--dsn",
        cluster.dsn(),
        "rebuild",
        "--projection",
        "restore_projections:RecordingRebuilt",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert (report["reset_from"], report["cannot_replay"]) == (1, []), report
    rebuilt = projection_rows(cluster)
    assert rebuilt == live
    assert report["events_given"] == len(rebuilt)
    return len(rebuilt)


def check_against_engine(dsn: str, books: Sequence[Path]) -> None:
    """Each book as a clean run leaves it, by the engine's own account (`engine-events status
    --json`): each stream applied to its last seq; the latest run's state, exit code, progress
    and ledger the engine's; every unit the engine made, once; the runs' own parts of the ledger
    (pruned runs' in their audit records) adding up to the engine's ledger."""
    state = show(dsn)
    for book in books:
        status = engine_status(book)
        found = state[book.name]
        assert (found["problems"], found["error"]) == ([], None), found
        assert applied_streams(found) == {
            stream["engine_run_id"]: stream["last_seq"] for stream in status["streams"]
        }, book.name
        attempts = [attempt for run in found["runs"] for attempt in run["attempts"]]
        assert [attempt["error"] for attempt in attempts] == [None] * len(attempts), attempts
        latest, ledger = found["runs"][-1], status["money"]["committed_micro_usd"]
        assert latest["progress"] == status["progress"], book.name
        if status["finished"] is None:  # killed: settled by `repair`
            assert (latest["state"], latest["reason"]) == ("failed", "no_finished"), latest
            assert latest["settled_micro_usd"] == ledger
        else:
            assert latest["exit_code"] == status["finished"]["exit_code"] == 0, latest
            assert latest["state"] == "completed", latest
        assert latest["committed_micro_usd"] == ledger, (book.name, latest)
        units = [unit for run in found["runs"] for unit in run["units"]]
        pruned = [a["evidence"] for a in found["actions"] if a["action"] == "prune"]
        made = status["progress"]["edit"]["done"]  # a unit is made when its last stage is done
        assert len(units) + sum(evidence["units"] for evidence in pruned) == made, book.name
        assert units == [f"unit-{index:04d}" for index in range(made - len(units) + 1, made + 1)]
        spent = sum(run["spent_micro_usd"] for run in found["runs"])
        assert spent + sum(evidence["spent_micro_usd"] for evidence in pruned) == ledger


def settle_again(cluster: Cluster, life: Life) -> None:
    """The repair made after the backup is gone with it: the killed book's run is running again,
    with no settled money, until `repair` is run again."""
    killed = show(cluster.dsn())["killed"]["runs"][-1]
    assert (killed["state"], killed["settled_micro_usd"]) == ("running", None), killed
    repaired = command(
        "platform-ingest", "--dsn", cluster.dsn(), "repair", str(life.book("killed"))
    )
    assert repaired.returncode == 0, repaired.stderr


def no_tracebacks(life: Life) -> None:
    entries = life.entries()
    assert [entry for entry in entries if "exception" in entry] == []
    messages = [entry["message"] for entry in entries]
    assert any(message.startswith("Postgres is away") for message in messages)
    assert any(message.startswith("Postgres is back") for message in messages)


@dataclass
class Kept:
    """What the Postgres that went back in time holds of the life (looked at before any worker
    reaches it)."""

    lines: int
    digests: int
    tombstones: int
    audited: list[str]
    books: list[str]


def look_at(cluster: Cluster) -> Kept:
    with cluster.connect() as connection:

        def one(query: str) -> Any:
            row = connection.execute(query).fetchone()  # type: ignore[arg-type]
            assert row is not None
            return row[0]

        return Kept(
            lines=int(one("SELECT count(*) FROM line_hashes")),
            digests=int(one("SELECT count(*) FROM attempts WHERE compacted_sha256 IS NOT NULL")),
            tombstones=int(one("SELECT count(*) FROM pruned_streams")),
            audited=one("SELECT coalesce(array_agg(DISTINCT action), '{}') FROM operator_actions"),
            books=one("SELECT coalesce(array_agg(book_id ORDER BY book_id), '{}') FROM books"),
        )


def check_kept(kept: Kept, before: Before) -> None:
    """Postgres went back to before the last lines, the compaction, the prune, the repair and the
    `late` book: its digests, tombstones and audit records are gone with them."""
    assert 0 < kept.lines < before.lines
    assert (kept.digests, kept.tombstones, kept.audited) == (0, 0, [])
    assert "late" not in kept.books


def converge(cluster: Cluster, life: Life, before: Before, kept: Kept) -> dict[str, int]:
    """The workers, still running, go on against the Postgres that went back in time; then the
    operator's commands. Every check of a clean run holds; the figures of what was done again."""
    wait_caught_up(cluster.dsn(), life.books)
    lost = before.lines - kept.lines
    # A pass counts its lines once it has returned: the count may follow the commit a little.
    wait_for(
        "the workers count the lines they applied again",
        lambda: life.lines_applied() - before.lines_applied >= lost,
    )
    applied_again = life.lines_applied() - before.lines_applied
    assert applied_again == lost  # each line Postgres lost applied once more, and no other
    assert cluster.scalar("SELECT count(*) FROM line_hashes") == before.lines
    assert cluster.scalar("SELECT count(DISTINCT (attempt_id, seq)) FROM line_hashes") == (
        before.lines
    )
    assert [worker.poll() for worker in life.workers] == [None, None], "a worker died"
    no_tracebacks(life)
    assert any(
        "is not registered in Postgres any more" in entry["message"] for entry in life.entries()
    ), "the late book was not registered again"
    settle_again(cluster, life)
    check_against_engine(cluster.dsn(), life.books)
    # The projection was given each line once, across the restore: the rows it held before,
    # and what a rebuild from the journals gives.
    assert projection_rows(cluster) == before.projection
    assert [stop_process(worker) for worker in life.workers] == [0, 0]
    swept = command(
        "platform-ingest",
        "--dsn",
        cluster.dsn(),
        "sweep",
        "--auto",
        "--json",
        *map(str, life.books),
    )
    assert swept.returncode == 0, swept.stderr
    reports = [orjson.loads(line) for line in swept.stdout.splitlines()]
    assert [(r["lines_applied"], r["problems"]) for r in reports] == [(0, [])] * len(BOOKS)
    rows = check_projection_rebuilds_the_same(cluster)
    # What was read again came from the journals alone: the engines had pruned their outbox
    # rows of every stream that could grow no more (the killed one's stay until its next start).
    for name in ("long", "two-runs", "late"):
        with contextlib.closing(sqlite3.connect(life.book(name) / "engine.sqlite3")) as engine_db:
            (rows_left,) = engine_db.execute("SELECT count(*) FROM engine_events_outbox").fetchone()
        assert rows_left == 0, f"{name}: the journal is not the only copy of its lines"
    # Compaction and prune, run again, find what they found before the restore: nothing of the
    # platform relied on the digests and tombstones Postgres lost.
    assert compact(cluster) == before.digests
    assert prune(cluster) == before.pruned
    check_against_engine(cluster.dsn(), life.books)
    return {
        "lines": before.lines,
        "kept": kept.lines,
        "applied_again": applied_again,
        "projection_rows": rows,
        "digests": len(before.digests),
    }
