"""One log style on both CLIs: the same line for the same record, the stream's time, `-v`/`-q`
counted from the command's default, JSON for the worker and text elsewhere unless asked."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_runs import BIN, demo_book, engine, platform
from engine_events import _logs as engine_logs
from engine_events._cli import build_parser as engine_parser
from engine_events._line import format_time
from platform_ingest import _logs as platform_logs
from platform_ingest.cli.main import main as platform_main
from platform_ingest.cli.parser import build_parser as platform_parser

TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")


def _record(**fields: object) -> logging.LogRecord:
    record = logging.LogRecord(
        "platform_ingest", logging.WARNING, __file__, 1, "pass over %s: %s", ("b-1", "x y"), None
    )
    record.created = 1_796_004_537.213_9  # 2026-11-30T02:08:57.213Z (milliseconds cut, as docs/reference/stream-format.md says)
    if fields:
        record.fields = fields
    return record


def _with_exception() -> logging.LogRecord:
    record = _record()
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    return record


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_platform_logs_in_the_engine_style(log_format: str) -> None:
    """The platform has no log style of its own: it formats with the engine's module, and what
    its `FieldsLogger` adds (the worker's fields, a call's own) is written as the engine writes
    a record's fields."""
    assert platform_logs.formatter is engine_logs.formatter
    assert platform_logs.utc_time is engine_logs.utc_time
    assert platform_logs.FORMATS is engine_logs.FORMATS
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("platform_ingest.test_logs_fields")
    logger.propagate = False
    logger.addHandler(Keep())
    try:
        adapter = platform_logs.FieldsLogger(logger, {"worker": "w-1", "workers": 2})
        adapter.warning("pass over %s: %s", "b-1", "x y", fields={"note": "two words"})
    finally:
        logger.handlers.clear()
    (logged,) = records
    logged.created, logged.name = _record().created, "platform_ingest"
    expected = _record(worker="w-1", workers=2, note="two words")
    style = engine_logs.formatter(log_format)
    assert style.format(logged) == style.format(expected)


def test_log_time_is_the_stream_time() -> None:
    """UTC, milliseconds (cut, not rounded) and a `Z`: what the stream writes as `time`."""
    record = _record()
    moment = dt.datetime.fromtimestamp(record.created, dt.UTC)
    assert engine_logs.utc_time(record.created) == format_time(moment)
    assert engine_logs.utc_time(record.created) == "2026-11-30T02:08:57.213Z"


def test_the_two_styles_of_one_record() -> None:
    """Text: `TIME LEVEL LOGGER: MESSAGE name=value`, JSON for a value that needs quoting; JSON:
    the keys the worker's readers use, the fields as keys of their own."""
    record = _record(worker="w-1", workers=2, note="two words")
    assert engine_logs.formatter("text").format(record) == (
        "2026-11-30T02:08:57.213Z WARNING platform_ingest: pass over b-1: x y worker=w-1 workers=2 "
        'note="two words"'
    )
    assert json.loads(engine_logs.formatter("json").format(record)) == {
        "time": "2026-11-30T02:08:57.213Z",
        "level": "WARNING",
        "logger": "platform_ingest",
        "message": "pass over b-1: x y",
        "worker": "w-1",
        "workers": 2,
        "note": "two words",
    }
    text = engine_logs.formatter("text").format(_with_exception())
    assert text.splitlines()[0].endswith("pass over b-1: x y")
    assert "ValueError: boom" in text
    entry = json.loads(platform_logs.formatter("json").format(_with_exception()))
    assert "ValueError: boom" in entry["exception"]


