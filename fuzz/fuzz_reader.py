"""Fuzz target: the platform's journal reader and decoder over whole files of any bytes.

    python fuzz/fuzz_reader.py [libFuzzer options, e.g. -runs=200000 -max_len=65536]

The reader must yield, in order and without overlap, only complete lines (each ending in its only
newline, at most `LINE_BYTES_MAX` bytes) or `MalformedLine` records of `line_too_long`, and leave an unterminated tail
unread; every complete line must decode to a `Line` or a typed `LineRefused`; a hint taken just
past any yielded line must verify. Anything else is a finding. The corpus starts from the shared
test-vector journals (in a temporary directory, unless a corpus directory is given on the command
line: libFuzzer then reads and grows that one).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    import hashlib

    from platform_ingest.errors import LineRefused, MalformedLine
    from platform_ingest.journal.decode import LINE_BYTES_MAX, decode_line
    from platform_ingest.journal.hint import Hint
    from platform_ingest.journal.reader import Journal, file_identity

from _seeds import seed_journals, write_corpus

_directory = tempfile.mkdtemp(prefix="fuzz-reader-")
_path = Path(_directory) / "events.jsonl"


def test_one_input(data: bytes) -> None:
    _path.write_bytes(data)
    expected_end = data.rfind(b"\n") + 1
    with Journal(_path) as journal:
        identity = file_identity(os.stat(_path))
        position = 0
        for offset, raw in journal.lines(0):
            if offset != position:
                raise AssertionError(f"line at {offset}, expected {position}")
            if isinstance(raw, MalformedLine):
                if raw.line_sha256 is None:  # unterminated: the end of what is read
                    position = len(data)
                    break
                position = offset + raw.size_bytes
                continue
            if not raw.endswith(b"\n") or b"\n" in raw[:-1] or len(raw) > LINE_BYTES_MAX:
                raise AssertionError(f"not one complete line at {offset}: {raw[:40]!r}")
            if data[offset : offset + len(raw)] != raw:
                raise AssertionError(f"bytes at {offset} are not the file's")
            with contextlib.suppress(LineRefused):
                decode_line(raw)
            position = offset + len(raw)
            hint = Hint(position, len(raw), hashlib.sha256(raw).digest(), identity)
            if not journal.verify_hint(hint):
                raise AssertionError(f"the hint just past the line at {offset} does not verify")
        if position not in (expected_end, len(data)):
            raise AssertionError(f"read up to {position}, the last newline ends at {expected_end}")


def main() -> None:
    corpus = write_corpus(Path(tempfile.mkdtemp(prefix="fuzz-reader-corpus-")), seed_journals())
    args = list(sys.argv)
    if not any(not arg.startswith("-") for arg in args[1:]):
        args.append(str(corpus))
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
