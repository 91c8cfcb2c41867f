"""The files a released version wrote are read, upgraded and continued by this code, nothing lost.

Each directory of `tests/vectors/releases/` holds what one release wrote (its README says how,
`make_release_vectors.py` writes it): a book of its reference engine (`book-1`), a hand-made book
its platform quarantined (`book-2`) and a plain SQL dump of its platform's database
(`platform.sql`, the books' directory written `@BOOKS@`). Every expected figure here is taken from
those files (the journals' lines, the dump's rows), never from what this code prints.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import psycopg
import pytest

from engine_events._schema import SCHEMA_VERSION as ENGINE_SCHEMA_VERSION
from engine_events._schema import schema_version as engine_schema_version
from platform_ingest.cli.main import main as platform_main
from platform_ingest.store import migrations

ROOT = Path(__file__).resolve().parent.parent
RELEASES = Path(__file__).resolve().parent / "vectors" / "releases"
BOOKS_PLACEHOLDER = "@BOOKS@"
VECTOR_BYTES_MAX = 200_000
MORE_UNITS = 2
"""How many units the current engine adds to the released book's run."""

MakeBook = Callable[[str], Path]


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in path.name.split("."))


RELEASE_DIRS = sorted(
    (path for path in RELEASES.iterdir() if path.is_dir() and path.name[:1].isdigit()),
    key=_version_key,
)


@pytest.fixture(params=RELEASE_DIRS, ids=[path.name for path in RELEASE_DIRS])
def release(request: pytest.FixtureRequest) -> Path:
    """One release's directory of files."""
    path: Path = request.param
    return path


# --- the journals, read as plain lines --------------------------------------------------------


@dataclass(frozen=True)
class Stream:
    engine_run_id: str
    lines: list[dict[str, Any]]

    @property
    def last_seq(self) -> int:
        return int(self.lines[-1]["seq"])

    def data(self, kind: str) -> list[Any]:
        return [line["data"] for line in self.lines if line["type"] == kind]

    def last(self, kind: str) -> Any:
        found = self.data(kind)
        return found[-1] if found else None


@dataclass(frozen=True)
class Journal:
    raw: bytes
    streams: list[Stream]

    @classmethod
    def read(cls, path: Path) -> Journal:
        raw = path.read_bytes()
        streams: list[Stream] = []
        for text in raw.splitlines():
            line = json.loads(text)
            if line["type"] == "hello":
                streams.append(Stream(line["data"]["engine_run_id"], []))
            streams[-1].lines.append(line)
        return cls(raw, streams)

    @property
    def line_count(self) -> int:
        return sum(len(stream.lines) for stream in self.streams)

    def newest(self, kind: str) -> Any:
        """The last event of a type across the streams (the ledger carries over)."""
        for stream in reversed(self.streams):
            found = stream.last(kind)
            if found is not None:
                return found
        return None

    def money(self) -> int:
        spend = self.newest("spend")
        return 0 if spend is None else int(spend["committed_micro_usd"])

    def units(self) -> list[str]:
        return [data["unit"] for stream in self.streams for data in stream.data("unit_done")]


@dataclass(frozen=True)
class DemoShape:
    """The released demo's options, as its journal shows them."""

    units: int
    stages: tuple[str, ...]
    step_cost_micro_usd: int

    @classmethod
    def of(cls, journal: Journal) -> DemoShape:
        first_spend = next(
            data for stream in journal.streams for data in stream.data("spend")
        )  # the ledger starts at 0: the first spend is one step's cost
        return cls(
            units=int(journal.newest("finished")["volume"]["units_total"]),
            stages=tuple(journal.newest("progress")["phases"]),
            step_cost_micro_usd=int(first_spend["committed_micro_usd"]),
        )


def quarantine_of(journal: Journal) -> tuple[int, int, list[str]]:
    """book-2's malformed line (an amount that is not an integer): its seq, and the money and
    units of the lines before it."""
    (stream,) = journal.streams
    for index, line in enumerate(stream.lines):
        if line["type"] == "spend" and type(line["data"]["committed_micro_usd"]) is not int:
            before = Journal(b"", [Stream(stream.engine_run_id, stream.lines[:index])])
            return int(line["seq"]), before.money(), before.units()
    raise AssertionError("book-2 has no malformed line")


