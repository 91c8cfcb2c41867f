"""Every command of `platform-ingest` names a handler, and each handler is a function of the
command line's package that takes the parsed arguments (the parser imports none of them)."""

from __future__ import annotations

import argparse
import importlib
import inspect

from platform_ingest.cli.exit_status import Exit
from platform_ingest.cli.parser import HANDLERS, TUNED_COMMANDS, build_parser


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
    """docs/platform/cli.md's table: 0 done, 1 failed, 2 usage, 3 engine live, 4 not replayable."""
    assert {status.name: int(status) for status in Exit} == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "ENGINE_LIVE": 3,
        "NOT_REPLAYABLE": 4,
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
}
"""The audited commands, and whether each requires `--reason` (docs/platform/cli.md)."""


def test_the_audited_commands_take_by_and_reason_and_require_a_reason_where_documented() -> None:
    commands = _commands()
    for name, sub in commands.items():
        options = {option: action for action in sub._actions for option in action.option_strings}
        assert ("--by" in options) == (name in AUDITED), name
        if name in AUDITED:
            assert options["--reason"].required is AUDITED[name], name
