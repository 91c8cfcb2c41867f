"""The help texts: every option explained with its default, operands and values named in one
style, a renamed option still parsed; and each command's `--version`."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from cli_runs import platform
from engine_events._cli import build_parser as engine_parser
from engine_events._cli import main as engine_main
from platform_ingest.cli.main import main as platform_main
from platform_ingest.cli.parser import build_parser as platform_parser


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