# --- the engine's commands, as processes --------------------------------------------------------


def engine(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "engine_events._cli", *argv],
        capture_output=True,
        timeout=120,
        check=False,
    )


def engine_json(*argv: str) -> dict[str, Any]:
    done = engine(*argv)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def copy_book(release: Path, name: str, make_book: MakeBook) -> Path:
    book = make_book(name)
    for file in (release / name).iterdir():
        shutil.copyfile(file, book / file.name)
    return book


def continue_book(book: Path, shape: DemoShape) -> None:
    """The current engine runs the released book again with more units: it resumes from the
    released checkpoint and finishes."""
    done = engine(
        "-q",
        "demo",
        str(book),
        "--pace-ms",
        "0",
        "--units",
        str(shape.units + MORE_UNITS),
        "--stages",
        ",".join(shape.stages),
        "--unit-cost-micro-usd",
        str(shape.step_cost_micro_usd),
    )
    assert done.returncode == 0, done.stderr


def database_version(book: Path) -> int:
    conn = sqlite3.connect(book / "engine.sqlite3")
    try:
        return engine_schema_version(conn)
    finally:
        conn.close()


def test_every_release_directory_is_whole_small_and_names_no_machine_path() -> None:
    """Each release's directory has its files, a few KB each, and no absolute path of the machine
    that wrote them (the dump names the books' directory `@BOOKS@`)."""
    assert RELEASE_DIRS, "no release directory"
    with (ROOT / "pyproject.toml").open("rb") as file:
        current = tomllib.load(file)["project"]["version"]
    total = 0
    for release in RELEASE_DIRS:
        files = {
            path.relative_to(release).as_posix(): path.read_bytes()
            for path in release.rglob("*")
            if path.is_file()
        }
        assert set(files) == {
            "README.md",
            "book-1/events.jsonl",
            "book-1/engine.sqlite3",
            "book-2/events.jsonl",
            "platform.sql",
        }
        assert _version_key(release) <= tuple(int(part) for part in current.split("."))
        assert b"make_release_vectors.py" in files["README.md"]
        assert f"{BOOKS_PLACEHOLDER}/book-1".encode() in files["platform.sql"]
        for name, content in files.items():
            for machine_path in (b"/tmp/", b"/home/", b"/root/", b"/var/folders/"):
                assert machine_path not in content, f"{release.name}/{name} names {machine_path!r}"
        total += sum(map(len, files.values()))
    assert total < VECTOR_BYTES_MAX


