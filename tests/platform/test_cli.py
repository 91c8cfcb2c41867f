"""`platform-ingest`: the commands of docs/platform/cli.md, their output shapes and their exit codes."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from platform_ingest.cli.main import main
from platform_ingest.store import migrations
from platform_journals import (
    RUN_A,
    RUN_B,
    RUN_C,
    append,
    finished,
    hello,
    spend,
    unit_done,
    write,
)
from terminal import run_on_terminal

pytestmark = pytest.mark.postgres

MakeBook = Callable[[str], Path]
RUN_KEYS = {
    "run_id",
    "state",
    "reason",
    "stop",
    "refusal",
    "outcome",
    "exit_code",
    "committed_micro_usd",
    "spent_micro_usd",
    "shortfall_micro_usd",
    "settled_micro_usd",
    "units",
    "progress",
    "attempts",
}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def show_json(capsys: pytest.CaptureFixture[str], dsn: str, *books: Path) -> dict[str, Any]:
    code, out, _ = cli(capsys, "--dsn", dsn, "show", *map(str, books), "--json")
    assert code == 0
    state: dict[str, Any] = json.loads(out)
    return state


def test_show_json_has_exactly_the_contract_shape(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show --json` has exactly the keys docs/platform/cli.md documents."""
    book = make_book("book-1")
    write(
        book,
        hello(),
        unit_done(2, "u-1", 0),
        spend(3, 1500),
        spend(4, "12"),
    )
    assert cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))[0] == 0
    state = show_json(capsys, fresh_dsn, book)
    (shown,) = state["books"]
    assert set(shown) == {
        "book_id",
        "path",
        "runs",
        "error",
        "problems",
        "actions",
        "lag",
        "waiting_to_be_named",
    }
    assert (shown["book_id"], shown["path"], shown["error"]) == (
        "book-1",
        str(book.resolve()),
        None,
    )
    (run,) = shown["runs"]
    assert set(run) == RUN_KEYS
    assert (run["state"], run["units"], run["committed_micro_usd"]) == ("running", ["u-1"], 1500)
    (attempt,) = run["attempts"]
    assert set(attempt) == {"engine_run_id", "state", "last_seq", "exit_status", "error"}
    assert set(attempt["error"]) == {"kind", "seq", "offset", "detail"}
    assert (attempt["state"], attempt["error"]["kind"], attempt["error"]["seq"]) == (
        "quarantined",
        "malformed",
        4,
    )
    everything = show_json(capsys, fresh_dsn)
    assert everything == state


def test_sweep_exits_zero_on_stream_problems_and_non_zero_when_it_cannot_run(
    fresh_dsn: str, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sweep: a quarantine is state (0), not a book is usage (2), no database is failure (1)."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1.5))
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))
    assert code == 0
    # One of a thing is said in the singular: `1 problem`, never `1 problems`.
    assert ": 1 line applied, 0 duplicates, 1 problem, read " in out, out
    code, _, err = cli(capsys, "--dsn", fresh_dsn, "sweep", str(tmp_path / "missing"))
    assert code == 2
    assert "not a directory" in err
    unreachable = "host=/nonexistent dbname=x connect_timeout=1"
    code, _, err = cli(capsys, "--dsn", unreachable, "sweep", str(book))
    assert code == 1
    assert "Postgres" in err


