"""`platform-ingest`: the platform side's command (docs/platform/cli.md).

    platform-ingest [--dsn DSN] [--data-dir DIR] [-v | -q | --log-level LEVEL]
                    [--log-format text|json] COMMAND ...

    migrate                                  bring the schema to this version
    sweep BOOK_DIR... [--auto] [--root DIR]  one pass over each book, then exit
    run ROOT... [--auto] [--metrics-port P]  the worker: every book under the roots, until SIGTERM
    name BOOK_DIR ENGINE_RUN_ID [--new-run]  name a stream for the book's current (or a new) run
    show [BOOK_DIR...] [--json] [--follow]   state of books, runs, attempts (--follow: live)
    release BOOK_DIR [ENGINE_RUN_ID]         lift a quarantine, stall or refusal after looking
                                             (no stream: the book's own error)
    forget BOOK_DIR --reason TEXT            delete a book registered by mistake (audited)
    repair BOOK_DIR [--status-command CMD]   settle a stopped run through the engine's status
    exited BOOK_DIR ENGINE_RUN_ID STATUS     the launcher reports a process's exit status
    skip BOOK_DIR ENGINE_RUN_ID SEQ --sha256 HEX --reason TEXT   pass one quarantined line
    disown BOOK_DIR ENGINE_RUN_ID --reason TEXT    a foreign stream is not ours
    undisown BOOK_DIR ENGINE_RUN_ID --reason TEXT  take a disown back: the stream is foreign again
    abandon BOOK_DIR ENGINE_RUN_ID --reason TEXT   give up on an attempt
    rebuild --projection SPEC [BOOK_DIR...]  catch a projection up from the journals on disk
    compact [--quiet-for-s S]                compact the line hashes of quiet attempts now
    prune --older-than-s S [--dry-run]       delete old ended runs (audited)
    completion bash|zsh                      print a completion script made from this parser

The global options may follow the command too (`show --dsn DSN`); given on both sides, the one
after it wins. `sweep`, `show`, `rebuild`, `compact` and `prune` print text, their JSON with
`--json`; `rebuild`, `compact` and `prune` show their progress on stderr when it is a terminal.

Logs go to stderr, every time in UTC with milliseconds and a `Z`: JSON lines at INFO and above for
`run`, text at WARNING and above for the other commands; `-v`/`-q` move the level a step, or
`--log-level` names it, and `--log-format` chooses the style (the same options as `engine-events`).

Every remedy and report is audited (`--by`, `--reason`) and shown by `show --json`.

The database: `--dsn` or `PLATFORM_INGEST_DSN`; with neither, libpq's `PG*` variables when one
that names a server is set (`PGSERVICE`, `PGHOST`, `PGDATABASE`, ...); with none of these, an
embedded Postgres under `--data-dir` (default `.platform-ingest/`, relative to the current
directory) is started, migrated and stopped by the command, which says on stderr which directory
it uses and when it has just created it. A command that only reads (`show`, `prune --dry-run`)
never creates one: with none there it exits 2 and says where it looked.

Exit codes: 0 done (a book that ends quarantined or stalled is state, not a failure of `sweep`);
1 the command could not do its work (database unavailable, a pass that could not finish);
2 bad usage or input (unknown book, path outside the roots, a refused operation, a reader given
no database, a login Postgres refused: a wrong password, an unknown role);
3 `repair` refused because the engine is live; 4 `rebuild` caught up all it could, and some seqs
cannot be replayed (each listed in its report); 5 `scrub` found an applied line the journal no
longer holds as it was (each listed in its report).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Callable, Sequence

from .._logs import chosen_level
from .._logs import configure as configure_logs
from .._plain import plain
from ..errors import (
    ConfigError,
    DatabaseAuthenticationFailed,
    EngineLive,
    IngestError,
    NotFound,
)
from .exit_status import Exit
from .parser import TUNED_COMMANDS, build_parser

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


def tune_interpreter() -> None:
    """The objects of the imported modules live as long as the process: frozen out of every
    collection (`gc.freeze`), and the collector runs less often (`COLLECTOR_THRESHOLDS`). A
    thread waiting for the interpreter's lock gets it sooner (`SWITCH_INTERVAL_S`)."""
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def _handler(args: argparse.Namespace) -> Callable[[argparse.Namespace], int]:
    """The function that runs the command (`parser.HANDLERS`), its module imported now."""
    module, _, function = args.handler.partition(":")
    handler: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f"{__package__}.{module}"), function
    )
    return handler


def _run(args: argparse.Namespace) -> int:
    return _handler(args)(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in TUNED_COMMANDS:
        tune_interpreter()
    worker = args.command == "run"
    configure_logs(
        chosen_level(args, "INFO" if worker else "WARNING"),
        args.log_format or ("json" if worker else "text"),
    )
    try:
        return int(_run(args))
    except EngineLive as error:
        print(f"platform-ingest: repair refused: {plain(str(error))}", file=sys.stderr)
        return Exit.ENGINE_LIVE
    except (ConfigError, NotFound, DatabaseAuthenticationFailed) as error:
        print(f"platform-ingest: {plain(str(error))}", file=sys.stderr)
        return Exit.USAGE
    except IngestError as error:
        print(f"platform-ingest: {plain(str(error))}", file=sys.stderr)
        return Exit.FAILED


if __name__ == "__main__":
    sys.exit(main())
