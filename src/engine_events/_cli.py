"""`engine-events`: the engine side's command (demo, status, verify, watch, completion)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ._demo import DemoOptions, StopRequests, run_demo
from ._events import STREAM_VERSION, STREAM_VERSIONS
from ._exit_codes import ExitCode
from ._logs import add_options as add_log_options
from ._logs import chosen_level
from ._logs import configure as configure_logs
from ._schema import DATABASE_FILE_NAME
from ._shell_completion import completion_script
from ._version import __version__
from .readers.status import command as status_command
from .readers.verify import command as verify_command

DEFAULT_LOG_LEVEL = "INFO"
DEFAULT_LOG_FORMAT = "text"
COMPLETION_SHELLS = ("bash", "zsh")


def _integer(text: str, *, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    return _integer(text, least=1, what="a positive integer")


def non_negative_int(text: str) -> int:
    """An argparse type: an integer of at least 0."""
    return _integer(text, least=0, what="a non-negative integer")


def _stages(text: str) -> tuple[str, ...]:
    stages = tuple(name.strip() for name in text.split(",") if name.strip())
    if not stages or len(set(stages)) != len(stages):
        raise argparse.ArgumentTypeError("stages must be distinct, comma-separated names")
    return stages


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engine-events", description=__doc__)
    _global_options(parser, after_command=False)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run the reference engine on a book directory")
    demo.add_argument(
        "book_dir", type=Path, metavar="BOOK_DIR", help="the book's directory (made if missing)"
    )
    demo.add_argument(
        "--units", type=positive_int, default=6, metavar="N", help="units to make (default 6)"
    )
    demo.add_argument(
        "--stages",
        type=_stages,
        default=("draft", "edit"),
        metavar="A,B",
        help="the stages each unit goes through, in order (default draft,edit)",
    )
    demo.add_argument(
        "--unit-cost-micro-usd",
        type=non_negative_int,
        default=250_000,
        metavar="N",
        help="the cost of one step in micro-USD (default 250000)",
    )
    demo.add_argument(
        "--ceiling-micro-usd",
        type=non_negative_int,
        default=None,
        metavar="N",
        help="the book's money ceiling in micro-USD (default: none)",
    )
    demo.add_argument(
        "--pace-ms",
        type=non_negative_int,
        default=100,
        metavar="N",
        help="milliseconds one step's work takes (default 100)",
    )
    demo.add_argument(
        "--engine-run-id",
        default=None,
        metavar="ID",
        help="the stream's name, as the platform chose it (default: a new UUID)",
    )
    demo.add_argument(
        "--book-id", default=None, metavar="ID", help="the book id (default: the directory's name)"
    )
    demo.add_argument(
        "--on-journal-error",
        choices=("degrade", "fail"),
        default="degrade",
        help="degrade: keep going, events wait in the outbox (default); fail: exit 1",
    )
    demo.add_argument(
        "--outbox-retention-s",
        type=non_negative_int,
        default=None,
        metavar="S",
        help="delete outbox rows older than S seconds once they are in the journal "
        "(default: keep every row)",
    )
    demo.add_argument(
        "--outbox-prune-interval-s",
        type=non_negative_int,
        default=60,
        metavar="S",
        help="with a retention, prune at most every S seconds after a flush (default 60)",
    )
    demo.add_argument(
        "--stream-version",
        default=STREAM_VERSION,
        metavar="VERSION",
        help=f"the stream version to write, one of {', '.join(STREAM_VERSIONS)} "
        f"(default {STREAM_VERSION}); any other is refused with exit 10",
    )

    status = commands.add_parser("status", help="report on a stopped run (the repair channel)")
    status.add_argument("book_dir", type=Path, metavar="BOOK_DIR", help="the book's directory")
    status.add_argument(
        "--json",
        action="store_true",
        help="print the report (or the error) as one JSON object, for a script or the platform's "
        "repair (default: a short text; an error on stderr)",
    )
    status.add_argument(
        "--repair", action="store_true", help="cut a torn tail, project the backlog"
    )
    status.add_argument(
        "--database",
        default=DATABASE_FILE_NAME,
        metavar="NAME",
        help=f"the database's file name in BOOK_DIR (default {DATABASE_FILE_NAME})",
    )

    verify = commands.add_parser("verify", help="check a journal file")
    verify.add_argument("journal", type=Path, metavar="JOURNAL", help="the journal file to check")
    verify.add_argument(
        "--json", action="store_true", help="print the report as JSON (default: a short text)"
    )

    watch = commands.add_parser("watch", help="a live view of a book for a person")
    watch.add_argument("book_dir", type=Path, metavar="BOOK_DIR", help="the book's directory")
    watch.add_argument("--once", action="store_true", help="show one snapshot and exit")
    watch.add_argument("--follow", action="store_true", help="keep following after `finished`")
    watch.add_argument(
        "--timeout-s",
        type=float,
        default=None,
        metavar="S",
        help="give up after S seconds, exit 1 (default: no limit)",
    )

    completion = commands.add_parser(
        "completion", help="print a completion script for the shell, made from this parser"
    )
    completion.add_argument(
        "shell",
        choices=COMPLETION_SHELLS,
        help="the shell to complete for",
    )
    for subparser in commands.choices.values():
        _global_options(subparser, after_command=True)
    return parser


def _global_options(parser: argparse.ArgumentParser, *, after_command: bool) -> None:
    """The options of the whole command line, before the command (`after_command` False, with
    their defaults) or after it, where every command's parser takes them too: there they have no
    default (`argparse.SUPPRESS`), so that a value given before the command is kept unless the
    option is given again after it, and then the one after wins
    (docs/reference/engine-events-cli.md)."""
    options = (
        parser.add_argument_group("options of every command (before or after it)")
        if after_command
        else parser
    )
    options.add_argument(
        "--version",
        action="version",
        version=f"engine-events {__version__}",
        help="print the installed version and exit",
    )
    add_log_options(
        parser,
        default_level=DEFAULT_LOG_LEVEL,
        default_format=DEFAULT_LOG_FORMAT,
        after_command=after_command,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logs(chosen_level(args, DEFAULT_LOG_LEVEL), args.log_format or DEFAULT_LOG_FORMAT)
    if args.command == "demo":
        stops = StopRequests()
        stops.install()
        options = DemoOptions(
            units=args.units,
            stages=args.stages,
            unit_cost_micro_usd=args.unit_cost_micro_usd,
            ceiling_micro_usd=args.ceiling_micro_usd,
            pace_ms=args.pace_ms,
            engine_run_id=args.engine_run_id,
            book_id=args.book_id,
            on_journal_error=args.on_journal_error,
            stream_version=args.stream_version,
            outbox_retention_s=args.outbox_retention_s,
            outbox_prune_interval_s=args.outbox_prune_interval_s,
        )
        args.book_dir.mkdir(parents=True, exist_ok=True)  # a demo may start a new book
        return run_demo(args.book_dir, options, stops=stops)
    if args.command == "status":
        return status_command(
            args.book_dir, database_name=args.database, repair_first=args.repair, as_json=args.json
        )
    if args.command == "verify":
        return verify_command(args.journal, as_json=args.json)
    if args.command == "completion":
        sys.stdout.write(completion_script(build_parser(), args.shell))
        return ExitCode.CLEAN
    if args.command == "watch":
        from .readers.watch import command as watch_command  # noqa: PLC0415 - only watch loads rich

        return watch_command(
            args.book_dir, once=args.once, exit_on_finish=not args.follow, timeout_s=args.timeout_s
        )
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