def test_sweep_json_report(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sweep --json` prints one report per book, with bytes read and where reading started."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 10))
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", "--json", str(book))
    assert code == 0
    report = json.loads(out)
    assert (report["book_id"], report["lines_applied"], report["start_offset"]) == ("book-1", 2, 0)


def test_sweep_json_problems_are_strings(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sweep --json` prints each problem as `"<engine_run_id>: <kind>"` or `"(book): <kind>"`."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1.5))
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", "--json", str(book))
    assert code == 0
    assert json.loads(out)["problems"] == [f"{RUN_A}: malformed"]
    other = make_book("book-2")
    write(other, spend(1, 10))
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", "--json", str(other))
    assert code == 0
    assert json.loads(out)["problems"] == ["(book): malformed"]


def test_name_then_sweep_in_named_mode(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """`name` adds a pending attempt; `--new-run` starts a run; an ended run needs it."""
    book = make_book("book-1")
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "name", str(book), RUN_A)
    assert code == 0
    assert "named for run" in out
    write(book, hello(RUN_A), finished(2))
    assert cli(capsys, "--dsn", fresh_dsn, "sweep", str(book))[0] == 0
    runs = show_json(capsys, fresh_dsn, book)["books"][0]["runs"]
    assert [(run["state"], [a["state"] for a in run["attempts"]]) for run in runs] == [
        ("completed", ["finished"])
    ]
    code, _, err = cli(capsys, "--dsn", fresh_dsn, "name", str(book), RUN_B)
    assert code == 2
    assert "--new-run" in err
    assert cli(capsys, "--dsn", fresh_dsn, "name", str(book), RUN_B, "--new-run")[0] == 0
    runs = show_json(capsys, fresh_dsn, book)["books"][0]["runs"]
    assert [run["attempts"][0]["state"] for run in runs] == ["finished", "pending"]


def test_release_command(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """`release` lifts a quarantine; releasing an attempt that is not quarantined is refused."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 5), spend(2, 6))
    cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "release", str(book), RUN_A)
    assert code == 0
    released = json.loads(out)  # JSON, like every remedy
    assert (released["engine_run_id"], released["state"]) == (RUN_A, "active")
    assert (released["attempt_state"], released["error"]["kind"]) == (
        "quarantined",
        "payload_conflict",
    )
    code, _, err = cli(capsys, "--dsn", fresh_dsn, "release", str(book), RUN_A)
    assert code == 2
    assert "only a quarantined, stalled or refused" in err


def _status_script(tmp_path: Path, payload: dict[str, Any], exit_code: int = 0) -> str:
    script = tmp_path / "status.py"
    script.write_text(f"import json, sys\nprint(json.dumps({payload!r}))\nsys.exit({exit_code})\n")
    return f"{sys.executable} {script}"


def test_repair_records_the_engine_ledger_and_outcome(
    fresh_dsn: str, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`repair` records the engine's ledger and outcome even without a `finished` line."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000), spend(3, "bad"))
    cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))
    status = {
        "book_id": "book-1",
        "engine_run_id": RUN_A,
        "streams": [{"engine_run_id": RUN_A, "last_seq": 4, "projected_seq": 4}],
        "journal": "ok",
        "progress": {},
        "money": {"committed_micro_usd": 1800},
        "ceiling": {"halted": True, "scope": "book", "shortfall_micro_usd": 90},
        "finished": {
            "outcome": "ceiling",
            "exit_code": 4,
            "stop": None,
            "refusal": None,
            "volume": {"units_done": 1, "units_total": 2},
            "money": {"committed_micro_usd": 1800},
        },
    }
    command = _status_script(tmp_path, status)
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "repair", str(book), "--status-command", command)
    assert code == 0
    assert json.loads(out)["settled_micro_usd"] == 1800
    run = show_json(capsys, fresh_dsn, book)["books"][0]["runs"][0]
    assert (run["state"], run["reason"], run["settled_micro_usd"], run["exit_code"]) == (
        "paused",
        "ceiling",
        1800,
        4,
    )
    assert run["attempts"][0]["state"] == "quarantined"  # the projection stays quarantined


def test_repair_is_refused_while_the_engine_is_live(
    fresh_dsn: str, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 12 / project_locked from the status command: repair refuses (exit 3), records nothing."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000))
    cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))
    command = _status_script(tmp_path, {"error": "project_locked"}, exit_code=12)
    code, _, err = cli(capsys, "--dsn", fresh_dsn, "repair", str(book), "--status-command", command)
    assert code == 3
    assert "engine is live" in err
    run = show_json(capsys, fresh_dsn, book)["books"][0]["runs"][0]
    assert run["settled_micro_usd"] is None


def test_repair_refuses_nonsense_from_the_status_command(
    fresh_dsn: str, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A status with money that is not an integer, or a failing command, is refused (exit 1)."""
    book = make_book("book-1")
    write(book, hello())
    cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))
    bad = {"book_id": "book-1", "money": {"committed_micro_usd": "12"}, "finished": None}
    code, _, err = cli(
        capsys,
        "--dsn",
        fresh_dsn,
        "repair",
        str(book),
        "--status-command",
        _status_script(tmp_path, bad),
    )
    assert code == 1
    assert "money" in err
    failing = _status_script(tmp_path, {}, exit_code=1)
    code, _, err = cli(capsys, "--dsn", fresh_dsn, "repair", str(book), "--status-command", failing)
    assert code == 1
    assert "exited 1" in err


