"""The traps a new operator fell into, each pinned by a test through the CLIs and docs."""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import logging
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo

from engine_events import _logs as engine_logs
from engine_events._cli import build_parser as engine_parser
from engine_events._cli import main as engine_main
from engine_events._line import format_time
from platform_ingest import Database, migrate
from platform_ingest import _logs as platform_logs
from platform_ingest.cli.main import main as platform_main
from platform_ingest.cli.parser import build_parser as platform_parser
from platform_ingest.decisions.runs import progress_from_jsonb

DOCS = Path(__file__).resolve().parent.parent / "docs"
BIN = Path(sys.executable).parent
_databases = itertools.count(1)


@pytest.fixture
def dsn(pg_admin_dsn: str) -> Iterator[str]:
    """A migrated database of this test's own."""
    name = f"ingest_traps_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    params = conninfo.conninfo_to_dict(pg_admin_dsn)
    params["dbname"] = name
    url = conninfo.make_conninfo(**{key: str(value) for key, value in params.items()})
    db = Database(url)
    migrate(db)
    db.close()
    yield url
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def platform(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = platform_main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _unit_exec_start() -> str:
    text = (DOCS / "platform" / "workers.md").read_text()
    (line,) = re.findall(r"^ExecStart=.*platform-ingest run .*$", text, flags=re.MULTILINE)
    return line


@pytest.mark.parametrize("instance", range(1, 10))
def test_worker_unit_metrics_port_is_a_real_unprivileged_port(instance: int) -> None:
    """`--metrics-port 91%i` made instance 1 ask for port 911 (privileged, and another
    scheme's): every documented instance gets a distinct port in 1024..65535."""
    (port_template,) = re.findall(r"--metrics-port (\S+)", _unit_exec_start())
    port = int(port_template.replace("%i", str(instance)))
    assert 1024 <= port <= 65535
    assert port == int(port_template.replace("%i", "1")) + instance - 1


# --- messages: one clear line each (trap 6) ------------------------------------------------------


def engine(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = engine_main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def demo_book(book: Path, *extra: str) -> Path:
    """A real journal: the reference engine's demo over `book`, in a process of its own."""
    subprocess.run(
        [
            *(str(BIN / "engine-events"), "--log-level", "warning", "demo", str(book)),
            *("--units", "2", "--pace-ms", "0", *extra),
        ],
        check=True,
        capture_output=True,
    )
    return book


def test_status_of_a_file_says_it_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An existing file given as the book is "not a directory", not "[Errno 2] ... does not
    exist"."""
    path = tmp_path / "a-file"
    path.write_text("")
    code, out, _ = engine(capsys, "status", str(path), "--json")
    assert code == 11
    assert json.loads(out) == {"error": "book_directory", "detail": f"not a directory: {path}"}


def test_an_unknown_log_level_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`--log-level foo` is refused by argparse (exit 2, the levels listed), not a traceback;
    the level is read in any case."""
    code, _, err = engine(capsys, "--log-level", "foo", "verify", "x")
    assert code == 2
    assert "invalid choice: 'FOO'" in err and "DEBUG" in err
    assert engine_parser().parse_args(["--log-level", "debug", "verify", "x"]).log_level == "DEBUG"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--units", "0"], "argument --units: not a positive integer: '0'"),
        (["--units", "x"], "argument --units: not a positive integer: 'x'"),
        (["--pace-ms", "-1"], "argument --pace-ms: not a non-negative integer: '-1'"),
    ],
)
def test_counts_are_checked_with_a_readable_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """`--units 0` is refused, and no function name (`_positive_int`) shows in the error."""
    code, _, err = engine(capsys, "demo", str(tmp_path / "book"), *argv)
    assert code == 2
    assert message in err
    assert "_int" not in err
    assert not (tmp_path / "book").exists()


def test_verify_counts_one_line_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.ndjson"
    journal.write_bytes(b"\n")  # one line, judged malformed: the count is what matters here
    code, out, _ = engine(capsys, "verify", str(journal))
    assert code != 0
    assert " 1 line," in out and "1 lines" not in out


@pytest.mark.postgres
def test_sweep_of_a_missing_book_names_its_path_once(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = platform(capsys, "--dsn", dsn, "sweep", "nope")
    assert code == 2
    assert err.count("nope") == 1, err


# --- sweep --json over several books: NDJSON (trap 4) -------------------------------------------


@pytest.mark.postgres
def test_sweep_json_over_several_books_is_one_object_a_line(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Concatenated indented objects parse as nothing; NDJSON parses line by line."""
    books = [demo_book(tmp_path / name) for name in ("book-1", "book-2", "book-3")]
    code, out, _ = platform(capsys, "--dsn", dsn, "sweep", "--auto", "--json", *map(str, books))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3
    reports = [json.loads(line) for line in lines]
    assert [report["book_id"] for report in reports] == ["book-1", "book-2", "book-3"]
    assert all(report["lines_applied"] > 0 for report in reports)


# --- repair finds the engine-events installed beside it (trap 5) --------------------------------


def _bare_environment(**extra: str) -> dict[str, str]:
    """The environment of a process that finds neither command on `PATH`, nor a DSN or PG*."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PG") and key != "PLATFORM_INGEST_DSN"
    }
    environment.update(PATH="/usr/bin:/bin", PYTHONWARNINGS="ignore", **extra)
    return environment


@pytest.mark.postgres
def test_repair_uses_the_engine_events_beside_it_without_path(dsn: str, tmp_path: Path) -> None:
    """A stopped demo book is repaired with the default status command although no
    `engine-events` is on `PATH`: the one beside the interpreter is used."""
    book = demo_book(tmp_path / "book-1")
    environment = _bare_environment(PLATFORM_INGEST_DSN=dsn)
    ingest = str(BIN / "platform-ingest")
    swept = subprocess.run(
        [ingest, "sweep", "--auto", str(book)], env=environment, capture_output=True, check=False
    )
    assert swept.returncode == 0, swept.stderr
    repaired = subprocess.run(
        [ingest, "repair", str(book), "--reason", "test"],
        env=environment,
        capture_output=True,
        check=False,
        text=True,
    )
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["reading"] == "ledger"


# --- the metrics listen on loopback unless told otherwise (trap 9) -------------------------------


def _listening_address(port: int) -> str:
    """The local address (hex, as /proc/net/tcp writes it) of the socket listening on `port`."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # 0A: LISTEN
            return address
    raise AssertionError(f"nothing listens on port {port}")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("extra", "address"), [((), "0100007F"), (("--metrics-address", "0.0.0.0"), "00000000")]
)
def test_worker_metrics_listen_on_loopback_by_default(
    dsn: str, tmp_path: Path, extra: tuple[str, ...], address: str
) -> None:
    """`run --metrics-port` served on 0.0.0.0; it now serves on 127.0.0.1 unless
    `--metrics-address` opens it."""
    (tmp_path / "books").mkdir()
    worker = subprocess.Popen(
        [
            *(str(BIN / "platform-ingest"), "run", str(tmp_path / "books")),
            *("--metrics-port", "0", *extra),
        ],
        env=_bare_environment(PLATFORM_INGEST_DSN=dsn),
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert worker.stderr is not None
    stderr = worker.stderr
    reader = threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            found = re.search(r"metrics on port (\d+)", lines.get(timeout=60))
            port = int(found.group(1)) if found else None
        assert port is not None
        assert _listening_address(port) == address
    finally:
        worker.terminate()
        code = worker.wait(timeout=60)
        reader.join(timeout=60)
        stderr.close()
    assert code == 0


# --- show: the state said once, the phases in stream order (trap 8) ------------------------------


@pytest.mark.postgres
def test_show_says_the_state_once_and_keeps_the_stream_order_of_phases(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """jsonb orders an object's keys by length: `zeta,a,mid` came back as `a,mid,zeta`."""
    book = demo_book(tmp_path / "book-1", "--stages", "zeta,a,mid")
    assert platform(capsys, "--dsn", dsn, "sweep", "--auto", str(book))[0] == 0
    code, out, _ = platform(capsys, "--dsn", dsn, "show", str(book), "--json")
    assert code == 0
    (run,) = json.loads(out)["books"][0]["runs"]
    assert run["state"] == "completed"
    assert list(run["progress"]) == ["zeta", "a", "mid"]
    assert run["progress"]["zeta"] == {"done": 2, "total": 2}
    code, out, _ = platform(capsys, "--dsn", dsn, "show", str(book))
    assert code == 0
    (run_line,) = [line for line in out.splitlines() if line.startswith("  run ")]
    assert run_line.count("completed") == 1, run_line


def test_progress_written_as_an_object_by_an_older_version_still_reads() -> None:
    assert progress_from_jsonb({"b": {"done": 0, "total": 1}}) == {"b": {"done": 0, "total": 1}}
    assert progress_from_jsonb(None) == {}
    pairs = [["zeta", {"done": 1, "total": 2}], ["a", {"done": 0, "total": 2}]]
    assert list(progress_from_jsonb(pairs)) == ["zeta", "a"]


# --- which database: libpq's PG* variables, and the embedded one said aloud (traps 2, 3) ---------


def _libpq_variables_for(url: str) -> dict[str, str]:
    params = conninfo.conninfo_to_dict(url)
    names = {"host": "PGHOST", "port": "PGPORT", "dbname": "PGDATABASE", "user": "PGUSER"}
    names["password"] = "PGPASSWORD"
    return {names[key]: str(value) for key, value in params.items() if key in names and value}


@pytest.mark.postgres
def test_libpq_variables_name_the_database_when_no_dsn_is_given(dsn: str, tmp_path: Path) -> None:
    """With PGHOST, PGDATABASE, ... set and no DSN, the command uses that server: it does not
    create and start an embedded one in the current directory."""
    migrated = subprocess.run(
        [str(BIN / "platform-ingest"), "migrate"],
        env=_bare_environment(**_libpq_variables_for(dsn)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.endswith("nothing to do\n")  # the fixture's database, migrated before
    assert not (tmp_path / ".platform-ingest").exists()
    assert "embedded" not in migrated.stderr


@pytest.mark.postgres
def test_the_embedded_server_says_its_directory_and_when_it_was_created(tmp_path: Path) -> None:
    """Run from another directory, a command used to create and start a new cluster silently."""

    def migrate_here() -> str:
        completed = subprocess.run(
            [str(BIN / "platform-ingest"), "migrate"],
            env=_bare_environment(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert completed.returncode == 0, completed.stderr
        return completed.stderr

    data_dir = tmp_path / ".platform-ingest"
    first = migrate_here()
    assert f"creating a new embedded Postgres in {data_dir}" in first
    second = migrate_here()
    assert f"using the embedded Postgres in {data_dir}" in second
    assert "creating" not in second


@pytest.mark.parametrize(
    "argv",
    [
        ["show"],
        ["show", "--json", "book-1"],
        ["show", "--follow"],
        ["prune", "--older-than-s", "0", "--dry-run"],
    ],
    ids=["show", "show-json", "follow", "prune-dry-run"],
)
def test_a_command_that_only_reads_creates_no_embedded_postgres(
    tmp_path: Path, argv: list[str]
) -> None:
    """`show` run from another directory created an empty cluster there and showed no books, as
    if the platform had lost them. A command that only reads exits 2 and says where it looked
    and what it wants: a DSN, or the directory of the first run."""
    data_dir = tmp_path / "state"
    done = subprocess.run(
        [str(BIN / "platform-ingest"), "--data-dir", str(data_dir), *argv],
        env=_bare_environment(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert not data_dir.exists()
    assert not (tmp_path / ".platform-ingest").exists()
    assert done.stdout == ""
    (said,) = done.stderr.splitlines()
    assert f"no embedded Postgres in {data_dir}" in said
    assert "--dsn" in said and "PLATFORM_INGEST_DSN" in said and "--data-dir" in said


@pytest.mark.postgres
def test_sweep_creates_the_embedded_postgres_and_then_show_reads_it(tmp_path: Path) -> None:
    """The commands that write (`migrate`, `sweep`, `run`) still create the cluster, and say
    where; a `show` given that directory reads it."""
    book = tmp_path / "book-1"
    book.mkdir()
    command = [str(BIN / "platform-ingest"), "--data-dir", str(tmp_path / "state")]

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *argv],
            env=_bare_environment(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )

    swept = run("sweep", "--auto", str(book))
    assert swept.returncode == 0, swept.stderr
    assert f"creating a new embedded Postgres in {tmp_path / 'state'}" in swept.stderr
    shown = run("show", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [each["book_id"] for each in json.loads(shown.stdout)["books"]] == ["book-1"]
    assert f"using the embedded Postgres in {tmp_path / 'state'}" in shown.stderr


def test_the_worker_docs_keep_the_dsn_off_the_command_line() -> None:
    """`ps` shows a command line to every user: the unit and the how-to pass the DSN through a
    mode-0600 environment file, never `--dsn` nor a unit's `Environment=`."""
    unit = _unit_exec_start()
    workers = (DOCS / "platform" / "workers.md").read_text()
    how_to = (DOCS / "how-to" / "run-several-workers.md").read_text()
    assert "--dsn" not in unit
    assert "Environment=PLATFORM_INGEST_DSN" not in workers
    assert "EnvironmentFile=" in workers and "0600" in workers
    assert "--dsn" not in how_to and ".pgpass" in how_to


# --- help texts: every option explained with its default, one metavar style (trap 7) -------------


def _arguments(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from _arguments(subparser, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


ALL_ARGUMENTS = [
    pytest.param(action, id=f"{path} {'/'.join(action.option_strings) or action.metavar}")
    for prog, parser in (("engine-events", engine_parser()), ("platform-ingest", platform_parser()))
    for path, action in _arguments(parser, prog)
    if action.help != argparse.SUPPRESS
]


@pytest.mark.parametrize("action", ALL_ARGUMENTS)
def test_every_argument_has_a_help_text_with_its_default(action: argparse.Action) -> None:
    """Every option and operand of both CLIs says what it is; an option that takes a value says
    its default (or that it is required); operands and values are named in one style
    (`BOOK_DIR`, upper case)."""
    assert action.help
    if action.option_strings and action.nargs != 0:
        assert "default" in action.help or "required" in action.help
    if (not action.option_strings or action.nargs != 0) and action.choices is None:
        assert action.metavar is not None
        assert re.fullmatch(r"[A-Z][A-Z0-9_,]*", str(action.metavar)), action.metavar
    if action.dest in {"book_dir", "book_dirs"}:
        assert action.metavar == "BOOK_DIR"


def test_status_timeout_has_its_unit_and_the_old_spelling_still_works(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--status-timeout-s` as the other times are spelt; `--status-timeout` still parses (and
    says it is deprecated) but is no longer shown."""
    parser = platform_parser()
    assert parser.parse_args(["repair", "b", "--status-timeout-s", "5"]).status_timeout_s == 5.0
    assert parser.parse_args(["repair", "b"]).status_timeout_s == 60.0
    old = parser.parse_args(["repair", "b", "--status-timeout", "7"])
    assert old.status_timeout_s == 7.0
    assert "--status-timeout is deprecated: use --status-timeout-s" in capsys.readouterr().err
    code, out, _ = platform(capsys, "repair", "--help")
    assert code == 0
    assert "--status-timeout-s S" in out and "--status-timeout " not in out


def test_a_bad_worker_id_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cloud hostname fits (63 characters); a bad id exits 2 at once, with no embedded server
    started (before, the unit failed only after starting it, and restarted every 2 s)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLATFORM_INGEST_DSN", raising=False)
    for name in ("PGSERVICE", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "root").mkdir()
    with pytest.raises(SystemExit) as exited:
        platform_main(["run", str(tmp_path / "root"), "--worker-id", "bad id!"])
    assert exited.value.code == 2
    assert "1 to 63 letters" in capsys.readouterr().err
    assert not (tmp_path / ".platform-ingest").exists()
    hostname = "ip-10-0-0-1.eu-west-1.compute.internal-worker-" + "x" * 17
    assert len(hostname) == 63
    args = platform_parser().parse_args(["run", "root", "--worker-id", hostname])
    assert args.worker_id == hostname


# --- one log style on both CLIs (trap: verbosity and log format) ---------------------------------

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
@pytest.mark.parametrize(
    "record",
    [
        _record(),
        _record(worker="w-1", book_ref="b-2", workers=2, note="two words", quote='a"b'),
        _with_exception(),
    ],
    ids=["plain", "fields", "exception"],
)
def test_both_halves_format_a_record_alike(log_format: str, record: logging.LogRecord) -> None:
    """The engine's and the platform's logging modules (copies: the halves never import each
    other) write the same line for the same record, in both styles."""
    engine_line = engine_logs.formatter(log_format).format(record)
    platform_line = platform_logs.formatter(log_format).format(record)
    assert engine_line == platform_line
    assert engine_logs.utc_time(record.created) == platform_logs.utc_time(record.created)
    assert engine_logs.LEVELS == platform_logs.LEVELS
    assert engine_logs.FORMATS == platform_logs.FORMATS
    assert engine_logs.HANDLER_NAME == platform_logs.HANDLER_NAME


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


def test_both_commands_say_their_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.metadata

    import engine_events
    import platform_ingest

    installed = importlib.metadata.version("run-event-journal")
    assert engine_events.__version__ == platform_ingest.__version__ == installed
    for main, prog in ((engine_main, "engine-events"), (platform_main, "platform-ingest")):
        with pytest.raises(SystemExit) as exited:
            main(["--version"])
        assert exited.value.code == 0
        assert capsys.readouterr().out == f"{prog} {installed}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["compact", "--quiet-for-s", "-1"],
        ["compact", "--quiet-for-s", "nan"],
        ["compact", "--quiet-for-s", "inf"],
        ["compact", "--quiet-for-s", "1e400"],
        ["compact", "--limit", "0"],
        ["compact", "--limit", "x"],
        ["prune"],
        ["prune", "--older-than-s", "-5"],
        ["prune", "--older-than-s", "\x00"],
        ["prune", "--older-than-s", "60", "--limit", "-1"],
        ["run", "root", "--compact-quiet-s", "nan"],
    ],
    ids=repr,
)
def test_retention_options_refuse_what_is_not_a_duration_or_a_count(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    """A negative, infinite or non-numeric duration, a count below 1, a missing `--older-than-s`:
    usage errors (exit 2) before any database is touched, with no function name in the message."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PLATFORM_INGEST_DSN", raising=False)
    with pytest.raises(SystemExit) as exited:
        platform_main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "_seconds" not in err and "_count" not in err
    assert not (tmp_path / ".platform-ingest").exists()
