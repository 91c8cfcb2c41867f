"""Both commands' completion scripts, generated from their parsers, really complete: loaded into
bash and into an interactive zsh as the docs say, they complete every command from its shortest
unambiguous prefix, a command's options, and the values of an option or operand that has a fixed set
(docs/reference/engine-events-cli.md, docs/platform/cli.md)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from engine_events._cli import build_parser as engine_parser
from platform_ingest.cli.parser import build_parser as platform_parser
from shell_completion import bash_offers, zsh_completes

COMMANDS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "engine-events": engine_parser,
    "platform-ingest": platform_parser,
}


def _script(program: str, shell: str) -> str:
    """The script as a user gets it: printed by the installed command."""
    done = subprocess.run(
        [str(Path(sys.executable).parent / program), "completion", shell],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def _commands(program: str) -> list[str]:
    (commands,) = [
        action
        for action in COMMANDS[program]()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    return list(commands.choices)


def _shortest_prefix(name: str, names: list[str]) -> str:
    """The shortest prefix of `name` that no other of `names` starts with."""
    others = [other for other in names if other != name]
    return next(
        name[:size]
        for size in range(1, len(name) + 1)
        if not any(other.startswith(name[:size]) for other in others)
    )


def _cases(program: str) -> dict[str, str]:
    """A partial command line (its last word the one being completed) and the word it completes to."""
    names = _commands(program)
    cases = {f"{program} {_shortest_prefix(name, names)}": name for name in names}
    cases |= {
        f"{program} verify --js" if program == "engine-events" else f"{program} show --fol": (
            "--json" if program == "engine-events" else "--follow"
        ),
        f"{program} --log-format j": "json",
        f"{program} completion --log-level WARN": "WARNING",
        f"{program} completion z": "zsh",
    }
    if program == "engine-events":
        cases[f"{program} demo book --on-journal-error deg"] = "degrade"
    return cases


@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_bash_completes_every_command_option_and_fixed_value(program: str) -> None:
    script = _script(program, "bash")
    function = "_shtab_" + program.replace("-", "_")
    for line, word in _cases(program).items():
        assert bash_offers(script, function, *line.split(" ")) == [word], line


@pytest.mark.skipif(
    shutil.which("zsh") is None,
    reason="zsh is not installed on this host: its completion can only be checked by zsh itself",
)
@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_zsh_completes_every_command_option_and_fixed_value(program: str, tmp_path: Path) -> None:
    cases = _cases(program)
    completed = zsh_completes(_script(program, "zsh"), tmp_path, *cases)
    for (line, word), after_tab in zip(cases.items(), completed, strict=True):
        head, _, _ = line.rpartition(" ")
        assert after_tab == f"{head} {word} ", line
