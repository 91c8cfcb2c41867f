"""The operator's commands on books and streams: `name`, `show` (and `show --follow`),
`release`, the remedies (`exited`, `skip`, `disown`, `undisown`, `abandon`) and `repair`. Each
prints what it did; every remedy is audited (`--by`, `--reason`)."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable

from ..errors import ConfigError
from ..ingest.books import find_book
from ..operate.follow import follow
from ..operate.forget import forget_book
from ..operate.naming import name_stream, release_book_error, release_stream
from ..operate.remedies import (
    Action,
    abandon_attempt,
    disown_stream,
    report_exit,
    skip_line,
    undisown_stream,
)
from ..operate.repair import repair_book, require_status_command
from ..operate.show import book_of_ref, render_text, select_books, show_books, show_state
from ..store.db import Database
from .database import open_database
from .exit_status import Exit
from .output import print_json


def name(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        named = name_stream(db, args.book_dir, args.engine_run_id, new_run=args.new_run)
    verb = "named" if named.created else "already named"
    print(f"stream {named.engine_run_id} {verb} for run {named.run_id}")
    return Exit.OK


def show(args: argparse.Namespace) -> int:
    filtered = args.state or args.problem or args.lagging or args.limit or args.ref
    if args.ref is not None and args.book_dirs:
        raise ConfigError("--ref names the book: no BOOK_DIR with it")
    if args.follow and filtered:
        raise ConfigError(
            "--follow shows the books it is given: no --state, --problem, "
            "--lagging, --limit or --ref with it"
        )
    with open_database(args) as db:
        if args.follow:
            return _follow_books(db, args)
        if args.ref is not None:
            state = {"books": show_books(db, [book_of_ref(db, args.ref)])}
        else:
            state = show_state(db, args.book_dirs)
    state = select_books(
        state,
        states=args.state or (),
        problems=args.problem or (),
        lagging=args.lagging,
        limit=args.limit,
    )
    if args.json:
        print_json(state)
    else:
        print(render_text(state, filtered=bool(filtered)))
    return Exit.OK


def _follow_books(db: Database, args: argparse.Namespace) -> int:
    """`show --follow`: until SIGINT or SIGTERM (then exit 0)."""
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
    return Exit.OK


def release(args: argparse.Namespace) -> int:
    """Prints what it did as JSON, like the other remedies."""
    with open_database(args) as db:
        if args.engine_run_id is None:
            action = release_book_error(db, args.book_dir, by=args.by, reason=args.reason)
        else:
            action = release_stream(
                db, args.book_dir, args.engine_run_id, by=args.by, reason=args.reason
            )
    print_json(action.as_json())
    return Exit.OK


def forget(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        forgotten = forget_book(db, args.book_dir, by=args.by, reason=args.reason)
    print_json(forgotten.as_json())
    return Exit.OK


def exited(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        action = report_exit(
            db, args.book_dir, args.engine_run_id, args.exit_status, by=args.by, reason=args.reason
        )
    print_json(action.as_json())
    return Exit.OK


def skip(args: argparse.Namespace) -> int:
    """Without `--sha256` nothing changes: the line's hash is printed, and the status is 2."""
    with open_database(args) as db:
        action = skip_line(
            db,
            args.book_dir,
            args.engine_run_id,
            args.seq,
            sha256=args.sha256,
            reason=args.reason,
            by=args.by,
        )
    print_json(action.as_json())
    if args.sha256 is None:
        print(
            "platform-ingest: nothing skipped, nothing recorded: check the line, then give its"
            " sha256 with --sha256",
            file=sys.stderr,
        )
        return Exit.USAGE
    return Exit.OK


def disown(args: argparse.Namespace) -> int:
    return _on_stream(args, disown_stream)


def undisown(args: argparse.Namespace) -> int:
    return _on_stream(args, undisown_stream)


def abandon(args: argparse.Namespace) -> int:
    return _on_stream(args, abandon_attempt)


def _on_stream(args: argparse.Namespace, remedy: Callable[..., Action]) -> int:
    """A remedy on one stream that takes only the audit's words (`--by`, `--reason`)."""
    with open_database(args) as db:
        action = remedy(db, args.book_dir, args.engine_run_id, reason=args.reason, by=args.by)
    print_json(action.as_json())
    return Exit.OK


def repair(args: argparse.Namespace) -> int:
    require_status_command(
        args.status_command
    )  # no database is opened for a repair that cannot run
    with open_database(args) as db:
        repaired = repair_book(
            db,
            args.book_dir,
            status_command=args.status_command,
            timeout_s=args.status_timeout_s,
            by=args.by,
            reason=args.reason,
        )
    print_json(repaired.as_json())
    return Exit.OK
