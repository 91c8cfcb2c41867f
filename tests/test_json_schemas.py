"""The JSON Schemas published in docs/reference/schemas/ hold for the real output of their commands.

Each schema is a valid draft 2020-12 schema whose enumerations are the code's own; the output of
`engine-events status --json` and `engine-events verify --json` over books the real engine wrote (a
clean run, a ceiling, a resume, a soft stop, a kill, a live engine's lock, broken books and
journals) and of `platform-ingest show --json` over books swept into Postgres in every state an
operator meets validates against them; and each schema rejects a real output with one key removed
or one value of the wrong type.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import psycopg
import pytest
from jsonschema import Draft202012Validator

from engine_events import Emitter, PhaseCount, Progress, Spend, connect
from engine_events._schema import DATABASE_FILE_NAME, SCHEMA_VERSION
from engine_events.readers.verify_rules import Verdict
from platform_ingest import Database, sweep_book
from platform_ingest.cli.main import main
from platform_ingest.decisions.runs import FailReason
from platform_ingest.decisions.states import PauseReason, RunState
from platform_ingest.decisions.views import AttemptState
from platform_ingest.errors import BookProblemKind, ProjectionFailed, StreamProblemKind
from platform_ingest.operate.scrub import Outcome
from platform_ingest.operate.show import show_books
from platform_journals import (
    POISON_UNIT,
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    finished,
    hello,
    refuse_poison_units,
    spend,
    sweep,
    unit_done,
    write,
)
from projection_fixtures import FailingFor, Recording

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "reference" / "schemas"
SCHEMA_NAMES = ("scrub", "show", "status", "verify")
MakeBook = Callable[[str], Path]


def schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return loaded


def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(schema(name), format_checker=Draft202012Validator.FORMAT_CHECKER)


def assert_valid(name: str, output: Any) -> None:
    errors = sorted(validator(name).iter_errors(output), key=lambda error: str(error.path))
    assert not errors, "\n".join(
        f"{name}: {'/'.join(map(str, error.path))}: {error.message}" for error in errors
    )


def assert_invalid(name: str, output: Any) -> None:
    assert not validator(name).is_valid(output), f"{name} accepted {output!r}"


# --- the schemas themselves ----------------------------------------------------------------------


def test_the_published_schemas_are_these_four() -> None:
    assert sorted(path.name for path in SCHEMAS.iterdir()) == sorted(
        f"{name}.schema.json" for name in SCHEMA_NAMES
    )


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_each_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    loaded = schema(name)
    assert loaded["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(loaded)


def _properties(node: Any, where: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every (place, subschema) named under a `properties` anywhere in the schema."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for name, subschema in value.items():
                    yield f"{where}/properties/{name}", subschema
            yield from _properties(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _properties(value, f"{where}/{index}")


def _resolved(root: dict[str, Any], subschema: dict[str, Any]) -> dict[str, Any]:
    if "description" in subschema or "$ref" not in subschema:
        return subschema
    target: Any = root
    for part in subschema["$ref"].removeprefix("#/").split("/"):
        target = target[part]
    return _resolved(root, target)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_every_property_that_declares_a_value_has_a_description(name: str) -> None:
    """A property's schema (or the definition it refers to) says what it means; only the
    narrowings of an `if`/`then` that restate a described property are exempt."""
    root = schema(name)
    undescribed = [
        place
        for place, subschema in _properties(root)
        if "/if/" not in place
        and "/then/" not in place
        and "/else/" not in place
        and "description" not in _resolved(root, subschema)
    ]
    assert not undescribed


def _enum(root: dict[str, Any], *path: str) -> set[Any]:
    node: Any = root
    for part in path:
        node = node[part]
    return set(node["enum"])


def test_the_enumerations_are_the_codes_own() -> None:
    """States, kinds and verdicts are read from the code's Literals: a new one fails here."""
    show = schema("show")
    defs = ("$defs",)
    assert _enum(show, *defs, "attempt_state") == set(get_args(AttemptState))
    assert _enum(show, *defs, "run_state") == set(get_args(RunState))
    assert _enum(show, *defs, "book_problem", "properties", "kind") == {
        *get_args(BookProblemKind),
        "projection_failed",
    }
    assert _enum(show, *defs, "stream_problem", "properties", "kind") == {
        *get_args(StreamProblemKind),
        "database_refused",
    }
    reasons = show["$defs"]["run"]["properties"]["reason"]["oneOf"][0]["enum"]
    assert set(reasons) == {*get_args(PauseReason), *get_args(FailReason)}
    verify = schema("verify")
    assert _enum(verify, *defs, "stream", "properties", "verdict") == set(get_args(Verdict))
    assert _enum(schema("scrub"), "properties", "outcome") == set(get_args(Outcome))


