"""`platform-ingest`: the platform side's command (docs/platform/cli.md).

    platform-ingest [--dsn DSN] [--data-dir DIR] [-v | -q | --log-level LEVEL]
                    [--log-format text|json] COMMAND ...

    migrate                                  bring the schema to this version
    sweep BOOK_DIR... [--auto] [--root DIR]  one pass over each book, then exit
    run ROOT... [--auto] [--metrics-port P]  the worker: every book under the roots, until SIGTERM
    name BOOK_DIR ENGINE_RUN_ID [--new-run]  name a stream for the book's current (or a new) run
    show [BOOK_DIR...] [--json] [--follow]   state of books, runs, attempts (--follow: live)
    release BOOK_DIR ENGINE_RUN_ID           lift a quarantine, stall or refusal after looking
    repair BOOK_DIR [--status-command CMD]   settle a stopped run through the engine's status
    exited BOOK_DIR ENGINE_RUN_ID STATUS     the launcher reports a process's exit status
    skip BOOK_DIR ENGINE_RUN_ID SEQ --sha256 HEX --reason TEXT   pass one quarantined line
    disown BOOK_DIR ENGINE_RUN_ID --reason TEXT    a foreign stream is not ours
    undisown BOOK_DIR ENGINE_RUN_ID --reason TEXT  take a disown back: the stream is foreign again
    abandon BOOK_DIR ENGINE_RUN_ID --reason TEXT   give up on an attempt
    rebuild --projection SPEC [BOOK_DIR...]  catch a projection up from the journals on disk

Logs go to stderr, every time in UTC with milliseconds and a `Z`: JSON lines at INFO and above for
`run`, text at WARNING and above for the other commands; `-v`/`-q` move the level a step, or
`--log-level` names it, and `--log-format` chooses the style (the same options as `engine-events`).

Every remedy and report is audited (`--by`, `--reason`) and shown by `show --json`.

The database: `--dsn` or `PLATFORM_INGEST_DSN`; with neither, libpq's `PG*` variables when one
that names a server is set (`PGSERVICE`, `PGHOST`, `PGDATABASE`, ...); with none of these, an
embedded Postgres under `--data-dir` (default `.platform-ingest/`, relative to the current
directory) is started, migrated and stopped by the command, which says on stderr which directory
it uses and when it has just created it.

Exit codes: 0 done (a book that ends quarantined or stalled is state, not a failure of `sweep`);
1 the command could not do its work (database unavailable, a pass that could not finish);
2 bad usage or input (unknown book, path outside the roots, a refused operation);
3 `repair` refused because the engine is live; 4 `rebuild` caught up all it could, and some seqs
cannot be replayed (each listed in its report).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import math
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from .._defaults import (
    ATTEMPTS_PER_RUN_MAX,
    DEFAULT_STATUS_COMMAND,
    QUIET_FOR_S_DEFAULT,
    REBUILD_BATCH_EVENTS_MAX,
    RUNS_PER_CALL_MAX,
    STATUS_TIMEOUT_S,
)
from .._logs import add_options as add_log_options
from .._logs import chosen_level
from .._logs import configure as configure_logs
from .._plain import display_path, plain
from ..errors import ConfigError, EngineLive, IngestError, NotFound
from ..ingest.book_pass import BookPass, Mode

# Only what `sweep` and `migrate` use is imported here: each other command imports its modules in
# the branch that runs it, so a one-shot `sweep` does not pay for them at start-up.
from ..ingest.books import find_book, register_book, require_stream_id
from ..ingest.projection_step import install
from ..projections import Projection, check_projections, load_projection
from ..store.db import Database
from ..store.schema import migrate, require_current

logger = logging.getLogger("platform_ingest")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ENGINE_LIVE = 3
EXIT_NOT_REPLAYABLE = 4


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

        sys.stdout.write(f"{parser.prog} {__version__}\n")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="platform-ingest",
        description="Tail run-event journals into Postgres, applying each event exactly once.",
    )
    parser.add_argument(
        "--version",
        action=_Version,
        help="print the installed version and exit",
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PLATFORM_INGEST_DSN"),
        metavar="DSN",
        help="Postgres to use (default: $PLATFORM_INGEST_DSN, else libpq's PG* variables, else "
        "an embedded server under --data-dir); `ps` shows it: prefer the environment",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".platform-ingest"),
        metavar="DIR",
        help="where the embedded Postgres keeps its data (default: .platform-ingest/ in the "
        "current directory)",
    )
    add_log_options(parser, default_level="WARNING; run: INFO", default_format="text; run: json")
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("migrate", help="bring the database schema to this version")

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
        "--worker-id",
        default=None,
        type=_worker_id,
        metavar="ID",
        help="this worker's name in logs, metrics and pg_stat_activity, 1 to 63 letters, digits, "
        "'.', '_', ':' or '-' (default: random); unique among the workers of a database",
    )
    _projection_option(run)

    name = commands.add_parser("name", help="name a stream for the book's current run")
    name.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    name.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
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

    release = commands.add_parser(
        "release", help="lift a quarantine, a stall or a refusal after an operator looked"
    )
    release.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    release.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
    )
    _audited(release, reason_required=False)

    exited = commands.add_parser(
        "exited", help="the launcher's report of a process's exit status (negative: a signal)"
    )
    exited.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    exited.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
    )
    exited.add_argument(
        "exit_status",
        type=int,
        metavar="EXIT_STATUS",
        help="the process's exit status as the launcher saw it (negative: killed by that signal)",
    )
    _audited(exited, reason_required=False)

    skip = commands.add_parser(
        "skip", help="pass one quarantined line, named by its seq and sha256, with no effect"
    )
    skip.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    skip.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
    )
    skip.add_argument("seq", type=int, metavar="SEQ", help="the quarantined line's seq")
    skip.add_argument(
        "--sha256",
        default=None,
        metavar="HEX",
        help="the line's sha256 (default: none, and then nothing changes: the line's hash is "
        "printed)",
    )
    _audited(skip, reason_required=True)

    disown = commands.add_parser(
        "disown", help="a foreign stream that is not ours: stop parking on it, apply none of it"
    )
    disown.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    disown.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
    )
    _audited(disown, reason_required=True)

    undisown = commands.add_parser(
        "undisown",
        help="take a disown back: the stream is foreign again (then name it if it is ours)",
    )
    undisown.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    undisown.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
    )
    _audited(undisown, reason_required=True)

    abandon = commands.add_parser(
        "abandon", help="give up on an attempt; its run fails (abandoned) if nothing else ends it"
    )
    abandon.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    abandon.add_argument(
        "engine_run_id", type=_stream_id, metavar="ENGINE_RUN_ID", help=ENGINE_RUN_ID_HELP
    )
    _audited(abandon, reason_required=True)

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

    prune = commands.add_parser(
        "prune",
        help="delete ended runs unchanged for a retention period (audited; keeps a tombstone "
        "per stream)",
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
    _audited(prune, reason_required=False)

    repair = commands.add_parser("repair", help="settle a stopped run through the engine status")
    repair.add_argument("book_dir", metavar="BOOK_DIR", help=BOOK_DIR_HELP)
    repair.add_argument(
        "--status-command",
        default=DEFAULT_STATUS_COMMAND,
        metavar="CMD",
        help=f"the engine's status command; BOOK_DIR --json is appended "
        f"(default: {DEFAULT_STATUS_COMMAND!r})",
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
    _audited(repair, reason_required=False)
    return parser


def _audited(command: argparse.ArgumentParser, *, reason_required: bool) -> None:
    """The options every audited action takes: who does it and why."""
    command.add_argument(
        "--by",
        default=None,
        metavar="WHO",
        help="who acts, for the audit (default: this account's name)",
    )
    command.add_argument(
        "--reason",
        required=reason_required,
        default="",
        metavar="TEXT",
        help="why, for the audit (required)"
        if reason_required
        else "why, for the audit (default: empty)",
    )


LIBPQ_VARIABLES = ("PGSERVICE", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER")
"""libpq's variables that name a server: with one of them set and no DSN, libpq's environment
(with `PGPASSWORD`, `PGPASSFILE`, `PGSSLMODE`, ... as libpq reads them) is the database."""


def _libpq_variables() -> list[str]:
    return [name for name in LIBPQ_VARIABLES if os.environ.get(name)]


def _say(args: argparse.Namespace, message: str, *, notable: bool) -> None:
    """One line on stderr about the database chosen: a log line for the worker (whose stderr is
    JSON lines), a plain line for a one-shot command."""
    if args.command == "run":
        logger.log(logging.WARNING if notable else logging.INFO, "%s", message)
    else:
        print(f"platform-ingest: {message}", file=sys.stderr)


def _dsn(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[str, bool]:
    """The DSN to connect with, and whether it is an embedded server started here: `--dsn` or
    `PLATFORM_INGEST_DSN`; else libpq's `PG*` variables (an empty conninfo); else the embedded
    server under `--data-dir`, said on stderr (and that it was just created, when it was)."""
    if args.dsn:
        return args.dsn, False
    variables = _libpq_variables()
    if variables:
        logger.info("no DSN given: connecting with libpq's %s", ", ".join(variables))
        return "", False
    from ..store.embedded import cluster_exists, embedded_postgres  # noqa: PLC0415 - no DSN only

    data_dir = args.data_dir.absolute()
    if cluster_exists(data_dir):
        _say(args, f"using the embedded Postgres in {display_path(data_dir)}", notable=False)
    else:
        _say(
            args,
            f"no database given (--dsn, PLATFORM_INGEST_DSN or PG* variables): creating a new "
            f"embedded Postgres in {display_path(data_dir)}",
            notable=True,
        )
    return stack.enter_context(embedded_postgres(data_dir)), True


@contextlib.contextmanager
def _database(args: argparse.Namespace) -> Iterator[Database]:
    """The command's database: the DSN's, libpq's, or an embedded server started (and stopped)
    here."""
    with contextlib.ExitStack() as stack:
        dsn, embedded = _dsn(args, stack)
        db = Database(dsn)
        stack.callback(db.close)
        if args.command != "migrate":
            if embedded:
                migrate(db)  # the embedded database is this command's own
            else:
                require_current(db)
        yield db


def _print_json(value: object) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


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


def _projections(args: argparse.Namespace) -> tuple[Projection, ...]:
    """The projections the command line names, loaded and checked before any database is
    touched (`ProjectionInvalid` is a usage error)."""
    return check_projections(load_projection(spec) for spec in getattr(args, "projections", []))


def _print_json_line(value: object) -> None:
    """One compact JSON object on one line (NDJSON: a report per book, each line whole)."""
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def _about(book_dir: str, error: Exception) -> str:
    """The error's text, led by the book's path unless the text already names it."""
    text, path = plain(str(error)), display_path(book_dir)
    return text if path in text else f"{path}: {text}"


def _sweep(db: Database, args: argparse.Namespace, projections: Sequence[Projection]) -> int:
    mode: Mode = "auto" if args.auto else "named"
    failed = 0
    if projections:
        install(db, projections)
    for book_dir in args.book_dirs:
        try:
            book = register_book(db, book_dir, args.roots)
            report = BookPass(db, book.book_id, mode=mode, projections=projections).run()
        except (ConfigError, NotFound) as error:
            print(f"platform-ingest: {_about(book_dir, error)}", file=sys.stderr)
            failed = max(failed, EXIT_USAGE)
            continue
        except IngestError as error:
            print(
                f"platform-ingest: {display_path(book_dir)}: the pass could not run: "
                f"{plain(str(error))}",
                file=sys.stderr,
            )
            failed = EXIT_FAILED
            continue
        if args.json:
            _print_json_line(
                {
                    "book_id": report.book_id,
                    "lines_read": report.lines_read,
                    "lines_applied": report.lines_applied,
                    "duplicates": report.duplicates,
                    "unverified_duplicates": report.unverified_duplicates,
                    "bytes_read": report.bytes_read,
                    "start_offset": report.start_offset,
                    "hint_discarded": report.hint_discarded,
                    "parked": report.parked,
                    "busy": report.busy,
                    "problems": [str(problem) for problem in report.problems],
                }
            )
        else:
            state = " (busy: another worker holds it)" if report.busy else ""
            print(
                f"{plain(report.book_id)}: {report.lines_applied} lines applied, "
                f"{report.duplicates} duplicates, {len(report.problems)} problems, "
                f"read {report.bytes_read} bytes from byte {report.start_offset}{state}"
            )
    return failed


def _follow_books(db: Database, args: argparse.Namespace) -> int:
    """`show --follow`: until SIGINT or SIGTERM (then exit 0)."""
    from ..operate.follow import follow  # noqa: PLC0415 - only this view needs it

    book_ids = [find_book(db, book_dir).book_id for book_dir in args.book_dirs] or None
    listener = Database(db.dsn, db.settings, application_name="platform-ingest show --follow")
    stopped = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopped
        stopped = True

    def write(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        follow(db, listener, book_ids, as_json=args.json, write=write, stopping=lambda: stopped)
    finally:
        listener.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK


def _worker(args: argparse.Namespace, projections: Sequence[Projection]) -> int:
    """`run`: the worker, until SIGTERM or SIGINT (then exit 0)."""
    # Imported here: the worker's modules (change notification, metrics) cost a one-shot command
    # such as `sweep` about 40 ms of start-up it has no use for.
    from ..worker.loop import Worker, WorkerSettings  # noqa: PLC0415

    with _database(args) as db:
        dsn = db.dsn
        db.close()
        worker = Worker(
            dsn,
            WorkerSettings(
                roots=args.roots,
                mode="auto" if args.auto else "named",
                survey_interval_s=args.safety_pass_s,
                membership_interval_s=args.membership_s,
                metrics_port=args.metrics_port,
                metrics_address=args.metrics_address,
                compact_quiet_s=None if args.no_compact else args.compact_quiet_s,
            ),
            worker_id=args.worker_id,
            projections=projections,
        )

        def stop(signum: int, _frame: object) -> None:
            worker.request_stop()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return worker.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _run(args: argparse.Namespace) -> int:
    projections = _projections(args)
    if args.command == "run":
        return _worker(args, projections)
    with _database(args) as db:
        if args.command == "migrate":
            before, after = migrate(db)
            print(
                f"schema version {before} -> {after}"
                if before != after
                else f"schema version {after}: nothing to do"
            )
            return EXIT_OK
        if args.command == "sweep":
            return _sweep(db, args, projections)
        return _other_command(db, args, projections)


def _other_command(
    db: Database, args: argparse.Namespace, projections: Sequence[Projection]
) -> int:
    """Every command but `migrate`, `sweep` and `run`. Each imports its modules in its own branch
    (`noqa: PLC0415`): at the top of this file they cost every `sweep` start-up."""
    if args.command == "name":
        from ..operate.naming import name_stream  # noqa: PLC0415

        named = name_stream(db, args.book_dir, args.engine_run_id, new_run=args.new_run)
        verb = "named" if named.created else "already named"
        print(f"stream {named.engine_run_id} {verb} for run {named.run_id}")
        return EXIT_OK
    if args.command == "show" and args.follow:
        return _follow_books(db, args)
    if args.command == "show":
        from ..operate.show import render_text, show_state  # noqa: PLC0415

        state = show_state(db, args.book_dirs)
        if args.json:
            _print_json(state)
        else:
            print(render_text(state))
        return EXIT_OK
    if args.command == "release":
        from ..operate.naming import release_attempt  # noqa: PLC0415

        state_after = release_attempt(
            db, args.book_dir, args.engine_run_id, by=args.by, reason=args.reason
        )
        print(f"stream {plain(args.engine_run_id)} released: {state_after}")
        return EXIT_OK
    if args.command in ("exited", "skip", "disown", "undisown", "abandon"):
        return _remedy(db, args)
    if args.command == "rebuild":
        from ..ingest.rebuild import rebuild  # noqa: PLC0415

        book_ids = [find_book(db, book_dir).book_id for book_dir in args.book_dirs] or None
        incomplete = False
        for projection in projections:
            report = rebuild(db, projection, book_ids, batch_events=args.batch_events)
            _print_json(report.as_json())
            incomplete = incomplete or bool(report.cannot_replay)
        return EXIT_NOT_REPLAYABLE if incomplete else EXIT_OK
    if args.command == "compact":
        from ..operate.compact import compact_quiet  # noqa: PLC0415

        _print_json(compact_quiet(db, quiet_for_s=args.quiet_for_s, limit=args.limit).as_json())
        return EXIT_OK
    if args.command == "prune":
        from ..operate.prune import prune_runs  # noqa: PLC0415

        pruned = prune_runs(
            db,
            older_than_s=args.older_than_s,
            dry_run=args.dry_run,
            limit=args.limit,
            by=args.by,
            reason=args.reason,
        )
        _print_json(pruned.as_json())
        return EXIT_OK
    if args.command == "repair":
        from ..operate.repair import repair_book  # noqa: PLC0415

        repaired = repair_book(
            db,
            args.book_dir,
            status_command=args.status_command,
            timeout_s=args.status_timeout_s,
            by=args.by,
            reason=args.reason,
        )
        _print_json(repaired.as_json())
        return EXIT_OK
    raise ConfigError(f"unknown command {args.command!r}")


def _remedy(db: Database, args: argparse.Namespace) -> int:
    """`exited`, `skip`, `disown`, `undisown` and `abandon`: each prints the action it
    recorded."""
    from ..operate.remedies import (  # noqa: PLC0415 - see `_other_command`
        abandon_attempt,
        disown_stream,
        report_exit,
        skip_line,
        undisown_stream,
    )

    if args.command == "exited":
        _print_json(
            report_exit(
                db,
                args.book_dir,
                args.engine_run_id,
                args.exit_status,
                by=args.by,
                reason=args.reason,
            ).as_json()
        )
        return EXIT_OK
    if args.command == "skip":
        action = skip_line(
            db,
            args.book_dir,
            args.engine_run_id,
            args.seq,
            sha256=args.sha256,
            reason=args.reason,
            by=args.by,
        )
        _print_json(action.as_json())
        if args.sha256 is None:
            print(
                "platform-ingest: nothing skipped: check the line, then give its sha256 "
                "with --sha256",
                file=sys.stderr,
            )
            return EXIT_USAGE
        return EXIT_OK
    remedy = {
        "disown": disown_stream,
        "undisown": undisown_stream,
        "abandon": abandon_attempt,
    }[args.command]
    action = remedy(db, args.book_dir, args.engine_run_id, reason=args.reason, by=args.by)
    _print_json(action.as_json())
    return EXIT_OK


COLLECTOR_THRESHOLDS = (50_000, 20, 10)
"""The cyclic garbage collector's thresholds in a `platform-ingest` process (docs/performance.md).
A batch keeps up to 20,000 lines' decoded values alive until it commits (all of them when
projections are given the lines); at the default young threshold of 700 allocations the collector
scans those live objects again and again, which cost a pass with a projection about a third of
its time. The applied values hold no reference cycles, so collecting less often frees the same."""


SWITCH_INTERVAL_S = 0.0005
"""How long a thread that wants the interpreter's lock waits before the running thread is asked to
give it up, in a `platform-ingest` process (the interpreter's default is 5 ms; docs/performance.md).
A pass decides on its thread while its writer thread talks to Postgres; every time the writer
waits for the socket it gives the lock up, and it gets it back only when the pass's thread is asked
to let go. At 5 ms a wait, a batch's COPY (a socket wait every few tens of kilobytes) took three
to four times as long as on an idle interpreter, and the writer, not the pass, set the pace."""


def _tune_interpreter() -> None:
    """The objects of the imported modules live as long as the process: frozen out of every
    collection (`gc.freeze`), and the collector runs less often (`COLLECTOR_THRESHOLDS`). A
    thread waiting for the interpreter's lock gets it sooner (`SWITCH_INTERVAL_S`)."""
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _tune_interpreter()
    worker = args.command == "run"
    configure_logs(
        chosen_level(args, "INFO" if worker else "WARNING"),
        args.log_format or ("json" if worker else "text"),
    )
    try:
        return _run(args)
    except EngineLive as error:
        print(f"platform-ingest: repair refused: {plain(str(error))}", file=sys.stderr)
        return EXIT_ENGINE_LIVE
    except (ConfigError, NotFound) as error:
        print(f"platform-ingest: {plain(str(error))}", file=sys.stderr)
        return EXIT_USAGE
    except IngestError as error:
        print(f"platform-ingest: {plain(str(error))}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
