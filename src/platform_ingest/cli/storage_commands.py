"""The commands on stored state as a whole: `rebuild` (a projection caught up from the journals),
`compact` (quiet attempts' line hashes into one digest), `prune` (old ended runs deleted,
audited) and `scrub` (the applied lines read again and compared with what was applied). Each
prints its report as text, or as JSON with `--json` (`scrub`: one object a book, NDJSON), and
shows its progress on stderr when that is a terminal (`progress`)."""

from __future__ import annotations

import argparse

from .._plain import counted, plain
from ..ingest.books import find_book
from ..ingest.rebuild import RebuildReport
from ..ingest.rebuild import rebuild as rebuild_projection
from ..operate.compact import CompactionReport, compact_quiet
from ..operate.prune import PruneReport, prune_runs
from ..operate.scrub import ScrubReport, scrub_book
from .database import open_database
from .exit_status import Exit
from .ingest_commands import load_projections
from .output import print_json, print_json_line
from .progress import progress_line


def rebuild(args: argparse.Namespace) -> int:
    """Exit 4 (`NOT_REPLAYABLE`) when some seqs could not be replayed, each in the report."""
    projections = load_projections(args)
    incomplete = False
    with open_database(args) as db:
        book_ids = [find_book(db, book_dir).book_id for book_dir in args.book_dirs] or None
        of = "" if book_ids is None else f" of {len(book_ids)}"
        for projection in projections:
            with progress_line() as line:

                def show(report: RebuildReport) -> None:
                    line.update(
                        f"rebuild {report.projection}: book {report.books}{of}, "
                        f"{counted(report.events_given, 'event')} given"
                    )

                report = rebuild_projection(
                    db, projection, book_ids, batch_events=args.batch_events, progress=show
                )
            if args.json:
                print_json(report.as_json())
            else:
                print(rebuild_text(report))
            incomplete = incomplete or bool(report.cannot_replay)
    return Exit.NOT_REPLAYABLE if incomplete else Exit.OK


def rebuild_text(report: RebuildReport) -> str:
    reset = "" if report.reset_from is None else f" (version {report.reset_from} reset)"
    lines = [
        f"projection {plain(report.projection)} version {report.version}{reset}: "
        f"{counted(report.books, 'book')}, {counted(report.streams_caught_up, 'stream')} caught "
        f"up, {counted(report.events_given, 'event')} given"
    ]
    lines.extend(
        f"  cannot replay book {plain(each.book_id)} stream {plain(each.engine_run_id)} seqs "
        f"{each.first_seq}..{each.last_seq}: {each.reason}: {plain(each.detail)}"
        for each in report.cannot_replay
    )
    return "\n".join(lines)


def compact(args: argparse.Namespace) -> int:
    with open_database(args) as db, progress_line() as line:
        report = compact_quiet(
            db,
            quiet_for_s=args.quiet_for_s,
            limit=args.limit,
            progress=lambda number, of: line.update(f"compact: attempt {number} of {of}"),
        )
    if args.json:
        print_json(report.as_json())
    else:
        print(compact_text(report))
    return Exit.OK


def compact_text(report: CompactionReport) -> str:
    ids = f" ({', '.join(map(str, report.compacted))})" if report.compacted else ""
    lines = [
        f"{counted(len(report.compacted), 'attempt')} compacted{ids}, "
        f"{counted(report.rows_deleted, 'line hash row')} deleted"
    ]
    # Each attempt compacted now had its rows deleted too: only what an earlier compaction
    # (cut short) left is news.
    left_before = [each for each in report.finished_deleting if each not in report.compacted]
    if left_before:
        lines.append(
            "  finished deleting the rows an earlier compaction left of attempts "
            + ", ".join(map(str, left_before))
        )
    lines.extend(
        f"  attempt {attempt_id} skipped: {why}" for attempt_id, why in report.skipped.items()
    )
    return "\n".join(lines)


def prune(args: argparse.Namespace) -> int:
    with open_database(args) as db, progress_line() as line:
        pruned = prune_runs(
            db,
            older_than_s=args.older_than_s,
            dry_run=args.dry_run,
            limit=args.limit,
            by=args.by,
            reason=args.reason,
            progress=lambda number, of: line.update(f"prune: run {number} of {of}"),
        )
    if args.json:
        print_json(pruned.as_json())
    else:
        print(prune_text(pruned))
    return Exit.OK


def prune_text(report: PruneReport) -> str:
    if report.dry_run:
        lines = [
            f"dry run: {counted(len(report.pruned), 'run')} would be pruned (nothing changed)",
            *(f"  book {plain(run['book_id'])} run {run['run_id']}" for run in report.pruned),
        ]
    else:
        lines = [
            f"{counted(len(report.pruned), 'run')} pruned, {len(report.skipped)} skipped, "
            f"{counted(report.cleaned, 'pruned attempt')} cleaned up",
            *(
                f"  book {plain(run['book_id'])} run {run['run_id']}: {run['state']}, "
                f"{counted(len(run['streams']), 'stream')}"
                for run in report.pruned
            ),
        ]
    lines.extend(f"  run {run_id} skipped: {plain(why)}" for run_id, why in report.skipped.items())
    return "\n".join(lines)


def scrub(args: argparse.Namespace) -> int:
    """Exit 6 (`MISMATCH`) when a book's journal no longer holds an applied line as it was;
    else 1 when a book could not be read (no journal while lines were applied, or held by a pass
    for `--busy-wait-s`); else 0."""
    worst = Exit.OK
    with open_database(args) as db:
        books = [find_book(db, book_dir) for book_dir in args.book_dirs]
        for number, book in enumerate(books, 1):
            with progress_line() as line:
                line.update(f"scrub: book {number} of {len(books)}")
                report = scrub_book(db, book.book_id, busy_wait_s=args.busy_wait_s)
            if args.json:
                print_json_line(report.as_json())
            else:
                print(scrub_text(report))
            if report.outcome == "mismatch":
                worst = Exit.MISMATCH
            elif report.outcome in ("busy", "unread") and worst == Exit.OK:
                worst = Exit.FAILED
    return worst


def scrub_text(report: ScrubReport) -> str:
    book = plain(report.book_id)
    if report.outcome in ("busy", "unread"):
        return f"book {book}: not scrubbed ({report.outcome}): {plain(report.reason or '')}"
    lines = [
        f"book {book}: {report.outcome}: {counted(report.streams, 'stream')}, "
        f"{counted(report.bytes_read, 'byte')} read, {counted(report.lines_compared, 'line')} "
        f"compared, {counted(report.ranges_compared, 'compacted range')} compared by digest"
        + (f", {report.unverified} unverified" if report.unverified else "")
    ]
    for mismatch in report.mismatches:
        problem = mismatch.problem
        where = "" if problem.offset is None else f", byte {problem.offset}"
        outcome = "quarantined" if mismatch.recorded else f"not recorded: it is {mismatch.state}"
        lines.append(
            f"  stream {plain(mismatch.engine_run_id)} seq {problem.seq}{where}: {problem.kind} "
            f"({outcome}): {plain(problem.detail)}"
        )
    return "\n".join(lines)