def test_the_engine_reads_the_released_book_and_continues_it(
    release: Path, make_book: MakeBook
) -> None:
    """`verify` and `status` read the released journal and database as they are; the current demo
    resumes from the released checkpoint (its database upgraded), and its lines continue the file."""
    old = Journal.read(release / "book-1" / "events.jsonl")
    shape = DemoShape.of(old)
    book = copy_book(release, "book-1", make_book)
    journal = book / "events.jsonl"

    verified = engine_json("verify", "--json", str(journal))
    assert verified["ok"] is True
    assert [(s["engine_run_id"], s["verdict"], s["last_seq"]) for s in verified["streams"]] == [
        (stream.engine_run_id, "ok", stream.last_seq) for stream in old.streams
    ]
    assert (verified["lines"], verified["bytes"]) == (old.line_count, len(old.raw))

    status = engine_json("status", str(book), "--json")
    latest = old.streams[-1]
    assert status["book_id"] == "book-1"
    assert status["engine_run_id"] == latest.engine_run_id
    assert status["money"] == {"committed_micro_usd": old.money()}
    assert old.money() == latest.last("finished")["money"]["committed_micro_usd"]
    assert status["progress"] == old.newest("progress")["phases"]
    assert status["finished"] == latest.last("finished")
    assert status["ceiling"] == latest.last("ceiling")
    assert status["streams"] == [
        {
            "engine_run_id": stream.engine_run_id,
            "last_seq": stream.last_seq,
            "projected_seq": stream.last_seq,
        }
        for stream in old.streams
    ]
    released_version = database_version(book)
    assert 0 < released_version <= ENGINE_SCHEMA_VERSION

    continue_book(book, shape)

    assert database_version(book) == ENGINE_SCHEMA_VERSION
    assert journal.read_bytes().startswith(old.raw), "the released lines were rewritten"
    new = Journal.read(journal)
    assert [stream.engine_run_id for stream in new.streams[: len(old.streams)]] == [
        stream.engine_run_id for stream in old.streams
    ]
    (added,) = new.streams[len(old.streams) :]
    assert added.engine_run_id not in {stream.engine_run_id for stream in old.streams}
    assert added.lines[0]["data"]["book_id"] == "book-1"
    new_steps = MORE_UNITS * len(shape.stages)
    money = old.money() + new_steps * shape.step_cost_micro_usd
    assert [data["committed_micro_usd"] for data in added.data("spend")] == [
        old.money() + step * shape.step_cost_micro_usd for step in range(1, new_steps + 1)
    ]
    total_units = shape.units + MORE_UNITS
    assert added.last("finished") == {
        "outcome": "clean",
        "exit_code": 0,
        "stop": None,
        "refusal": None,
        "volume": {"units_done": total_units, "units_total": total_units},
        "money": {"committed_micro_usd": money},
    }
    assert new.units() == [
        *old.units(),
        *(f"unit-{n:04d}" for n in range(shape.units + 1, total_units + 1)),
    ]

    verified = engine_json("verify", "--json", str(journal))
    assert verified["ok"] is True
    assert [s["verdict"] for s in verified["streams"]] == ["ok"] * (len(old.streams) + 1)
    assert verified["lines"] == new.line_count
    status = engine_json("status", str(book), "--json")
    assert status["money"] == {"committed_micro_usd": money}
    assert status["engine_run_id"] == added.engine_run_id
    assert status["progress"] == {
        stage: {"done": total_units, "total": total_units} for stage in shape.stages
    }


# --- the platform ---------------------------------------------------------------------------------


