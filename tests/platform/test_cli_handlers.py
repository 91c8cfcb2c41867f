"""Every command of `platform-ingest` names a handler, and each handler is a function of the
command line's package that takes the parsed arguments (the parser imports none of them)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import logging
from pathlib import Path

import pytest

from platform_ingest._logs import chosen_level
from platform_ingest._version import __version__
from platform_ingest.cli.exit_status import Exit
from platform_ingest.cli.main import main
from platform_ingest.cli.parser import HANDLERS, TUNED_COMMANDS, build_parser
from shell_completion import bash_offers


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    return dict(actions[0].choices)


def test_every_command_has_a_handler_and_every_handler_a_command() -> None:
    commands = _commands()
    assert len(commands) >= 15
    assert set(commands) == set(HANDLERS)
    assert set(commands) >= TUNED_COMMANDS
    for name, sub in commands.items():
        assert sub.get_default("handler") == HANDLERS[name], name


def test_every_handler_resolves_to_a_function_of_one_argument() -> None:
    for name, spec in HANDLERS.items():
        module, _, function = spec.partition(":")
        handler = getattr(importlib.import_module(f"platform_ingest.cli.{module}"), function)
        assert inspect.isfunction(handler), name
        assert list(inspect.signature(handler).parameters) == ["args"], name


def test_the_exit_statuses_are_the_documented_ones() -> None:
    """docs/platform/cli.md's table: 0 done, 1 failed, 2 usage, 3 engine live, 4 not replayable,
    5 the schema changed under a worker, 6 a scrub's mismatch."""
    assert {status.name: int(status) for status in Exit} == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "ENGINE_LIVE": 3,
        "NOT_REPLAYABLE": 4,
        "SCHEMA_CHANGED": 5,
        "MISMATCH": 6,
    }


AUDITED = {
    "release": False,
    "exited": False,
    "skip": True,
    "disown": True,
    "undisown": True,
    "abandon": True,
    "prune": False,
    "repair": False,
    "forget": True,
}
"""The audited commands, and whether each requires `--reason` (docs/platform/cli.md)."""


def test_the_audited_commands_take_by_and_reason_and_require_a_reason_where_documented() -> None:
    commands = _commands()
    for name, sub in commands.items():
        options = {option: action for action in sub._actions for option in action.option_strings}
        assert ("--by" in options) == (name in AUDITED), name
        if name in AUDITED:
            assert options["--reason"].required is AUDITED[name], name


PRINTS_TEXT_OR_JSON = frozenset({"sweep", "show", "rebuild", "compact", "prune", "scrub"})
"""The commands whose report is text for a person, and the same report as JSON with `--json`
(docs/platform/cli.md). The remedies and `repair` print their audit record as JSON always (its
`action_id` is what a launcher keeps), `migrate`, `name` and `release` one line of text, and `run`
only logs."""


def test_the_commands_that_print_a_report_take_json() -> None:
    commands = _commands()
    taking_json = {
        name
        for name, sub in commands.items()
        if any("--json" in action.option_strings for action in sub._actions)
    }
    assert taking_json == PRINTS_TEXT_OR_JSON
    for name in PRINTS_TEXT_OR_JSON:
        assert commands[name].parse_args([*_operands(name)]).json is False, name


def _operands(command: str) -> list[str]:
    """The least a command's parser accepts (its required operands and options)."""
    return {
        "rebuild": ["--projection", "p:P"],
        "prune": ["--older-than-s", "1"],
        "sweep": ["book"],
        "scrub": ["book"],
    }.get(command, [])


def _top_level_options() -> set[str]:
    return {
        option
        for action in build_parser()._actions
        for option in action.option_strings
        if not isinstance(action, argparse._HelpAction)
    }


