"""`migrate` and `sweep`: what a one-shot pass needs, and nothing of the other commands."""

from __future__ import annotations

import argparse
import logging
import sys

from .._plain import counted, display_path, plain
from ..errors import ConfigError, DatabaseUnavailable, IngestError, NotFound
from ..ingest.book_pass import BookPass, Mode
from ..ingest.books import book_ref, register_book, unnamed_streams
from ..ingest.projection_step import install, projections_behind
from ..projections import Projection, check_projections, load_projection
from ..store.schema import migrate as migrate_schema
from .database import open_database
from .exit_status import Exit
from .output import about, print_json_line

logger = logging.getLogger("platform_ingest")


def load_projections(args: argparse.Namespace) -> tuple[Projection, ...]:
    """The projections the command line names, loaded and checked before any database is
    touched (`ProjectionInvalid` is a usage error)."""
    return check_projections(load_projection(spec) for spec in args.projections)


def migrate(args: argparse.Namespace) -> int:
    """The schema brought to this version, then each projection named set up (`--projection`):
    the owner role's work, so that the worker role needs no privilege to create tables."""
    projections = load_projections(args)
    with open_database(args) as db:
        before, after = migrate_schema(db)
        print(
            f"schema version {before} -> {after}"
            if before != after
            else f"schema version {after}: nothing to do"
        )
        install(db, projections)
        for projection in projections:
            print(f"projection {projection.name} version {projection.version}: set up")
    return Exit.OK


def sweep(args: argparse.Namespace) -> int:
    """One pass over each book; the worst exit status of the books. A database that is away or
    takes no writes stops the sweep at once (exit 1): it is no book's problem, and every book
    after would meet it too."""
    projections = load_projections(args)
    mode: Mode = "auto" if args.auto else "named"
    failed = Exit.OK
    swept: list[str] = []
    with open_database(args) as db:
        if projections:
            install(db, projections)
        for done, book_dir in enumerate(args.book_dirs):
            try:
                book = register_book(db, book_dir, args.roots)
                report = BookPass(db, book.book_id, mode=mode, projections=projections).run()
            except (ConfigError, NotFound) as error:
                print(f"platform-ingest: {about(book_dir, error)}", file=sys.stderr)
                failed = max(failed, Exit.USAGE)
                continue
            except DatabaseUnavailable as error:
                left = len(args.book_dirs) - done
                print(
                    f"platform-ingest: the sweep stops, {left} of "
                    f"{counted(len(args.book_dirs), 'book')} "
                    f"not passed: {plain(str(error))}",
                    file=sys.stderr,
                )
                return Exit.FAILED
            except IngestError as error:
                print(
                    f"platform-ingest: {display_path(book_dir)}: the pass could not run: "
                    f"{plain(str(error))}",
                    file=sys.stderr,
                )
                failed = Exit.FAILED
                continue
            unnamed = [] if mode == "auto" else unnamed_streams(db, book.book_id)
            for engine_run_id, offset in unnamed:
                logger.warning(
                    "book %s: stream %s is waiting to be named (its hello at byte %d); nothing of"
                    " it is applied: run `platform-ingest name BOOK_DIR %s`, or sweep with --auto",
                    book_ref(book.book_id),
                    plain(engine_run_id),
                    offset,
                    plain(engine_run_id),
                )
            swept.append(book.book_id)
            if args.json:
                print_json_line(
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
                        "waiting_to_be_named": [engine_run_id for engine_run_id, _ in unnamed],
                    }
                )
            else:
                state = " (busy: another worker holds it)" if report.busy else ""
                print(
                    f"{plain(report.book_id)}: {counted(report.lines_applied, 'line')} applied, "
                    f"{counted(report.duplicates, 'duplicate')}, "
                    f"{counted(len(report.problems), 'problem')}, "
                    f"read {counted(report.bytes_read, 'byte')} from byte {report.start_offset}"
                    f"{state}"
                )
        names = [projection.name for projection in projections]
        for name, behind in projections_behind(db, swept, names).items():
            if behind:
                logger.warning(
                    "projection %s is %s behind these books' cursors (a pass applies only"
                    " new lines): run `platform-ingest rebuild --projection %s`",
                    name,
                    counted(behind, "line"),
                    name,
                )
    return failed