def cli(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> tuple[int, str, str]:
    code = platform_main(["--dsn", dsn, *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def show(capsys: pytest.CaptureFixture[str], dsn: str) -> dict[str, dict[str, Any]]:
    code, out, err = cli(capsys, dsn, "show", "--json")
    assert code == 0, err
    return {book["book_id"]: book for book in json.loads(out)["books"]}


def restore(dsn: str, release: Path, books: Path) -> None:
    """The release's dump into an empty database, its books' directory being `books`."""
    text = (release / "platform.sql").read_text()
    assert "'" not in str(books)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(text.replace(BOOKS_PLACEHOLDER, str(books)))


class Run(NamedTuple):
    book_id: str
    state: str
    committed_micro_usd: int
    units: list[str]
    """in their index order"""


class Attempt(NamedTuple):
    book_id: str
    run_id: int
    state: str
    last_seq: int
    error_kind: str | None
    error_seq: int | None


class Action(NamedTuple):
    book_id: str
    engine_run_id: str | None
    action: str
    by: str
    reason: str


@dataclass(frozen=True)
class Held:
    """A platform database's runs (by run_id), attempts (by engine_run_id) and operator actions
    (oldest first): read from the dump's tables as the release left them, or from `show`."""

    runs: dict[int, Run]
    attempts: dict[str, Attempt]
    actions: list[Action]

    @classmethod
    def read(cls, dsn: str) -> Held:
        """From the tables, with the released schema's columns (before `migrate`)."""
        with psycopg.connect(dsn, autocommit=True) as sql:
            units: dict[int, list[str]] = {}
            for run_id, unit in sql.execute(
                "SELECT run_id, unit FROM run_units ORDER BY run_id, unit_index"
            ):
                units.setdefault(run_id, []).append(unit)
            runs = {
                run_id: Run(book_id, state, committed, units.get(run_id, []))
                for run_id, book_id, state, committed in sql.execute(
                    "SELECT run_id, book_id, state, committed_micro_usd FROM runs ORDER BY run_id"
                )
            }
            attempts = {
                row[0]: Attempt(*row[1:])
                for row in sql.execute(
                    "SELECT engine_run_id, book_id, run_id, state, last_seq, error_kind,"
                    " error_seq FROM attempts ORDER BY attempt_id"
                )
            }
            actions = [
                Action(*row)
                for row in sql.execute(
                    "SELECT book_id, engine_run_id, action, by_whom, reason"
                    " FROM operator_actions ORDER BY action_id"
                )
            ]
        return cls(runs, attempts, actions)

    @classmethod
    def shown(cls, books: dict[str, dict[str, Any]]) -> Held:
        """From `show --json`."""
        held = cls({}, {}, [])
        for book_id, book in books.items():
            for run in book["runs"]:
                held.runs[run["run_id"]] = Run(
                    book_id, run["state"], run["committed_micro_usd"], run["units"]
                )
                for attempt in run["attempts"]:
                    error = attempt["error"] or {}
                    held.attempts[attempt["engine_run_id"]] = Attempt(
                        book_id,
                        run["run_id"],
                        attempt["state"],
                        attempt["last_seq"],
                        error.get("kind"),
                        error.get("seq"),
                    )
            held.actions.extend(
                Action(
                    book_id,
                    action["engine_run_id"],
                    action["action"],
                    action["by"],
                    action["reason"],
                )
                for action in book["actions"]
            )
        return held


def dumped_schema_version(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as sql:
        row = sql.execute("SELECT max(version) FROM ingest_schema_version").fetchone()
    assert row is not None
    return int(row[0])


def check_held_against_journals(held: Held, release: Path) -> None:
    """The dump's rows are the released platform's reading of the two journals."""
    book_1 = Journal.read(release / "book-1" / "events.jsonl")
    for stream in book_1.streams:
        attempt = held.attempts[stream.engine_run_id]
        assert (attempt.book_id, attempt.state, attempt.last_seq, attempt.error_kind) == (
            "book-1",
            "finished",
            stream.last_seq,
            None,
        )
    last_run = held.runs[held.attempts[book_1.streams[-1].engine_run_id].run_id]
    assert (last_run.state, last_run.committed_micro_usd) == ("completed", book_1.money())
    runs_of_book_1 = [run for _, run in sorted(held.runs.items()) if run.book_id == "book-1"]
    assert [unit for run in runs_of_book_1 for unit in run.units] == book_1.units()

    book_2 = Journal.read(release / "book-2" / "events.jsonl")
    (stream,) = book_2.streams
    seq, money, units = quarantine_of(book_2)
    attempt = held.attempts[stream.engine_run_id]
    assert attempt._replace(run_id=0) == Attempt(
        "book-2", 0, "quarantined", seq - 1, "malformed", seq
    )
    assert held.runs[attempt.run_id] == Run("book-2", "running", money, units)
    assert [action[:3] for action in held.actions] == [("book-2", stream.engine_run_id, "release")]


@pytest.mark.postgres
def test_the_platform_reads_the_released_database_and_continues_the_book(
    release: Path, empty_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """The release's dump is migrated to this schema and shows what it held; a sweep of the
    continued book applies its new lines once, the old ones are duplicates, and the quarantine and
    the operator's action stand."""
    old = Journal.read(release / "book-1" / "events.jsonl")
    book_1 = copy_book(release, "book-1", make_book)
    book_2 = copy_book(release, "book-2", make_book)
    restore(empty_dsn, release, book_1.parent.resolve())
    dumped_version = dumped_schema_version(empty_dsn)
    held = Held.read(empty_dsn)
    check_held_against_journals(held, release)

    code, out, err = cli(capsys, empty_dsn, "migrate")
    assert code == 0, err
    if dumped_version < migrations.SCHEMA_VERSION:
        assert out.strip() == f"schema version {dumped_version} -> {migrations.SCHEMA_VERSION}"
    else:
        assert (dumped_version, out.strip()) == (
            migrations.SCHEMA_VERSION,
            f"schema version {migrations.SCHEMA_VERSION}: nothing to do",
        )
    assert dumped_schema_version(empty_dsn) == migrations.SCHEMA_VERSION
    before = show(capsys, empty_dsn)
    assert {book_id: book["path"] for book_id, book in before.items()} == {
        "book-1": str(book_1.resolve()),
        "book-2": str(book_2.resolve()),
    }
    assert Held.shown(before) == held
    for book in before.values():
        assert (book["error"], book["problems"]) == (None, [])

    continue_book(book_1, DemoShape.of(old))
    new = Journal.read(book_1 / "events.jsonl")
    (added,) = new.streams[len(old.streams) :]

    code, out, err = cli(capsys, empty_dsn, "sweep", "--auto", "--json", str(book_1), str(book_2))
    assert code == 0, err
    reports = {report["book_id"]: report for report in map(json.loads, out.splitlines())}
    assert (
        reports["book-1"]["lines_applied"],
        reports["book-1"]["duplicates"],
        reports["book-1"]["problems"],
    ) == (len(added.lines), old.line_count, [])
    assert (reports["book-2"]["lines_applied"], reports["book-2"]["problems"]) == (0, [])

    after = show(capsys, empty_dsn)
    now = Held.shown(after)
    for run_id, run in held.runs.items():
        assert now.runs[run_id] == run, "a released run changed"
    for engine_run_id, attempt in held.attempts.items():
        assert now.attempts[engine_run_id] == attempt, "a released attempt changed"
    assert now.actions == held.actions
    (new_run,) = set(now.runs) - set(held.runs)
    assert now.runs[new_run] == Run(
        "book-1", "completed", new.money(), new.units()[len(old.units()) :]
    )
    assert now.attempts[added.engine_run_id] == Attempt(
        "book-1", new_run, "finished", added.last_seq, None, None
    )
    assert set(now.attempts) == set(held.attempts) | {added.engine_run_id}
    quarantined = {key for key, attempt in now.attempts.items() if attempt.state == "quarantined"}
    assert quarantined == {
        key for key, attempt in held.attempts.items() if attempt.state == "quarantined"
    }
    assert quarantined, "the released quarantine is gone"
    spent = sum(run["spent_micro_usd"] for run in after["book-1"]["runs"])
    assert spent == new.money(), "the book's money, run by run, does not add up to its ledger"
    assert {key: after["book-2"][key] for key in ("runs", "actions", "problems")} == {
        key: before["book-2"][key] for key in ("runs", "actions", "problems")
    }
    for book in after.values():
        assert (book["error"], book["problems"]) == (None, [])
        states = {attempt["state"] for run in book["runs"] for attempt in run["attempts"]}
        lag = book["lag"]
        if "quarantined" in states:  # its lines past the quarantine are lag, held by it
            assert lag["held_by"]["kind"] == "quarantined"
            assert lag["bytes"] > 0 and lag["lines_unread"] == 0
        else:
            assert (lag["bytes"], lag["held_by"]) == (0, None)

    code, out, err = cli(capsys, empty_dsn, "sweep", "--auto", "--json", str(book_1), str(book_2))
    assert code == 0, err
    assert [json.loads(report)["lines_applied"] for report in out.splitlines()] == [0, 0]
    assert Held.shown(show(capsys, empty_dsn)) == now


@pytest.mark.postgres
def test_a_released_book_whose_registered_path_is_gone(
    release: Path,
    empty_dsn: str,
    make_book: MakeBook,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Restored with its books' directory gone, the dump still shows everything it held (each
    journal `missing`), and a copy of a book elsewhere is a second directory of its name: refused,
    recorded as `book_path_conflict`, nothing of it read (no command moves a registered book)."""
    gone = tmp_path / "gone"
    restore(empty_dsn, release, gone)
    held = Held.read(empty_dsn)
    assert cli(capsys, empty_dsn, "migrate")[0] == 0
    before = show(capsys, empty_dsn)
    assert Held.shown(before) == held
    assert {book_id: book["path"] for book_id, book in before.items()} == {
        "book-1": str(gone / "book-1"),
        "book-2": str(gone / "book-2"),
    }
    assert {book["lag"]["journal"] for book in before.values()} == {"missing"}

    book_1 = copy_book(release, "book-1", make_book)
    code, _, err = cli(capsys, empty_dsn, "sweep", "--auto", str(book_1))
    assert code == 2
    assert "already registered" in err
    after = show(capsys, empty_dsn)
    assert [problem["kind"] for problem in after["book-1"]["problems"]] == ["book_path_conflict"]
    assert after["book-1"]["path"] == str(gone / "book-1")
    assert Held.shown(after) == held