def test_every_command_takes_the_global_options_after_it_too() -> None:
    """`platform-ingest show --dsn X` as well as `platform-ingest --dsn X show`: each option of
    the top-level parser is an option of every command's parser too."""
    assert {"--dsn", "--data-dir", "-v", "-q", "--log-level", "--log-format"} <= (
        _top_level_options()
    )
    for name, sub in _commands().items():
        options = {option for action in sub._actions for option in action.option_strings}
        assert _top_level_options() <= options, name


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--dsn", "host=a", "show"], ("host=a", ".platform-ingest", logging.WARNING, None)),
        (["show", "--dsn", "host=a"], ("host=a", ".platform-ingest", logging.WARNING, None)),
        (["show", "--data-dir", "d"], (None, "d", logging.WARNING, None)),
        (["show", "-v", "--log-format", "json"], (None, ".platform-ingest", logging.INFO, "json")),
        # Given on both sides, the one after the command wins.
        (
            ["--dsn", "host=a", "show", "--dsn", "host=b"],
            ("host=b", ".platform-ingest", logging.WARNING, None),
        ),
        (["--data-dir", "a", "show", "--data-dir", "b"], (None, "b", logging.WARNING, None)),
        (
            ["--log-format", "json", "show", "--log-format", "text"],
            (None, ".platform-ingest", logging.WARNING, "text"),
        ),
        # -v, -q and --log-level are one choice: the one after replaces the one before.
        (["-v", "show", "-q"], (None, ".platform-ingest", logging.ERROR, None)),
        (["--log-level", "debug", "show", "-v"], (None, ".platform-ingest", logging.INFO, None)),
        (["-qq", "show", "--log-level", "info"], (None, ".platform-ingest", logging.INFO, None)),
        (["-v", "show", "-vv"], (None, ".platform-ingest", logging.DEBUG, None)),
    ],
)
def test_a_global_option_is_taken_before_or_after_the_command_and_the_one_after_wins(
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    expected: tuple[str | None, str, int, str | None],
) -> None:
    """Expected: the DSN, the data directory, the log level and the log format."""
    monkeypatch.delenv("PLATFORM_INGEST_DSN", raising=False)
    args = build_parser().parse_args(argv)
    dsn, data_dir, level, log_format = expected
    assert (args.dsn, args.data_dir, chosen_level(args, "WARNING"), args.log_format) == (
        dsn,
        Path(data_dir),
        level,
        log_format,
    )


def test_the_dsn_of_the_environment_stays_the_default_after_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PLATFORM_INGEST_DSN", "host=from-env")
    assert build_parser().parse_args(["show", "-v"]).dsn == "host=from-env"
    assert build_parser().parse_args(["show", "--dsn", "host=given"]).dsn == "host=given"


def test_two_verbosity_options_after_the_command_are_still_one_choice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["show", "-v", "-q"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize("command", [None, *sorted(HANDLERS)])
def test_the_version_is_said_the_same_in_any_position(
    command: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """`platform-ingest --version` and `platform-ingest COMMAND --version` print the same line:
    the program's name and its version, never the command's name."""
    argv = ["--version"] if command is None else [command, "--version"]
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"platform-ingest {__version__}\n"


def _complete(script: str, *words: str) -> list[str]:
    return bash_offers(script, "_shtab_platform_ingest", *words)


def _completion_script(capsys: pytest.CaptureFixture[str], shell: str) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def test_the_bash_completion_offers_every_command_and_its_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The script is made from the parser: every command, each command's options (the global
    ones too), the choices of an option that has them."""
    script = _completion_script(capsys, "bash")
    assert sorted(_complete(script, "platform-ingest", "")) == sorted(_commands())
    assert "completion" in _commands()
    assert _complete(script, "platform-ingest", "--dsn", "x", "sh") == ["show"]
    show_options = set(_complete(script, "platform-ingest", "show", "--"))
    assert {"--json", "--follow", "--dsn", "--data-dir", "--log-level", "--help"} <= show_options
    assert "--auto" not in show_options
    for name, sub in _commands().items():
        offered = set(_complete(script, "platform-ingest", name, "-"))
        shown = [action for action in sub._actions if action.help != argparse.SUPPRESS]
        assert offered == {option for action in shown for option in action.option_strings}, name
    assert _complete(script, "platform-ingest", "show", "--log-level", "") == [
        "DEBUG",
        "INFO",
        "WARNING",
        "ERROR",
        "CRITICAL",
    ]
    assert _complete(script, "platform-ingest", "completion", "") == ["bash", "zsh"]