def test_migrate_and_schema_checks(
    empty_dsn: str, capsys: pytest.CaptureFixture[str], make_book: MakeBook
) -> None:
    """A command on an unmigrated database asks for `migrate`; a newer schema is refused."""
    book = make_book("book-1")
    code, _, err = cli(capsys, "--dsn", empty_dsn, "sweep", str(book))
    assert code == 1
    assert "platform-ingest migrate" in err
    version = migrations.SCHEMA_VERSION
    assert cli(capsys, "--dsn", empty_dsn, "migrate")[:2] == (0, f"schema version 0 -> {version}\n")
    assert cli(capsys, "--dsn", empty_dsn, "migrate")[:2] == (
        0,
        f"schema version {version}: nothing to do\n",
    )
    with psycopg.connect(empty_dsn, autocommit=True) as sql:
        sql.execute("INSERT INTO ingest_schema_version (version) VALUES (99)")
    for command in (["migrate"], ["show", "--json"]):
        code, _, err = cli(capsys, "--dsn", empty_dsn, *command)
        assert code == 1
        assert "newer than this platform_ingest" in err


def test_embedded_postgres_is_started_and_stopped_by_the_command(
    tmp_path: Path, make_book: MakeBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no DSN, an embedded Postgres is started, migrated and stopped by the command."""
    monkeypatch.delenv("PLATFORM_INGEST_DSN", raising=False)
    book = make_book("book-1")
    write(book, hello(), unit_done(2, "u-1", 0))
    data_dir = tmp_path / "state"
    command = [sys.executable, "-m", "platform_ingest.cli.main", "--data-dir", str(data_dir)]
    environment = {**os.environ, "PYTHONWARNINGS": "ignore"}
    environment.pop("PLATFORM_INGEST_DSN", None)
    swept = subprocess.run(
        [*command, "sweep", "--auto", str(book)],
        check=False,
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert swept.returncode == 0, swept.stderr
    assert not (data_dir / "postgres" / "postmaster.pid").exists()  # stopped on exit
    shown = subprocess.run(
        [*command, "show", "--json"],
        check=False,
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    (book_state,) = json.loads(shown.stdout)["books"]
    assert book_state["runs"][0]["units"] == ["u-1"]


def test_a_symlink_escaping_the_roots_is_refused(
    fresh_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A book directory that resolves outside the roots is refused before reading; a journal
    that is a symbolic link is never followed (a problem shown on its book)."""
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (outside / "book-x").mkdir(parents=True)
    write(outside / "book-x", hello(book="book-x"))
    root.mkdir()
    (root / "book-x").symlink_to(outside / "book-x")
    code, _, err = cli(
        capsys, "--dsn", fresh_dsn, "sweep", "--auto", "--root", str(root), str(root / "book-x")
    )
    assert code == 2
    assert "outside the allowed roots" in err
    inside = root / "book-y"
    inside.mkdir()
    (inside / "events.jsonl").symlink_to(outside / "book-x" / "events.jsonl")
    code, _, err = cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(inside))
    assert code == 1
    assert "symbolic link" in err
    (book,) = show_json(capsys, fresh_dsn)["books"]
    assert book["runs"] == []
    assert [problem["kind"] for problem in book["problems"]] == ["journal_not_regular"]


def _engine_events() -> str:
    """The engine's command, installed next to this interpreter with the project."""
    found = Path(sys.executable).with_name("engine-events")
    return str(found) if found.exists() else shutil.which("engine-events") or "engine-events"


def test_against_the_engine_reference_demo(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """The engine's demo journals are applied: ceiling pauses, resume completes, repair settles."""
    book = make_book("book-demo")
    demo = [_engine_events(), "demo", str(book), "--units", "3", "--stages", "a,b"]
    cost = ["--unit-cost-micro-usd", "100"]
    first = subprocess.run(
        [*demo, *cost, "--ceiling-micro-usd", "250"], check=False, capture_output=True, timeout=120
    )
    assert first.returncode == 4, first.stderr
    assert cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))[0] == 0
    run = show_json(capsys, fresh_dsn, book)["books"][0]["runs"][0]
    assert (run["state"], run["reason"]) == ("paused", "ceiling")
    second = subprocess.run([*demo, *cost], check=False, capture_output=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))[0] == 0
    status_command = f"{_engine_events()} status"
    code, out, err = cli(
        capsys, "--dsn", fresh_dsn, "repair", str(book), "--status-command", status_command
    )
    assert code == 0, err
    (run,) = show_json(capsys, fresh_dsn, book)["books"][0]["runs"]
    assert (run["state"], run["outcome"]) == ("completed", "completed")
    assert [a["state"] for a in run["attempts"]] == ["finished", "finished"]
    assert len(run["units"]) == 3
    assert run["settled_micro_usd"] == json.loads(out)["settled_micro_usd"]
    assert run["settled_micro_usd"] == run["committed_micro_usd"] > 0