@pytest.mark.parametrize(
    ("argv", "command_default", "level"),
    [
        ([], "INFO", "INFO"),
        (["-v"], "INFO", "DEBUG"),
        (["-vv"], "INFO", "DEBUG"),
        (["-q"], "INFO", "WARNING"),
        (["-qqqqq"], "INFO", "CRITICAL"),
        (["--log-level", "error"], "INFO", "ERROR"),
        ([], "WARNING", "WARNING"),
        (["-v"], "WARNING", "INFO"),
        (["-vv"], "WARNING", "DEBUG"),
        (["-q"], "WARNING", "ERROR"),
    ],
)
def test_verbosity_counts_from_the_command_default(
    argv: list[str], command_default: str, level: str
) -> None:
    """`-v`/`-q` move one level from the command's default; `--log-level` names it. The same on
    both CLIs."""
    for parser, logs in ((engine_parser(), engine_logs), (platform_parser(), platform_logs)):
        args = parser.parse_args([*argv, "verify" if logs is engine_logs else "show", "x"])
        assert logging.getLevelName(logs.chosen_level(args, command_default)) == level


@pytest.mark.parametrize(
    "argv", [["-v", "-q"], ["-v", "--log-level", "INFO"], ["-q", "--log-level", "INFO"]]
)
def test_two_verbosity_options_together_are_a_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """`-v`, `-q` and `--log-level` are one choice: two of them exit 2 with one line."""
    code, _, err = engine(capsys, *argv, "verify", "x")
    assert code == 2 and "not allowed with argument" in err
    code, _, err = platform(capsys, *argv, "show")
    assert code == 2 and "not allowed with argument" in err


def test_platform_log_defaults_are_json_for_the_worker_and_text_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run` logs JSON at INFO (a collector reads it), every other command text at WARNING."""
    chosen: list[tuple[int, str]] = []
    monkeypatch.setattr(
        "platform_ingest.cli.main.configure_logs",
        lambda level, style: chosen.append((level, style)),
    )
    monkeypatch.setattr("platform_ingest.cli.main._run", lambda args: 0)
    for argv in (
        ["run", "root"],
        ["-v", "run", "root"],
        ["--log-format", "text", "run", "root"],
        ["show"],
        ["-v", "--log-format", "json", "show"],
        ["--log-level", "debug", "show"],
    ):
        assert platform_main(argv) == 0
    assert chosen == [
        (logging.INFO, "json"),
        (logging.DEBUG, "json"),
        (logging.INFO, "text"),
        (logging.WARNING, "text"),
        (logging.INFO, "json"),
        (logging.DEBUG, "text"),
    ]


def test_engine_logs_in_either_style_carry_the_stream_time(tmp_path: Path) -> None:
    """`engine-events --log-format json` writes one JSON object a line; text lines start with the
    same UTC time."""
    for style in ("json", "text"):
        done = subprocess.run(
            [
                *(str(BIN / "engine-events"), "--log-format", style, "demo", str(tmp_path / style)),
                *("--units", "1", "--pace-ms", "0"),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        lines = done.stderr.splitlines()
        assert lines
        for line in lines:
            if style == "json":
                entry = json.loads(line)
                assert list(entry)[:4] == ["time", "level", "logger", "message"]
                assert TIME.fullmatch(entry["time"])
            else:
                time_, level, logger_, _ = line.split(" ", 3)
                assert TIME.fullmatch(time_) and level in engine_logs.LEVELS
                assert logger_.startswith("engine_events")


@pytest.mark.postgres
def test_a_one_shot_command_logs_text_and_json_on_request(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sweep -v` logs text lines at INFO (with the stream's time); `--log-format json` makes
    them JSON lines with the worker's keys. No book id in either."""
    text_book = demo_book(tmp_path / "book-secret-title")
    json_book = demo_book(tmp_path / "book-secret-title-2")
    code, _, err = platform(capsys, "--dsn", dsn, "-v", "sweep", "--auto", str(text_book))
    assert code == 0
    lines = [line for line in err.splitlines() if TIME.match(line)]
    assert any(" INFO platform_ingest: pass over b-" in line for line in lines), err
    code, _, json_err = platform(
        capsys, "--dsn", dsn, "-v", "--log-format", "json", "sweep", "--auto", str(json_book)
    )
    assert code == 0
    entries = [json.loads(line) for line in json_err.splitlines()]
    assert entries and all(TIME.fullmatch(entry["time"]) for entry in entries)
    assert any(entry["message"].startswith("pass over b-") for entry in entries)
    assert "secret-title" not in err + json_err
