"""What the CLIs say when given something wrong: one clear line each, the right exit code, no
function name, and nothing started or created before the refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_runs import engine, platform
from engine_events._cli import build_parser as engine_parser
from platform_ingest.cli.main import main as platform_main
from platform_ingest.cli.parser import build_parser as platform_parser


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