def test_repair_refused_while_the_engine_demo_is_live(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """While the engine's demo holds the book's lock, repair through its real status is refused."""
    book = make_book("book-live")
    engine = subprocess.Popen(
        [_engine_events(), "demo", str(book), "--units", "50", "--pace-ms", "100"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not (book / "events.jsonl").exists():
            assert engine.poll() is None, "the demo exited before writing its journal"
            assert time.monotonic() < deadline, "the demo wrote no journal in 30 s"
            time.sleep(0.05)
        status_command = f"{_engine_events()} status"
        code, _, err = cli(
            capsys, "--dsn", fresh_dsn, "repair", str(book), "--status-command", status_command
        )
        assert code == 3, err
    finally:
        engine.terminate()
        engine.wait(timeout=60)


def test_an_unreadable_journal_fails_the_pass_not_the_command(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    """A journal that cannot be read is a typed failure (exit 1); other books are still swept."""
    broken = make_book("book-broken")
    (broken / "events.jsonl").mkdir()
    fine = make_book("book-fine")
    write(fine, hello(book="book-fine"), spend(2, 10))
    code, out, err = cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(broken), str(fine))
    assert code == 1
    assert "the journal is a directory" in err
    assert "book-fine: 2 lines applied" in out


def test_a_one_shot_command_does_not_import_the_worker() -> None:
    """`sweep` and the other one-shot commands start without the worker's modules (change
    notification, metrics): about 40 ms of start-up they have no use for."""
    probe = (
        "import sys, platform_ingest.cli.main; "
        "print(sorted(m for m in ('platform_ingest.worker.loop', 'watchdog', 'prometheus_client')"
        " if m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert found.strip() == "[]"


# --- rebuild, compact and prune: text for a person, --json for scripts ----------------------------


def _two_ended_runs(make_book: MakeBook, capsys: pytest.CaptureFixture[str], dsn: str) -> Path:
    """A book whose first run has ended and is no longer its latest: `prune` may take it."""
    book = make_book("book-1")
    write(book, hello(RUN_A), spend(2, 100), finished(3, money=100))
    append(book, hello(RUN_B), spend(2, 150), finished(3, money=150))
    assert cli(capsys, "--dsn", dsn, "sweep", "--auto", str(book))[0] == 0
    return book


def test_compact_prints_text_and_its_json_with_json(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_ended_runs(make_book, capsys, fresh_dsn)
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "compact", "--quiet-for-s", "0")
    assert code == 0
    assert out == "2 attempts compacted (1, 2), 6 line hash rows deleted\n"
    code, out, _ = cli(capsys, "--dsn", fresh_dsn, "compact", "--quiet-for-s", "0", "--json")
    assert code == 0
    assert json.loads(out) == {
        "compacted": [],
        "finished_deleting": [],
        "skipped": {},
        "rows_deleted": 0,
    }
    assert out.startswith('{\n  "compacted": [],\n')  # indented, as before


def test_prune_prints_text_and_its_json_with_json(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_ended_runs(make_book, capsys, fresh_dsn)
    prune = ["--dsn", fresh_dsn, "prune", "--older-than-s", "0", "--reason", "test"]
    code, out, _ = cli(capsys, *prune, "--dry-run")
    assert code == 0
    assert out == "dry run: 1 run would be pruned (nothing changed)\n  book book-1 run 1\n"
    code, out, _ = cli(capsys, *prune, "--dry-run", "--json")
    assert code == 0
    assert json.loads(out) == {
        "dry_run": True,
        "pruned": [{"book_id": "book-1", "run_id": 1}],
        "skipped": {},
        "cleaned": 0,
    }
    code, out, _ = cli(capsys, *prune)
    assert code == 0
    assert out.splitlines() == [
        "1 run pruned, 0 skipped, 1 pruned attempt cleaned up",
        "  book book-1 run 1: completed, 1 stream",
    ]
    code, out, _ = cli(capsys, *prune, "--json")
    assert (code, json.loads(out)) == (
        0,
        {"dry_run": False, "pruned": [], "skipped": {}, "cleaned": 0},
    )


def test_rebuild_prints_text_and_its_json_with_json(
    fresh_dsn: str, make_book: MakeBook, capsys: pytest.CaptureFixture[str]
) -> None:
    book = _two_ended_runs(make_book, capsys, fresh_dsn)
    rebuild = ["--dsn", fresh_dsn, "rebuild", "--projection", "projection_fixtures:Recording"]
    code, out, _ = cli(capsys, *rebuild, str(book))
    assert code == 0
    assert out == "projection recording version 1: 1 book, 2 streams caught up, 6 events given\n"
    append(book, hello(RUN_C), spend(2, 200))
    assert cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))[0] == 0
    (book / "events.jsonl").unlink()
    code, out, _ = cli(capsys, *rebuild)
    assert code == 4
    assert out.splitlines() == [
        "projection recording version 1: 1 book, 0 streams caught up, 0 events given",
        f"  cannot replay book book-1 stream {RUN_C} seqs 1..2: journal_missing: there is no "
        "journal at the book's path",
    ]
    code, out, _ = cli(capsys, *rebuild, "--json")
    assert code == 4
    report = json.loads(out)
    assert (report["projection"], report["version"], report["events_given"]) == (
        "recording",
        1,
        0,
    )
    assert [each["reason"] for each in report["cannot_replay"]] == ["journal_missing"]


# --- progress on a terminal, nothing of it when stderr is not one ---------------------------------


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["compact", "--quiet-for-s", "0"], b"compact: attempt 1 of 2"),
        (["prune", "--older-than-s", "0", "--dry-run"], b"prune: run 1 of 1"),
        (
            ["rebuild", "--projection", "projection_fixtures:Recording"],
            b"rebuild recording: book 1, ",
        ),
    ],
    ids=["compact", "prune", "rebuild"],
)
def test_long_commands_show_progress_on_a_terminal_only(
    fresh_dsn: str,
    make_book: MakeBook,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    shown: bytes,
) -> None:
    """Progress goes to stderr when stderr is a terminal; into a pipe (a script, a log
    collector) nothing of it is written. The report on stdout is the same either way."""
    _two_ended_runs(make_book, capsys, fresh_dsn)
    fixtures = str(Path(__file__).resolve().parents[1] / "fixtures")
    environment = {**os.environ, "PYTHONPATH": fixtures, "PYTHONWARNINGS": "ignore"}
    command = [str(Path(sys.executable).parent / "platform-ingest"), "--dsn", fresh_dsn, *argv]
    on_terminal = run_on_terminal(command, env=environment)
    assert on_terminal.returncode == 0, on_terminal.terminal
    assert shown in on_terminal.terminal
    assert b"\r" in on_terminal.terminal.replace(b"\r\n", b"")  # the line is rewritten in place
    piped = subprocess.run(command, capture_output=True, env=environment, timeout=120, check=False)
    assert piped.returncode == 0, piped.stderr
    assert shown.split(b":")[0] + b":" not in piped.stderr
    assert b"\r" not in piped.stderr
    assert shown not in on_terminal.stdout
    if "--dry-run" in argv:  # it changes nothing: the second report is the first's
        assert piped.stdout == on_terminal.stdout


