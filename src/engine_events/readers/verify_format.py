"""`verify`'s formatting: a `JournalReport` as the short text or the JSON the command prints.

The shapes are told in `verify` (the command); the checker is `verify_rules`.
"""

from __future__ import annotations

import os
import sys

import orjson

from .verify_rules import JournalReport, Problem


def format_text(report: JournalReport) -> str:
    """The short human summary that `verify` prints without `--json`."""
    streams = len(report.streams)
    head = (
        f"{report.path}: {'OK' if report.ok else 'PROBLEMS FOUND'} — {streams} "
        f"stream{'s' if streams != 1 else ''}, {report.lines} line{'s' * (report.lines != 1)}, "
        f"{report.size_bytes} bytes"
    )
    out = [head]
    for problem in report.orphans:
        count = f"{report.orphan_lines} line{'s' if report.orphan_lines != 1 else ''}"
        out.append(f"  before any hello ({count}): {_describe(problem)}")
    for stream in report.streams:
        counts = (
            f"last seq {stream.last_seq}, {stream.lines} line{'s' * (stream.lines != 1)}, "
            f"{stream.duplicates} duplicate{'s' * (stream.duplicates != 1)}"
        )
        if stream.problem is None:
            out.append(f"  {stream.engine_run_id}: ok — {counts}")
        else:
            out.append(f"  {stream.engine_run_id}: {_describe(stream.problem)} ({counts})")
    for stream in report.streams:
        if stream.ignored_keys:
            out.append(
                f"  note: {stream.engine_run_id} is a stream {stream.stream_version}, newer than "
                f"this reader knows; envelope keys ignored: {', '.join(stream.ignored_keys)}"
            )
    if report.torn_tail is not None:
        tail = report.torn_tail
        out.append(
            f"  note: unterminated last line at byte {tail.offset} ({tail.size_bytes} bytes): "
            "crash residue or a line still being written; not judged"
        )
    return "\n".join(out)


def _describe(problem: Problem) -> str:
    seq = "no seq" if problem.seq is None else f"seq {problem.seq}"
    return (
        f"{problem.verdict} at line {problem.line} (byte {problem.offset}, {seq}): {problem.detail}"
    )


def format_json(report: JournalReport) -> str:
    """The JSON object that `verify --json` prints."""
    return orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode()


def format_failure_json(path: str, kind: str, detail: str) -> str:
    """The JSON object that `verify --json` prints when the journal cannot be read."""
    failure = {"ok": False, "path": path, "error": kind, "detail": detail}
    return orjson.dumps(failure, option=orjson.OPT_INDENT_2).decode()


def print_output(text: str) -> None:
    """Print `text` on stdout; a reader that went away (`verify J | head -1`) is no error.

    As Python's documentation on SIGPIPE recommends: stdout is pointed at devnull, so that the
    flush at exit does not fail again, and the command ends with its own exit code.
    """
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
