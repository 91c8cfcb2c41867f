"""`engine-events` behaves as `platform-ingest` does: its global options also after the command,
text by default where `--json` is the machine form (`status`), progress on a terminal only
(`verify`), and a completion script made from its parser (docs/reference/engine-events-cli.md)."""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from engine_events import Ceiling, ExitCode, Finished, PhaseCount, Progress, Spend
from engine_events._cli import build_parser, main
from engine_events._emitter import Emitter
from engine_events._logs import chosen_level
from shell_completion import bash_offers
from terminal import run_on_terminal

BIN = Path(sys.executable).parent


def engine(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _stopped_at_the_ceiling(conn: sqlite3.Connection, book_dir: Path) -> None:
    with Emitter.open(conn, book_dir, engine_run_id="r1", book_id="b-42") as emitter:
        with emitter.transaction():
            emitter.emit(Progress(phases={"draft": PhaseCount(done=2, total=5)}))
            emitter.emit(Spend(committed_micro_usd=700))
        with emitter.transaction():
            emitter.emit(Ceiling(shortfall_micro_usd=30))
            emitter.emit(
                Finished(
                    exit_code=ExitCode.CEILING,
                    units_done=2,
                    units_total=5,
                    committed_micro_usd=700,
                )
            )


# --- status: text without --json ------------------------------------------------------------------


def test_status_prints_a_summary_without_json_and_the_same_json_with_it(
    conn: sqlite3.Connection, book_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status BOOK_DIR` was refused (`--json` required); it now prints a short summary of the
    fields `--json` gives, whose output is unchanged."""
    _stopped_at_the_ceiling(conn, book_dir)
    code, out, err = engine(capsys, "status", str(book_dir))
    assert (code, err) == (0, "")
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)
    assert out.splitlines() == [
        "book b-42: latest stream r1 finished ceiling (exit 4), 2 of 5 units",
        "  money: $0.0007 committed",
        "  ceiling: halted (book), shortfall $0.00003",
        "  progress: draft 2/5",
        "  journal: ok",
        "  stream r1: last seq 5, projected seq 5",
    ]
    code, out, _ = engine(capsys, "status", str(book_dir), "--json")
    assert code == 0
    assert json.loads(out)["money"] == {"committed_micro_usd": 700}
    assert out == (
        '{"book_id":"b-42","engine_run_id":"r1","streams":[{"engine_run_id":"r1","last_seq":5,'
        '"projected_seq":5}],"journal":"ok","progress":{"draft":{"done":2,"total":5}},'
        '"money":{"committed_micro_usd":700},"ceiling":{"halted":true,"scope":"book",'
        '"shortfall_micro_usd":30},"finished":{"outcome":"ceiling","exit_code":4,"stop":null,'
        '"refusal":null,"volume":{"units_done":2,"units_total":5},'
        '"money":{"committed_micro_usd":700}}}\n'
    )


def test_status_text_of_an_error_is_one_line_on_stderr_with_the_same_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-book"
    code, out, err = engine(capsys, "status", str(missing))
    assert (code, out) == (11, "")
    assert err.startswith("engine-events status: book_directory: ")
    assert str(missing) in err and err.count("\n") == 1
    code, out, _ = engine(capsys, "status", str(missing), "--json")
    assert code == 11
    assert json.loads(out)["error"] == "book_directory"


# --- global options after the command -------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "level", "log_format"),
    [
        (["-v", "verify", "j"], logging.DEBUG, None),
        (["verify", "j", "-v"], logging.DEBUG, None),
        (["verify", "j", "--log-level", "error"], logging.ERROR, None),
        (["--log-format", "json", "verify", "j"], logging.INFO, "json"),
        (["verify", "j", "--log-format", "json"], logging.INFO, "json"),
        # Given on both sides, the one after the command wins.
        (["--log-format", "json", "verify", "j", "--log-format", "text"], logging.INFO, "text"),
        (["--log-level", "debug", "verify", "j", "--log-level", "error"], logging.ERROR, None),
        # -v, -q and --log-level are one choice: the one after replaces the one before.
        (["-v", "verify", "j", "-q"], logging.WARNING, None),
        (["--log-level", "debug", "verify", "j", "-q"], logging.WARNING, None),
        (["-qq", "verify", "j", "--log-level", "info"], logging.INFO, None),
    ],
)
def test_global_options_are_taken_before_and_after_the_command(
    argv: list[str], level: int, log_format: str | None
) -> None:
    args = build_parser().parse_args(argv)
    assert (chosen_level(args, "INFO"), args.log_format) == (level, log_format)


def test_two_levels_after_the_command_are_still_one_choice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = engine(capsys, "verify", "j", "-v", "--log-level", "info")
    assert code == 2 and "not allowed with argument" in err


def test_the_version_is_said_after_a_command_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = engine(capsys, "status", "--version")
    assert code == 0 and out.startswith("engine-events ")


# --- verify: progress on a terminal, nothing of it in a pipe --------------------------------------


def _demo_journal(book: Path) -> Path:
    subprocess.run(
        [
            *(str(BIN / "engine-events"), "--log-level", "warning", "demo", str(book)),
            *("--units", "3", "--pace-ms", "0"),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return book / "events.jsonl"


def test_verify_shows_progress_on_a_terminal_and_none_in_a_pipe(tmp_path: Path) -> None:
    journal = _demo_journal(tmp_path / "book-1")
    argv = [str(BIN / "engine-events"), "verify", str(journal)]
    piped = subprocess.run(argv, capture_output=True, timeout=120, check=False)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr == b""
    on_terminal = run_on_terminal(argv)
    assert on_terminal.returncode == 0, on_terminal.terminal
    assert b"verify events.jsonl" in on_terminal.terminal
    assert on_terminal.stdout == piped.stdout  # the report itself is the same


# --- completion -----------------------------------------------------------------------------------


def _subcommands() -> list[str]:
    (commands,) = [
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    return list(commands.choices)


def _complete(script: str, *words: str) -> list[str]:
    return bash_offers(script, "_shtab_engine_events", *words)


def test_the_bash_completion_offers_every_command_and_its_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, script, _ = engine(capsys, "completion", "bash")
    assert code == 0
    assert "complete " in script
    assert sorted(_complete(script, "engine-events", "")) == sorted(_subcommands())
    assert "completion" in _subcommands()
    assert _complete(script, "engine-events", "ver") == ["verify"]
    verify_options = _complete(script, "engine-events", "verify", "--")
    assert {"--json", "--log-level", "--log-format", "--verbose", "--help"} <= set(verify_options)
    assert _complete(script, "engine-events", "demo", "x", "--on-journal-error", "") == [
        "degrade",
        "fail",
    ]
    assert _complete(script, "engine-events", "--log-format", "") == ["text", "json"]


def test_status_text_of_a_book_whose_engine_never_started_a_stream(
    conn: sqlite3.Connection, book_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = engine(capsys, "status", str(book_dir))
    assert (code, out) == (0, "no stream: the emitter never ran on this book\n")
    code, out, _ = engine(capsys, "status", str(book_dir), "--json")
    assert (code, json.loads(out)["engine_run_id"]) == (0, None)


def test_status_text_shows_what_came_from_the_database_as_plain_text(
    conn: sqlite3.Connection, book_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A phase name (or an id) holding an escape sequence is shown with it written out as an
    escape (`\\x1b`), never sent to the terminal."""
    with (
        Emitter.open(conn, book_dir, engine_run_id="r1", book_id="b-1") as emitter,
        emitter.transaction(),
    ):
        emitter.emit(Progress(phases={"\x1b[2Jdraft": PhaseCount(done=1, total=2)}))
    code, out, _ = engine(capsys, "status", str(book_dir))
    assert code == 0
    assert "\x1b" not in out
    assert "  progress: \\x1b[2Jdraft 1/2" in out.splitlines()
    assert "stopped without finished" in out.splitlines()[0]
