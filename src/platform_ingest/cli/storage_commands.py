"""The commands on stored state as a whole: `rebuild` (a projection caught up from the journals),
`compact` (quiet attempts' line hashes into one digest) and `prune` (old ended runs deleted,
audited). Each prints its report as JSON."""

from __future__ import annotations

import argparse

from ..ingest.books import find_book
from ..ingest.rebuild import rebuild as rebuild_projection
from ..operate.compact import compact_quiet
from ..operate.prune import prune_runs
from .database import open_database
from .exit_status import Exit
from .ingest_commands import load_projections
from .output import print_json


def rebuild(args: argparse.Namespace) -> int:
    """Exit 4 (`NOT_REPLAYABLE`) when some seqs could not be replayed, each in the report."""
    projections = load_projections(args)
    incomplete = False
    with open_database(args) as db:
        book_ids = [find_book(db, book_dir).book_id for book_dir in args.book_dirs] or None
        for projection in projections:
            report = rebuild_projection(db, projection, book_ids, batch_events=args.batch_events)
            print_json(report.as_json())
            incomplete = incomplete or bool(report.cannot_replay)
    return Exit.NOT_REPLAYABLE if incomplete else Exit.OK


def compact(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        report = compact_quiet(db, quiet_for_s=args.quiet_for_s, limit=args.limit)
    print_json(report.as_json())
    return Exit.OK


def prune(args: argparse.Namespace) -> int:
    with open_database(args) as db:
        pruned = prune_runs(
            db,
            older_than_s=args.older_than_s,
            dry_run=args.dry_run,
            limit=args.limit,
            by=args.by,
            reason=args.reason,
        )
    print_json(pruned.as_json())
    return Exit.OK