# --- the engine's commands -----------------------------------------------------------------------

ENGINE = [sys.executable, "-m", "engine_events._cli"]


def engine(*argv: str) -> tuple[int, Any]:
    """Run `engine-events ARGV`; its exit code and the JSON it printed."""
    result = subprocess.run([*ENGINE, *argv], capture_output=True, timeout=120, check=False)
    assert result.stdout, result.stderr.decode()
    return result.returncode, json.loads(result.stdout)


def demo(book: Path, *options: str) -> int:
    result = subprocess.run(
        [*ENGINE, "-q", "demo", str(book), "--pace-ms", "0", "--units", "2", *options],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return result.returncode


def journal_lines(book: Path) -> int:
    journal = book / "events.jsonl"
    return journal.read_bytes().count(b"\n") if journal.exists() else 0


def live_demo(book: Path) -> subprocess.Popen[bytes]:
    """A demo still at work (slow steps), once it has written its first lines."""
    process = subprocess.Popen(
        [*ENGINE, "-q", "demo", str(book), "--pace-ms", "200", "--units", "50"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while journal_lines(book) < 4:
        assert process.poll() is None and time.monotonic() < deadline, "the demo did not start"
        time.sleep(0.02)
    return process


def stopped(process: subprocess.Popen[bytes], how: signal.Signals) -> int:
    process.send_signal(how)
    return process.wait(timeout=60)


@pytest.fixture(scope="module")
def engine_books(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Books the real engine wrote and ended on its own: a clean run, a stop at the ceiling, and
    a stop at the ceiling resumed to the end (two streams)."""
    root = tmp_path_factory.mktemp("engine-books")
    books = {name: root / name for name in ("clean", "ceiling", "resumed")}
    assert demo(books["clean"]) == 0
    assert demo(books["ceiling"], "--ceiling-micro-usd", "300000") == 4
    assert demo(books["resumed"], "--ceiling-micro-usd", "300000") == 4
    assert demo(books["resumed"]) == 0
    return books


def test_status_of_every_ending_the_engine_writes(engine_books: dict[str, Path]) -> None:
    outputs = {}
    for name, book in engine_books.items():
        code, outputs[name] = engine("status", str(book), "--json")
        assert code == 0, outputs[name]
        assert_valid("status", outputs[name])
    assert outputs["clean"]["finished"]["outcome"] == "clean"
    assert outputs["ceiling"]["ceiling"]["shortfall_micro_usd"] > 0
    assert outputs["ceiling"]["finished"]["exit_code"] == 4
    assert len(outputs["resumed"]["streams"]) == 2


@pytest.mark.crash
def test_status_and_verify_of_engines_stopped_by_a_signal(tmp_path: Path) -> None:
    """A soft stop (SIGTERM), and a SIGKILL: the stream that has no `finished`, before and after
    `--repair`, and its journal with a torn tail such as a crash leaves."""
    soft, killed = tmp_path / "soft-stop", tmp_path / "killed"
    assert stopped(live_demo(soft), signal.SIGTERM) == 5
    assert stopped(live_demo(killed), signal.SIGKILL) == -signal.SIGKILL
    code, status = engine("status", str(soft), "--json")
    assert (code, status["finished"]["stop"]) == (0, "soft")
    assert_valid("status", status)
    for extra in ((), ("--repair",)):
        code, status = engine("status", str(killed), "--json", *extra)
        assert (code, status["finished"]) == (0, None)
        assert_valid("status", status)
    for book in (soft, killed):
        code, report = engine("verify", str(book / "events.jsonl"), "--json")
        assert (code, report["ok"]) == (0, True), report
        assert_valid("verify", report)
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes((killed / "events.jsonl").read_bytes() + b'{"seq":99,"ty')
    code, report = engine("verify", str(torn), "--json")
    assert (code, report["torn_tail"]["bytes"]) == (0, 13)
    assert_valid("verify", report)


@pytest.mark.crash
def test_status_while_an_engine_holds_the_lock(tmp_path: Path) -> None:
    book = tmp_path / "live"
    process = live_demo(book)
    try:
        code, locked = engine("status", str(book), "--json")
    finally:
        stopped(process, signal.SIGINT)
    assert (code, locked) == (12, {"error": "project_locked"})
    assert_valid("status", locked)


def test_status_of_broken_books(tmp_path: Path) -> None:
    """Every error object the status command prints, each from a book really broken that way."""
    never_written = tmp_path / "never-written"
    never_written.mkdir()
    connect(never_written / DATABASE_FILE_NAME).close()  # a database the emitter never ran on
    no_database = tmp_path / "no-database"
    no_database.mkdir()
    a_file = tmp_path / "a-file"
    a_file.write_text("not a book")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / DATABASE_FILE_NAME).write_bytes(b"this is not a SQLite database" * 100)
    locked_out = tmp_path / "lock-is-a-directory"
    (locked_out / ".engine.lock").mkdir(parents=True)
    newer = tmp_path / "newer"
    assert demo(newer) == 0
    with sqlite3.connect(newer / DATABASE_FILE_NAME) as conn:
        conn.execute(
            "UPDATE engine_events_meta SET value = ? WHERE key = 'schema_version'",
            (str(SCHEMA_VERSION + 1),),
        )
    conn.close()

    expected = {
        never_written: (0, None),
        no_database: (11, "no_database"),
        tmp_path / "missing": (11, "book_directory"),
        a_file: (11, "book_directory"),
        garbage: (1, "unreadable"),
        locked_out: (11, "book_directory"),
        newer: (13, "schema_mismatch"),
    }
    for book, (expected_code, error) in expected.items():
        code, output = engine("status", str(book), "--json")
        assert (code, output.get("error")) == (expected_code, error), output
        assert_valid("status", output)
        if error is not None:
            assert set(output) == {"error", "detail"}


def test_verify_of_the_engines_journals(engine_books: dict[str, Path], tmp_path: Path) -> None:
    for book in engine_books.values():
        code, report = engine("verify", str(book / "events.jsonl"), "--json")
        assert (code, report["ok"]) == (0, True), report
        assert_valid("verify", report)
    # A line written again with other bytes is a conflict.
    changed = tmp_path / "changed.jsonl"
    lines = (engine_books["clean"] / "events.jsonl").read_bytes().splitlines(keepends=True)
    end = lines[2].index(b'Z"')  # the last digit of its time's milliseconds, changed
    other = lines[2][: end - 1] + (b"1" if lines[2][end - 1 : end] != b"1" else b"2")
    changed.write_bytes(b"".join(lines) + other + lines[2][end:])
    code, report = engine("verify", str(changed), "--json")
    assert (code, report["streams"][0]["verdict"]) == (1, "payload_conflict")
    assert_valid("verify", report)


def test_verify_of_a_journal_with_every_problem(tmp_path: Path) -> None:
    book = tmp_path / "book-1"
    book.mkdir()
    write(
        book,
        spend(1, 5),  # before any hello
        hello(RUN_A),
        spend(3, 10),  # a gap
        hello(RUN_B),
        spend(2, 10),
        spend(2, 11),  # a payload conflict
        hello(RUN_C, version="2.0"),  # a major no 1.x reader reads
        hello("run-d"),
        spend(2, "12"),  # malformed: money as a string
    )
    code, report = engine("verify", str(book / "events.jsonl"), "--json")
    assert code == 1
    assert [stream["verdict"] for stream in report["streams"]] == [
        "gap",
        "payload_conflict",
        "unsupported_version",
        "malformed",
    ]
    assert [orphan["verdict"] for orphan in report["orphans"]] == ["malformed"]
    assert_valid("verify", report)


def test_verify_of_a_stream_of_a_newer_minor(tmp_path: Path) -> None:
    """A stream of a minor newer than this reader, with an envelope key after `data`."""
    journal = tmp_path / "events.jsonl"
    extra = json.loads(spend(2, 5))
    extra["trace"] = "t-1"
    journal.write_bytes(
        hello(RUN_A, version="1.9") + json.dumps(extra, separators=(",", ":")).encode() + b"\n"
    )
    code, report = engine("verify", str(journal), "--json")
    assert code in (0, 1)
    assert_valid("verify", report)


def test_verify_of_what_is_not_a_readable_file(tmp_path: Path) -> None:
    fifo = tmp_path / "events.jsonl"
    os.mkfifo(fifo)
    for path, error in (
        (fifo, "not_a_regular_file"),
        (tmp_path, "not_a_regular_file"),
        (tmp_path / "missing.jsonl", "unreadable"),
    ):
        code, failure = engine("verify", str(path), "--json")
        assert (code, failure["ok"], failure["error"]) == (2, False, error)
        assert_valid("verify", failure)


def test_the_engine_schemas_reject_a_key_removed_or_a_value_mistyped(
    engine_books: dict[str, Path],
) -> None:
    _, status = engine("status", str(engine_books["ceiling"]), "--json")
    assert_valid("status", status)
    for broken in (
        _without(status, ["money"]),
        _with(status, ["money", "committed_micro_usd"], "250000"),
        _with(status, ["finished", "exit_code"], 4.5),
        _with(status, ["journal"], "lost"),
        _with(status, ["surprise"], True),
        {"error": "project_locked", "detail": "a detail the code never gives it"},
        {"error": "no_database"},
    ):
        assert_invalid("status", broken)
    _, report = engine("verify", str(engine_books["resumed"] / "events.jsonl"), "--json")
    assert_valid("verify", report)
    for broken in (
        _without(report, ["streams"]),
        _with(report, ["lines"], "11"),
        _with(report, ["streams", 0, "verdict"], "fine"),
        _with(report, ["streams", 0, "problem"], {"line": 1, "offset": 0, "seq": 1, "detail": ""}),
        _with(report, ["ok"], False),  # not ok, and yet no problem anywhere
    ):
        assert_invalid("verify", broken)


def _without(value: Any, path: list[Any]) -> Any:
    """A copy of `value` with the key at `path` removed."""
    copied = copy.deepcopy(value)
    node = copied
    for step in path[:-1]:
        node = node[step]
    del node[path[-1]]
    return copied


def _with(value: Any, path: list[Any], new: Any) -> Any:
    """A copy of `value` with the value at `path` replaced (or a key added)."""
    copied = copy.deepcopy(value)
    node = copied
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return copied


# --- the platform's `show` -----------------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> str:
    """Run `platform-ingest ARGV` in-process; check its exit code, return its stdout."""
    returned = main(list(argv))
    captured = capsys.readouterr()
    assert returned == code, captured.err
    return captured.out


def show_json(capsys: pytest.CaptureFixture[str], dsn: str, *books: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads(
        cli(capsys, "--dsn", dsn, "show", "--json", *map(str, books))
    )
    return state


def _books_in_every_state(
    db: Database,
    dsn: str,
    make_book: MakeBook,
    *,
    sql: psycopg.Connection[tuple[object, ...]],
    capsys: pytest.CaptureFixture[str],
) -> list[Path]:
    """Books swept into Postgres whose state is each one an operator meets, most of them
    reached through the commands an operator or a launcher runs."""
    books: list[Path] = []

    def book(name: str) -> Path:
        path = make_book(name)
        books.append(path)
        return path

    def run(*argv: str, code: int = 0) -> str:
        return cli(capsys, "--dsn", dsn, *argv, code=code)

    # Written by the real engine: completed (then repaired through the real status command),
    # paused at its ceiling, and a stream of 1.4 that stopped without `finished` (repaired:
    # failed, no_finished).
    completed = book("book-completed")
    assert demo(completed) == 0
    paused = book("book-ceiling")
    assert demo(paused, "--ceiling-micro-usd", "300000") == 4
    unfinished = book("book-unfinished")
    conn = connect(unfinished / DATABASE_FILE_NAME)
    try:
        emitter = Emitter.open(conn, unfinished, stream_version="1.4")
        with emitter, emitter.transaction():
            emitter.emit(Progress(phases={"draft": PhaseCount(done=1, total=3)}))
            emitter.emit(Spend(committed_micro_usd=250_000))
    finally:
        conn.close()
    run("sweep", "--auto", str(completed), str(paused), str(unfinished))
    run("repair", str(completed), "--reason", "settle")
    run("repair", str(unfinished))

    # A stream problem of each kind.
    quarantined = book("book-quarantined")
    write(quarantined, hello(book="book-quarantined"), spend(2, 100), spend(3, "12"))
    stalled = book("book-stalled")
    write(stalled, hello(book="book-stalled"), spend(3, 100))
    mismatch = book("book-mismatch")
    write(mismatch, hello(book="another-book"), spend(2, 100))
    unsupported = book("book-unsupported")
    write(unsupported, hello(book="book-unsupported", version="2.0"), spend(2, 100))
    orphan = book("book-orphan")
    write(orphan, spend(1, 5), hello(book="book-orphan"), spend(2, 100))
    superseded = book("book-superseded")
    write(
        superseded,
        hello(RUN_A, book="book-superseded"),
        spend(2, 100),
        hello(RUN_B, book="book-superseded"),
        finished(2, money=100),
    )
    refused = book("book-run-refused")
    write(
        refused,
        hello(book="book-run-refused"),
        finished(2, 12, "project_locked", refusal="project_locked", money=0),
    )
    poisoned = book("book-poisoned")
    refuse_poison_units(sql)
    write(poisoned, hello(book="book-poisoned"), unit_done(2, POISON_UNIT, 0))
    run(
        "sweep",
        "--auto",
        *map(str, (quarantined, stalled, mismatch, unsupported, orphan, superseded)),
        *map(str, (refused, poisoned)),
    )

    # Remedies: release, skip, abandon; the launcher's exited.
    released = book("book-released")
    write(released, hello(book="book-released"), spend(2, 100), spend(3, 150), spend(5, 200))
    sweep(db, released)
    run("release", str(released), RUN_A, "--by", "ops", "--reason", "looked at it")
    stray = book("book-stray")  # a line of no stream after a finished stream, released
    write(stray, hello(book="book-stray"), finished(2, 0, "clean"), b"no stream\n")
    sweep(db, stray)
    run("release", str(stray), "--by", "ops", "--reason", "the line stays")
    skipped = book("book-skipped")
    write(skipped, hello(book="book-skipped"), spend(2, 100), spend(3, "bad"), spend(4, 300))
    sweep(db, skipped)
    shown = json.loads(run("skip", str(skipped), RUN_A, "3", "--reason", "a bad line", code=2))
    run("skip", str(skipped), RUN_A, "3", "--reason", "a bad line", "--sha256", shown["sha256"])
    sweep(db, skipped)
    abandoned = book("book-abandoned")
    write(abandoned, hello(book="book-abandoned"), spend(2, 100), spend(4, 100))
    sweep(db, abandoned)
    run("abandon", str(abandoned), RUN_A, "--reason", "lines are lost")
    exited = book("book-exited")
    run("name", str(exited), RUN_A)
    run("exited", str(exited), RUN_A, "-9")
    pending = book("book-pending")  # named, its engine has written nothing yet
    run("name", str(pending), RUN_A)

    # Named mode: parked behind a foreign stream, a foreign stream disowned, a disown undone.
    for name in ("book-parked", "book-disowned", "book-undisowned"):
        named = book(name)
        run("name", str(named), RUN_A)
        write(named, hello(RUN_A, book=name), spend(2, 100), hello(RUN_B, book=name))
        run("sweep", str(named))
        if name != "book-parked":
            run("disown", str(named), RUN_B, "--reason", "not ours")
        if name == "book-undisowned":
            run("undisown", str(named), RUN_B, "--reason", "ours after all")
        run("sweep", str(named))

    # Book problems: a deleted journal, a FIFO in its place, a second directory of its name.
    missing = book("book-missing")
    write(missing, hello(book="book-missing"), spend(2, 100))
    sweep(db, missing)
    (missing / "events.jsonl").unlink()
    run("sweep", "--auto", str(missing), code=1)
    fifo = book("book-fifo")
    write(fifo, hello(book="book-fifo"), spend(2, 100))
    sweep(db, fifo)
    (fifo / "events.jsonl").unlink()
    os.mkfifo(fifo / "events.jsonl")
    run("sweep", "--auto", str(fifo), code=1)
    conflict = book("book-conflict")
    write(conflict, hello(book="book-conflict"), spend(2, 100))
    sweep(db, conflict)
    second = conflict.parent.parent / "other-root" / "book-conflict"
    second.mkdir(parents=True)
    run("sweep", "--auto", str(second), code=2)

    # A projection's failure: on a stream's later batch, and on a stream's first batch.
    failing = book("book-projection")
    write(failing, hello(book="book-projection"), spend(2, 100))
    sweep_book(db, failing, mode="auto", projections=[Recording()])
    append(failing, spend(3, 200))
    first = book("book-projection-first")
    write(first, hello(book="book-projection-first"), spend(2, 100))
    for target in (failing, first):
        with pytest.raises(ProjectionFailed):
            sweep_book(db, target, mode="auto", projections=[FailingFor([target.name])])

    # A pruned run: an ended run that is not its book's latest, with its record in `actions`.
    pruned = book("book-pruned")
    write(
        pruned,
        hello(RUN_A, book="book-pruned"),
        spend(2, 600),
        unit_done(3, "u-1", 0),
        finished(4, money=600),
        hello(RUN_B, book="book-pruned"),
        spend(2, 1000),
        finished(3, money=1000),
    )
    sweep(db, pruned)
    append(pruned, hello(RUN_C, book="book-pruned"), spend(2, 1200))
    sweep(db, pruned)
    run("prune", "--older-than-s", "0", "--reason", "retention")
    return books


@pytest.mark.postgres
def test_show_of_books_in_every_state(
    db: Database,
    fresh_dsn: str,
    make_book: MakeBook,
    sql: psycopg.Connection[tuple[object, ...]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    books = _books_in_every_state(db, fresh_dsn, make_book, sql=sql, capsys=capsys)
    state = show_json(capsys, fresh_dsn)
    assert_valid("show", state)
    assert [book["book_id"] for book in state["books"]] == sorted(path.name for path in books)

    # The states the schema is meant to see were all there to be seen.
    shown = state["books"]
    runs = [run for book in shown for run in book["runs"]]
    attempts = [attempt for run in runs for attempt in run["attempts"]]
    assert {attempt["state"] for attempt in attempts} == set(get_args(AttemptState))
    assert {run["state"] for run in runs} == set(get_args(RunState))
    assert {run["reason"] for run in runs} >= {
        "ceiling",
        "unsupported_version",
        "abandoned",
        "no_finished",
        "signal_9",
    }
    assert {attempt["error"]["kind"] for attempt in attempts if attempt["error"]} >= {
        "malformed",
        "gap",
        "book_mismatch",
        "unsupported_version",
        "foreign_stream_ahead",
        "database_refused",
        "projection_failed",
    }
    assert {problem["kind"] for book in shown for problem in book["problems"]} >= {
        "journal_missing",
        "journal_not_regular",
        "book_path_conflict",
        "projection_failed",
    }
    assert {book["lag"]["journal"] for book in shown} == {"ok", "missing", "refused"}
    assert {action["action"] for book in shown for action in book["actions"]} == {
        "release",
        "skip",
        "abandon",
        "exited",
        "disown",
        "undisown",
        "repair",
        "prune",
    }
    assert any(book["error"] is not None for book in shown)
    assert any(  # a release of the book's own error: no stream, no attempt state
        action["action"] == "release" and action["engine_run_id"] is None
        for book in shown
        for action in book["actions"]
    )
    assert any(attempt["exit_status"] == -9 for attempt in attempts)

    # `show BOOK_DIR...` and `show --follow`'s lines (one book each) have the same shape.
    named = show_json(capsys, fresh_dsn, *books[:3])
    assert_valid("show", named)
    assert [book["book_id"] for book in named["books"]] == sorted(path.name for path in books[:3])
    assert_valid("show", {"books": show_books(db, [path.name for path in books])})


@pytest.mark.postgres
def test_the_show_schema_rejects_a_key_removed_or_a_value_mistyped(
    db: Database, fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    book = make_book("book-1")
    write(book, hello(), spend(2, 1500), unit_done(3, "u-1", 0), spend(4, "12"))
    sweep(db, book)
    state = show_json(capsys, fresh_dsn)
    assert_valid("show", state)
    first = ["books", 0]
    run = [*first, "runs", 0]
    attempt = [*run, "attempts", 0]
    for broken in (
        _without(state, [*first, "lag"]),
        _without(state, [*attempt, "exit_status"]),
        _with(state, [*run, "committed_micro_usd"], "1500"),
        _with(state, [*run, "committed_micro_usd"], -1),
        _with(state, [*run, "state"], "sleeping"),
        _with(state, [*attempt, "last_seq"], None),
        _with(state, [*attempt, "error", "kind"], "something_else"),
        _with(state, [*first, "lag", "journal"], "gone"),
        _with(state, [*first, "surprise"], 1),
    ):
        assert_invalid("show", broken)


# --- platform-ingest scrub --------------------------------------------------------------------------


def scrub_json(capsys: pytest.CaptureFixture[str], dsn: str, *book_dirs: Path) -> list[Any]:
    capsys.readouterr()
    main(["--dsn", dsn, "scrub", "--json", *map(str, book_dirs)])
    return [json.loads(text) for text in capsys.readouterr().out.splitlines()]


@pytest.mark.postgres
def test_scrub_of_books_clean_changed_and_without_a_journal(
    db: Database, fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every outcome the scrub prints validates: clean, a mismatch with an offset, one without
    (a line cut away), and a book whose journal is gone; and one key removed or mistyped fails."""
    clean, edited, cut, gone = (make_book(f"book-{n}") for n in range(1, 5))
    for book in (clean, edited, cut, gone):
        write(book, hello(RUN_A, book.name), spend(2, 1500), unit_done(3, "u-1", 0), spend(4, 1700))
        sweep(db, book)
    with open(edited / "events.jsonl", "r+b") as journal:
        journal.seek(journal.read().index(b"1500"))
        journal.write(b"9")
    with open(cut / "events.jsonl", "r+b") as journal:
        journal.truncate(len(journal.read()) - 1)
    (gone / "events.jsonl").unlink()
    reports = scrub_json(capsys, fresh_dsn, clean, edited, cut, gone)
    assert [report["outcome"] for report in reports] == ["clean", "mismatch", "mismatch", "unread"]
    assert reports[1]["mismatches"][0]["offset"] is not None
    assert reports[2]["mismatches"][0]["offset"] is None
    for report in reports:
        assert_valid("scrub", report)
    mismatch = ["mismatches", 0]
    for broken in (
        _without(reports[1], ["streams"]),
        _without(reports[1], [*mismatch, "recorded"]),
        _with(reports[1], ["outcome"], "dirty"),
        _with(reports[1], ["bytes_read"], "12"),
        _with(reports[1], [*mismatch, "kind"], "malformed"),
        _with(reports[1], [*mismatch, "seq"], 0),
        _with(reports[1], ["surprise"], 1),
    ):
        assert_invalid("scrub", broken)
