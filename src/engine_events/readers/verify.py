"""`engine-events verify JOURNAL [--json]`: the journal's fsck.

The journal is read once, front to back, one line at a time: no more than one line (at most
`LINE_BYTES_MAX` bytes) is held in memory, whatever the size of the file. Lines are split into
streams by their `hello` (its `engine_run_id`); every other line belongs to the stream of the latest
`hello` above it. A readable hello that is refused (docs/reference/stream-format.md, "A hello that
starts its stream") starts its stream too, and is that stream's first problem. Each stream must

- start with a `hello` of seq 1 whose major version is 1 (else `unsupported_version`),
- be dense: the next new seq is always the last one plus one (else `gap`),
- repeat only byte-identical lines, for ANY earlier seq (else `payload_conflict`),
- consist of lines that parse and respect the types and money rules of `decode` (else `malformed`),
- end at its `finished`: a new seq after it is `malformed` (a byte-identical repeat of an earlier
  line is still only a duplicate).

The FIRST problem of each stream is reported with its 1-based line number, the byte offset where the
line starts and its seq (null when the line has none); the stream's later lines are counted but not
judged. Lines before any `hello` belong to no stream: the first of them is reported in `orphans`.
An unterminated last line is crash residue or a line a live writer has not finished: it is a note
(`torn_tail`), never a failure. Unlike the platform's tailer, which stops a stream at its first
problem, verify reads to the end and reports every stream.

Recognising a repeat needs the digest of every accepted line. Those are kept by `_DigestStore`: 32
bytes per line, in a small memory buffer that spills to an anonymous temporary file, so memory does
not grow with the journal.

`command` exits 0 when all is well, 1 when a problem was found, 2 when the file cannot be read. The
path must name a regular file: a FIFO, a socket, a device or a directory is refused before any read
(a FIFO could block forever, a device never end). Output cut short by its reader (`verify J | head
-1`) ends quietly, with the verdict's exit code.
It is three modules: `lines` reads the lines (shared with `watch`), `verify_rules` applies the
rules above and builds the report, `verify_format` prints it. With `--json` it prints:

    {"ok": bool, "path": str, "lines": int, "bytes": int,
     "torn_tail": null | {"offset": int, "bytes": int},
     "streams": [{"engine_run_id": str, "verdict": "ok" | "gap" | "payload_conflict" | "malformed"
                  | "unsupported_version", "last_seq": int, "lines": int, "duplicates": int,
                  "problem": null | {"line": int, "offset": int, "seq": int | null, "detail": str}}],
     "orphans": [{"verdict": "malformed", "line", "offset", "seq", "detail"}]}

and, when the file cannot be read, `{"ok": false, "path", "error": "unreadable", "detail"}`, or
`"error": "not_a_regular_file"` when the path names something other than a regular file.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import NotARegularFile
from .plain import plain
from .verify_format import format_failure_json, format_json, format_text, print_output
from .verify_rules import (
    DIGEST_BUFFER_BYTES_MAX,
    DIGEST_BYTES,
    JournalReport,
    Problem,
    StreamReport,
    TornTail,
    Verdict,
    verify_journal,
)

__all__ = [
    "DIGEST_BUFFER_BYTES_MAX",
    "DIGEST_BYTES",
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_UNREADABLE",
    "JournalReport",
    "Problem",
    "StreamReport",
    "TornTail",
    "Verdict",
    "command",
    "format_text",
    "print_output",
    "verify_journal",
]

EXIT_OK = 0
"""Every stream is sound (a torn tail is only a note)."""
EXIT_PROBLEM = 1
"""At least one stream, or the region before the first hello, has a problem."""
EXIT_UNREADABLE = 2
"""The journal could not be opened or read."""


def command(journal: Path, *, as_json: bool) -> int:
    """`engine-events verify JOURNAL [--json]`: print the report, return the exit code. While it
    reads, a person at a terminal sees how far it is (stderr, erased at the end); a pipe or a file
    gets nothing of it."""
    try:
        report = (
            _verify_showing_progress(journal) if sys.stderr.isatty() else verify_journal(journal)
        )
    except OSError as error:
        reason = error.strerror or str(error)
        kind = "not_a_regular_file" if isinstance(error, NotARegularFile) else "unreadable"
        if as_json:
            print_output(format_failure_json(str(journal), kind, reason))
        else:
            print(f"{journal}: cannot read the journal: {reason}", file=sys.stderr)
        return EXIT_UNREADABLE
    print_output(format_json(report) if as_json else format_text(report))
    return EXIT_OK if report.ok else EXIT_PROBLEM


def _verify_showing_progress(journal: Path) -> JournalReport:
    """`verify_journal` under a progress bar on stderr, by `rich` (a dependency of the engine for
    `watch`; imported only here, so a verify into a pipe does not load it)."""
    from rich.console import Console  # noqa: PLC0415 - see the docstring
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        # The name is the file's: shown as typed (never read as markup), controls replaced.
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,  # erased at the end: the report on stdout is all that stays
        redirect_stdout=False,
    ) as progress:
        task = progress.add_task(f"verify {plain(journal.name, max_chars=40)}", total=None)

        def on_read(read_bytes: int, size_bytes: int) -> None:
            progress.update(task, completed=read_bytes, total=size_bytes)

        return verify_journal(journal, on_read=on_read)
