"""The parser of `platform-ingest`: every command, its operands and options (docs/platform/cli.md).

Building it imports no command's modules: each command's `handler` is the name of the function
that runs it (`HANDLERS`), and `main` imports that function's module only when the command runs,
so a one-shot `sweep` does not pay for the others at start-up.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine_events._shell_completion import completion_script

from .._defaults import (
    ATTEMPTS_PER_RUN_MAX,
    DEFAULT_STATUS_COMMAND,
    QUIET_FOR_S_DEFAULT,
    REBUILD_BATCH_EVENTS_MAX,
    RUNS_PER_CALL_MAX,
    SCRUB_BUSY_WAIT_S,
    SCRUB_BYTES_PER_S_DEFAULT,
    STATUS_TIMEOUT_S,
)
from .._logs import add_options as add_log_options
from ..decisions.views import ATTEMPT_STATES
from ..errors import ConfigError
from ..ingest.books import require_stream_id
from .exit_status import Exit

HANDLERS = {
    "migrate": "ingest_commands:migrate",
    "sweep": "ingest_commands:sweep",
    "run": "worker_command:run",
    "name": "operator_commands:name",
    "show": "operator_commands:show",
    "release": "operator_commands:release",
    "forget": "operator_commands:forget",
    "exited": "operator_commands:exited",
    "skip": "operator_commands:skip",
    "disown": "operator_commands:disown",
    "undisown": "operator_commands:undisown",
    "abandon": "operator_commands:abandon",
    "repair": "operator_commands:repair",
    "rebuild": "storage_commands:rebuild",
    "compact": "storage_commands:compact",
    "prune": "storage_commands:prune",
    "scrub": "storage_commands:scrub",
    "completion": "parser:completion",
}
"""Each command's handler: `module:function` in this package, called with the parsed arguments,
returning the exit status."""

COMPLETION_SHELLS = ("bash", "zsh")

TUNED_COMMANDS = frozenset({"sweep", "run", "rebuild"})
"""The commands that pass lines, for which `main` tunes the interpreter (`tune_interpreter`)."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number of 1 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _seconds(text: str) -> float:
    """A duration of 0 seconds or more."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds, 0 or more")
    return value


def _bytes_per_s(text: str) -> int:
    """A rate in bytes a second: a whole number, 0 (off) or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of bytes") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative (0 turns it off)")
    return value


