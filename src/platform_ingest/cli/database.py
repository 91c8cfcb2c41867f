"""The database a command uses: `--dsn` or `PLATFORM_INGEST_DSN`; else libpq's `PG*` variables;
else an embedded server under `--data-dir`, started (and stopped) by the command, which says on
stderr which directory it uses (docs/platform/cli.md). A command that only reads never creates
one: with no cluster there, it is refused (exit 2) and says where it looked."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from .._plain import display_path
from ..errors import ConfigError
from ..store.db import Database
from ..store.schema import migrate, require_current

logger = logging.getLogger("platform_ingest")

LIBPQ_VARIABLES = ("PGSERVICE", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER")
"""libpq's variables that name a server: with one of them set and no DSN, libpq's environment
(with `PGPASSWORD`, `PGPASSFILE`, `PGSSLMODE`, ... as libpq reads them) is the database."""


READ_ONLY_COMMANDS = frozenset({"show"})
"""The commands that only read (with `show --follow`, and `prune --dry-run`: `only_reads`)."""


def _libpq_variables() -> list[str]:
    return [name for name in LIBPQ_VARIABLES if os.environ.get(name)]


def only_reads(args: argparse.Namespace) -> bool:
    """Whether the command only reads the database: it never creates an embedded one."""
    return args.command in READ_ONLY_COMMANDS or (args.command == "prune" and args.dry_run)


def _say(args: argparse.Namespace, message: str, *, notable: bool) -> None:
    """One line on stderr about the database chosen: a log line for the worker (whose stderr is
    JSON lines), a plain line for a one-shot command."""
    if args.command == "run":
        logger.log(logging.WARNING if notable else logging.INFO, "%s", message)
    else:
        print(f"platform-ingest: {message}", file=sys.stderr)


def _dsn(args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[str, bool]:
    """The DSN to connect with, and whether it is an embedded server started here."""
    if args.dsn:
        return args.dsn, False
    variables = _libpq_variables()
    if variables:
        logger.info("no DSN given: connecting with libpq's %s", ", ".join(variables))
        return "", False
    from ..store.embedded import (  # noqa: PLC0415 - no DSN only
        cluster_exists,
        embedded_postgres,
        require_installed,
    )

    require_installed()  # a host without the `embedded` extra hears that, and nothing else
    data_dir = args.data_dir.absolute()
    if cluster_exists(data_dir):
        _say(args, f"using the embedded Postgres in {display_path(data_dir)}", notable=False)
    elif only_reads(args):
        # A new, empty cluster would show no books, as if the platform had lost them: the reader
        # was run from another directory than the first run, or was meant for another database.
        raise ConfigError(
            f"no database given (--dsn, PLATFORM_INGEST_DSN or PG* variables) and no embedded "
            f"Postgres in {display_path(data_dir)}: `{args.command}` only reads, and creates none; "
            "give the database's DSN, or with --data-dir the directory where the first "
            "`migrate`, `sweep` or `run` created the embedded one"
        )
    else:
        _say(
            args,
            f"no database given (--dsn, PLATFORM_INGEST_DSN or PG* variables): creating a new "
            f"embedded Postgres in {display_path(data_dir)}",
            notable=True,
        )
    return stack.enter_context(embedded_postgres(data_dir)), True


@contextlib.contextmanager
def open_database(args: argparse.Namespace) -> Iterator[Database]:
    """The command's database: the DSN's, libpq's, or an embedded server started (and stopped)
    here. Its schema must be current (the embedded one is migrated: it is this command's own),
    except for `migrate`, and for `run`, whose worker checks it once Postgres answers: a worker
    started while Postgres cannot be reached waits for it (docs/platform/workers.md)."""
    with contextlib.ExitStack() as stack:
        dsn, embedded = _dsn(args, stack)
        db = Database(dsn)
        stack.callback(db.close)
        if embedded and args.command != "migrate":
            migrate(db)
        elif args.command not in ("migrate", "run"):
            require_current(db)
        yield db