# --- repair's status command ----------------------------------------------------------------------


def test_repair_runs_the_status_command_split_as_a_shell_would_with_the_book_and_json(
    fresh_dsn: str, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--status-command` is split with shlex (no shell runs it); BOOK_DIR and `--json` follow
    its own arguments, so a platform-only host names any program that answers as the engine's
    status does."""
    book = make_book("book-1")
    write(book, hello(), spend(2, 1000))
    cli(capsys, "--dsn", fresh_dsn, "sweep", "--auto", str(book))
    seen = tmp_path / "argv.json"
    status = {"book_id": "book-1", "engine_run_id": RUN_A, "money": {"committed_micro_usd": 1000}}
    script = tmp_path / "status script.py"
    script.write_text(
        "import json, sys\n"
        f"open({str(seen)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"print(json.dumps({status!r}))\n"
    )
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --from 'the host'"
    code, out, err = cli(
        capsys, "--dsn", fresh_dsn, "repair", str(book), "--status-command", command
    )
    assert code == 0, err
    assert json.loads(seen.read_text()) == ["--from", "the host", str(book), "--json"]
    assert json.loads(out)["settled_micro_usd"] == 1000


def test_a_status_command_that_is_not_found_is_named_with_the_option_to_give_another(
    fresh_dsn: str, make_book: MakeBook, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A platform-only host has no `engine-events`: the refusal says the command was not found
    and names `--status-command`, before any database is touched."""
    book = make_book("book-1")
    write(book, hello())
    missing = tmp_path / "no-such-status"
    code, out, err = cli(
        capsys, "--dsn", fresh_dsn, "repair", str(book), "--status-command", f"{missing} status"
    )
    assert (code, out) == (1, "")
    assert f"status command not found: {missing}" in err
    assert "--status-command" in err
    assert show_json(capsys, fresh_dsn)["books"] == []  # nothing registered: it stopped first