def _count(text: str) -> int:
    """A count of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number of 1 or more")
    return value


def _worker_id(text: str) -> str:
    """A `--worker-id`, checked before anything starts (no embedded server for a bad one)."""
    from ..worker.membership import check_worker_id  # noqa: PLC0415 - only `run` takes one

    try:
        return check_worker_id(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _stream_id(text: str) -> str:
    """An ENGINE_RUN_ID operand, refused as usage (exit 2) when no hello could carry it."""
    try:
        return require_stream_id(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


PROGRAM = "platform-ingest"

BOOK_DIR_HELP = "a book's directory (its name is the book id)"
ENGINE_RUN_ID_HELP = "a stream's engine_run_id, as its hello gives it"


class _Deprecated(argparse.Action):
    """An option's old spelling: it still works, and says on stderr which spelling replaces it."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        new = "--" + self.dest.replace("_", "-")
        print(f"{parser.prog}: {option_string} is deprecated: use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


class _Version(argparse.Action):
    """`--version`: the installed version is looked up in the distribution's metadata only when
    asked for (the lookup cost every start-up about 2 ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from .._version import __version__  # noqa: PLC0415 - see the docstring

        # The program's name, not `parser.prog`: after a command that is "platform-ingest show".
        sys.stdout.write(f"{PROGRAM} {__version__}\n")
        parser.exit()


def completion(args: argparse.Namespace) -> int:
    """`completion bash|zsh`: the shell's completion script, made from this parser."""
    sys.stdout.write(completion_script(build_parser(), args.shell))
    return Exit.OK


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each command's `handler` names the function that runs it
    (`HANDLERS`), imported only when that command runs."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Tail run-event journals into Postgres, applying each event exactly once.",
    )
    _global_options(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", required=True)
    stream = _stream_operands()
    audited = _audited(reason_required=False)
    audited_why = _audited(reason_required=True)

    migrate = commands.add_parser("migrate", help="bring the database schema to this version")
    migrate.add_argument(
        "--projection",
        dest="projections",
        metavar="SPEC",
        action="append",
        default=[],
        help="then register this projection and run its setup (its tables), as the owner role: "
        "package.module:object, or the name of an installed entry point of the group "
        "platform_ingest.projections (repeatable; default: none)",
    )

    sweep = commands.add_parser("sweep", help="one pass over each book, then exit")
    sweep.add_argument("book_dirs", nargs="+", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    sweep.add_argument(
        "--auto", action="store_true", help="every new stream starts an attempt (no naming)"
    )
    sweep.add_argument(
        "--root",
        dest="roots",
        metavar="DIR",
        action="append",
        type=Path,
        default=[],
        help="refuse a book that resolves outside this directory (repeatable; default: any "
        "directory)",
    )
    sweep.add_argument(
        "--json",
        action="store_true",
        help="print one JSON report per book, one compact object a line (NDJSON)",
    )
    _projection_option(sweep)

    run = commands.add_parser(
        "run", help="the worker: tail every book directory under the roots until SIGTERM"
    )
    run.add_argument(
        "roots",
        nargs="+",
        type=Path,
        metavar="ROOT",
        help="a directory whose subdirectories are books (repeatable; the same on every worker)",
    )
    run.add_argument(
        "--auto", action="store_true", help="every new stream starts an attempt (no naming)"
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="P",
        help="serve Prometheus metrics on this port (0: any free port, logged; default: none)",
    )
    run.add_argument(
        "--metrics-address",
        default="127.0.0.1",
        metavar="ADDRESS",
        help="the address the metrics are served on (default 127.0.0.1: this host only; "
        "0.0.0.0 or :: for every interface)",
    )
    run.add_argument(
        "--safety-pass-s",
        type=_positive_float,
        default=15.0,
        metavar="S",
        help="the safety net: every S seconds, measure lag and pass every book behind (default 15)",
    )
    run.add_argument(
        "--membership-s",
        type=_positive_float,
        default=1.0,
        metavar="S",
        help="how often the live workers are looked up; bounds takeover after a worker dies "
        "(default 1)",
    )

    run.add_argument(
        "--compact-quiet-s",
        type=_seconds,
        default=QUIET_FOR_S_DEFAULT,
        metavar="S",
        help="compact the line hashes of attempts quiet for S seconds, in the background "
        f"(default {QUIET_FOR_S_DEFAULT:g}: a week)",
    )
    run.add_argument(
        "--no-compact",
        action="store_true",
        help="never compact line hashes (storage then grows with every line applied)",
    )
    run.add_argument(
        "--scrub-bytes-per-s",
        type=_bytes_per_s,
        default=SCRUB_BYTES_PER_S_DEFAULT,
        metavar="B",
        help="read the books' applied lines again in the background at most B bytes a second "
        "on average, and quarantine a line changed since it was applied (0: never; default "
        f"{SCRUB_BYTES_PER_S_DEFAULT})",
    )
    run.add_argument(
        "--worker-id",
        default=None,
        type=_worker_id,
        metavar="ID",
        help="this worker's name in logs, metrics and pg_stat_activity, 1 to 63 letters, digits, "
        "'.', '_', ':' or '-' (default: random); unique among the workers of a database",
    )
    _projection_option(run)

    name = commands.add_parser(
        "name", help="name a stream for the book's current run", parents=[stream]
    )
    name.add_argument("--new-run", action="store_true", help="start a new run for this stream")

    show = commands.add_parser("show", help="state of books, runs and attempts")
    show.add_argument(
        "book_dirs", nargs="*", metavar="BOOK_DIR", help=BOOK_DIR_HELP + " (default: every book)"
    )
    show.add_argument(
        "--json", action="store_true", help="the JSON scripts read (docs/platform/cli.md, `show`)"
    )
    show.add_argument(
        "--follow",
        action="store_true",
        help="print the state again each time a commit or an operator changes one of the books "
        "(with --json: one book's state a line), until SIGINT or SIGTERM",
    )
    fleet = show.add_argument_group(
        "a fleet's books", "filters, each narrowing the others (not with --follow)"
    )
    fleet.add_argument(
        "--state",
        action="append",
        choices=ATTEMPT_STATES,
        metavar="STATE",
        help="only books with an attempt in this state (repeatable: any of them; default: every "
        "state): " + ", ".join(ATTEMPT_STATES),
    )
    fleet.add_argument(
        "--problem",
        action="append",
        metavar="KIND",
        help="only books with a standing problem of this kind (repeatable): a stream's "
        "(malformed, gap, payload_conflict, ...), the book's (journal_missing, ...), "
        "projection_failed, or unnamed_stream (default: with a problem or none)",
    )
    fleet.add_argument(
        "--lagging",
        action="store_true",
        help="only books with complete lines past the cursor (held or not)",
    )
    fleet.add_argument(
        "--limit",
        type=_positive_int,
        metavar="N",
        help="the N books whose lag is oldest first, the longest since a line was applied "
        "(default: every book, in book id order)",
    )
    fleet.add_argument(
        "--ref",
        metavar="REF",
        help="the book behind a log's opaque reference, b-… and 10 hex digits (default: none)",
    )

    release = commands.add_parser(
        "release",
        help="lift a quarantine, a stall or a refusal after an operator looked (without "
        "ENGINE_RUN_ID: the book's own error, a line of no stream)",
        parents=[audited],
    )
    release.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    release.add_argument(
        "engine_run_id",
        nargs="?",
        default=None,
        type=_stream_id,
        metavar="ENGINE_RUN_ID",
        help=ENGINE_RUN_ID_HELP + " (default: none, the book's own error)",
    )

    forget = commands.add_parser(
        "forget",
        help="delete a book registered by mistake, nothing of which was applied (audited)",
        parents=[audited_why],
    )
    forget.add_argument(
        "book_dir",
        metavar="BOOK_DIR",
        help="the directory registered by mistake (its registered path), or its book id",
    )

    exited = commands.add_parser(
        "exited",
        help="the launcher's report of a process's exit status (negative: a signal)",
        parents=[stream, audited],
    )
    exited.add_argument(
        "exit_status",
        type=int,
        metavar="EXIT_STATUS",
        help="the process's exit status as the launcher saw it (negative: killed by that signal)",
    )

    skip = commands.add_parser(
        "skip",
        help="pass one quarantined line, named by its seq and sha256, with no effect",
        parents=[stream, audited_why],
    )
    skip.add_argument("seq", type=int, metavar="SEQ", help="the quarantined line's seq")
    skip.add_argument(
        "--sha256",
        default=None,
        metavar="HEX",
        help="the line's sha256 (default: none, and then nothing changes: the line's hash is "
        "printed)",
    )

    commands.add_parser(
        "disown",
        help="a foreign stream that is not ours: stop parking on it, apply none of it",
        parents=[stream, audited_why],
    )

    commands.add_parser(
        "undisown",
        help="take a disown back: the stream is foreign again (then name it if it is ours)",
        parents=[stream, audited_why],
    )

    commands.add_parser(
        "abandon",
        help="give up on an attempt; its run fails (abandoned) if nothing else ends it",
        parents=[stream, audited_why],
    )

    rebuild = commands.add_parser(
        "rebuild",
        help="catch a projection up from the journals on disk (a new projection, or a new version)",
    )
    rebuild.add_argument(
        "book_dirs", nargs="*", metavar="BOOK_DIR", help=BOOK_DIR_HELP + " (default: every book)"
    )
    rebuild.add_argument(
        "--projection",
        dest="projections",
        metavar="SPEC",
        action="append",
        required=True,
        help="the projection to catch up: package.module:object, or the name of an installed "
        "entry point of the group platform_ingest.projections (repeatable; no default)",
    )
    rebuild.add_argument(
        "--json",
        action="store_true",
        help="print each projection's report as JSON (default: a line of text each)",
    )
    rebuild.add_argument(
        "--batch-events",
        type=_count,
        default=REBUILD_BATCH_EVENTS_MAX,
        metavar="N",
        help=f"give at most N events a transaction (default {REBUILD_BATCH_EVENTS_MAX})",
    )

    compact = commands.add_parser(
        "compact", help="compact the line hashes of quiet attempts now, then exit"
    )
    compact.add_argument(
        "--quiet-for-s",
        type=_seconds,
        default=QUIET_FOR_S_DEFAULT,
        metavar="S",
        help=f"only attempts quiet for S seconds (default {QUIET_FOR_S_DEFAULT:g}: a week)",
    )
    compact.add_argument(
        "--limit",
        type=_count,
        default=ATTEMPTS_PER_RUN_MAX,
        metavar="N",
        help=f"at most N attempts this time (default {ATTEMPTS_PER_RUN_MAX})",
    )
    compact.add_argument(
        "--json", action="store_true", help="print the report as JSON (default: text)"
    )

    prune = commands.add_parser(
        "prune",
        help="delete ended runs unchanged for a retention period (audited; keeps a tombstone "
        "per stream)",
        parents=[audited],
    )
    prune.add_argument(
        "--older-than-s",
        type=_seconds,
        required=True,
        metavar="S",
        help="only runs (and their attempts) unchanged for S seconds (required)",
    )
    prune.add_argument(
        "--limit",
        type=_count,
        default=RUNS_PER_CALL_MAX,
        metavar="N",
        help=f"at most N runs this time (default {RUNS_PER_CALL_MAX})",
    )
    prune.add_argument(
        "--dry-run", action="store_true", help="list the runs that would be pruned; change nothing"
    )
    prune.add_argument(
        "--json", action="store_true", help="print the report as JSON (default: text)"
    )

    scrub = commands.add_parser(
        "scrub",
        help="read each book's applied lines again and compare them with what was applied "
        "(a line changed since is quarantined as payload_conflict)",
    )
    scrub.add_argument("book_dirs", nargs="+", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    scrub.add_argument(
        "--busy-wait-s",
        type=_seconds,
        default=SCRUB_BUSY_WAIT_S,
        metavar="S",
        help="how long to wait, between two steps, for a pass that holds the book "
        f"(default {SCRUB_BUSY_WAIT_S:g}); then the book is reported busy",
    )
    scrub.add_argument(
        "--json",
        action="store_true",
        help="print one JSON report per book, one compact object a line (NDJSON)",
    )

    repair = commands.add_parser(
        "repair", help="settle a stopped run through the engine status", parents=[audited]
    )
    repair.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    repair.add_argument(
        "--status-command",
        default=DEFAULT_STATUS_COMMAND,
        metavar="CMD",
        help="the engine's status command, split into words as a shell would (no shell runs "
        "it); BOOK_DIR and --json are appended. The engine-events installed with platform-ingest is "
        f"the default; name the engine's own install to run its release (default: "
        f"{DEFAULT_STATUS_COMMAND!r})",
    )
    repair.add_argument(
        "--status-timeout-s",
        type=_positive_float,
        default=STATUS_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for the status command (default {STATUS_TIMEOUT_S:g})",
    )
    repair.add_argument(  # the spelling before units were in flag names: kept for scripts
        "--status-timeout",
        dest="status_timeout_s",
        type=_positive_float,
        default=argparse.SUPPRESS,
        action=_Deprecated,
        help=argparse.SUPPRESS,
    )
    completion = commands.add_parser(
        "completion", help="print a completion script for the shell, made from this parser"
    )
    completion.add_argument(
        "shell",
        choices=COMPLETION_SHELLS,
        help="the shell to complete for",
    )
    for command, subparser in commands.choices.items():
        _global_options(subparser, after_command=True)
        subparser.set_defaults(handler=HANDLERS[command])
    return parser


def _global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """The options of the whole command line, before the command (`after_command` False, with
    their defaults) or after it, where every command's parser takes them too: there they have no
    default (`argparse.SUPPRESS`), so that a value given before the command is kept unless the
    option is given again after it, and then the one after wins (docs/platform/cli.md)."""
    options = (
        parser.add_argument_group("options of every command (before or after it)")
        if after_command
        else parser
    )
    options.add_argument(
        "--version",
        action=_Version,
        help="print the installed version and exit",
    )
    options.add_argument(
        "--dsn",
        metavar="DSN",
        default=argparse.SUPPRESS if after_command else os.environ.get("PLATFORM_INGEST_DSN"),
        help="Postgres to use (default: $PLATFORM_INGEST_DSN, else libpq's PG* variables, else "
        "an embedded server under --data-dir); `ps` shows it: prefer the environment",
    )
    options.add_argument(
        "--data-dir",
        type=Path,
        metavar="DIR",
        default=argparse.SUPPRESS if after_command else Path(".platform-ingest"),
        help="where the embedded Postgres keeps its data (default: .platform-ingest/ in the "
        "current directory)",
    )
    add_log_options(
        parser,
        default_level="WARNING; run: INFO",
        default_format="text; run: json",
        after_command=after_command,
    )


def _stream_operands() -> argparse.ArgumentParser:
    """The operands of every command on one stream: the book and the stream's engine_run_id."""
    operands = argparse.ArgumentParser(add_help=False)
    operands.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    operands.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
    )
    return operands


def _audited(*, reason_required: bool) -> argparse.ArgumentParser:
    """The options every audited action takes: who does it and why."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--by",
        default=None,
        metavar="WHO",
        help="who acts, for the audit (default: this account's name)",
    )
    options.add_argument(
        "--reason",
        required=reason_required,
        default="",
        metavar="TEXT",
        help="why, for the audit (required)"
        if reason_required
        else "why, for the audit (default: empty)",
    )
    return options


def _projection_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--projection",
        dest="projections",
        metavar="SPEC",
        action="append",
        default=[],
        help="give each applied line to this projection, in the transaction that applies it: "
        "package.module:object, or the name of an installed entry point of the group "
        "platform_ingest.projections (repeatable; default: none)",
    )
