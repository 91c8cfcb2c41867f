"""`completion bash|zsh`: a completion script made from the command line's own parser.

The script is written from the parser each time it is printed, so it names every command and
option this version has: nothing is kept by hand. It completes the commands, each command's
options (the global ones too: they are taken after the command as well as before it), and the
values of an option or operand that has a fixed set of them; anything else is left to the
shell's own completion of file names. zsh runs the bash script through its `bashcompinit`.

The engine half has a copy of the generator (`engine_events._completion`: the halves never
import each other); `tests/test_copies_agree.py` holds the two to the same script.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterable

from .exit_status import Exit
from .parser import build_parser


def completion(args: argparse.Namespace) -> int:
    parser = build_parser()
    script = zsh_script(parser) if args.shell == "zsh" else bash_script(parser)
    sys.stdout.write(script)
    return Exit.OK


def _words(words: Iterable[str]) -> str:
    return shlex.quote(" ".join(words))


def _shown(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's options and operands a person is told of (`--help` shows them)."""
    return [action for action in parser._actions if action.help != argparse.SUPPRESS]


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _takes_value(action: argparse.Action) -> bool:
    return bool(action.option_strings) and action.nargs != 0


def _case(parser: argparse.ArgumentParser, operands: list[str]) -> list[str]:
    """The lines of one parser's branch: its options, what follows an option that takes a value,
    and the words an operand may be."""
    actions = _shown(parser)
    options = [option for action in actions for option in action.option_strings]
    lines = [f"            options={_words(options)}"]
    if operands:
        lines.append(f"            operands={_words(operands)}")
    values = [action for action in actions if _takes_value(action)]
    if values:
        lines.append('            case "$prev" in')
        for action in values:
            pattern = "|".join(shlex.quote(option) for option in action.option_strings)
            if action.choices:
                choices = _words(str(choice) for choice in action.choices)
                lines.append(
                    f'                {pattern}) COMPREPLY=($(compgen -W {choices} -- "$cur"));'
                    " return ;;"
                )
            else:  # a name, a number, a path: the shell's own completion
                lines.append(f"                {pattern}) return ;;")
        lines.append("            esac")
    return lines


def bash_script(parser: argparse.ArgumentParser) -> str:
    """The bash completion of `parser`'s command (`complete -F`), read from the parser."""
    prog = parser.prog
    function = "_" + prog.replace("-", "_") + "_completion"
    commands = _commands(parser)
    global_values = [
        option
        for action in _shown(parser)
        if _takes_value(action)
        for option in action.option_strings
    ]
    lines = [
        f"# {prog}'s completion for bash, printed by `{prog} completion bash`.",
        f"{function}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" command="" word i',
        '    local options="" operands=""',
        '    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"',
        "    for (( i = 1; i < COMP_CWORD; i++ )); do",
        '        word="${COMP_WORDS[i]}"',
        '        case "$word" in',
    ]
    if global_values:
        pattern = "|".join(shlex.quote(option) for option in global_values)
        lines.append(f"            {pattern}) (( i++ )) ;;")
    lines += [
        "            -*) ;;",
        '            *) command="$word"; break ;;',
        "        esac",
        "    done",
        '    case "$command" in',
        "        '')",
        *_case(parser, list(commands)),
        "            ;;",
    ]
    for name, subparser in commands.items():
        choices = [
            str(choice)
            for action in _shown(subparser)
            if not action.option_strings and action.choices
            for choice in action.choices
        ]
        lines += [f"        {shlex.quote(name)})", *_case(subparser, choices), "            ;;"]
    lines += [
        "    esac",
        '    if [[ "$cur" == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$options" -- "$cur"))',
        '    elif [[ -n "$operands" ]]; then',
        '        COMPREPLY=($(compgen -W "$operands" -- "$cur"))',
        "    fi",
        "}",
        f"complete -o default -F {function} {prog}",
    ]
    return "\n".join(lines) + "\n"


def zsh_script(parser: argparse.ArgumentParser) -> str:
    """The zsh completion of `parser`'s command: the bash one, run by zsh's `bashcompinit`."""
    return (
        f"#compdef {parser.prog}\n"
        f"# {parser.prog}'s completion for zsh, printed by `{parser.prog} completion zsh`.\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser)
    )
