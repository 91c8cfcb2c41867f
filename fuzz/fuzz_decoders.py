"""Fuzz target: both sides' line decoders, and the engine's `verify`, on any bytes.

    python fuzz/fuzz_decoders.py [libFuzzer options, e.g. -runs=1000000 -max_len=4096]

A finding is any exception other than the packages' typed refusals (`engine_events.errors.LineError`,
`platform_ingest.errors.LineRefused`), or the two decoders reaching different verdicts on one line,
or `verify` judging that line (the second of a journal, after a sound hello) otherwise.
The corpus starts from the shared test vectors (in a temporary directory, unless a corpus directory
is given on the command line: libFuzzer then reads and grows that one).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from engine_events._decode import decode_line as engine_decode
    from engine_events._decode import require_supported
    from engine_events._events import Hello
    from engine_events._line import encode_line
    from engine_events._verify import verify_journal
    from engine_events.errors import LineError
    from platform_ingest._decode import decode_line as platform_decode
    from platform_ingest.errors import LineRefused

from _seeds import seed_lines, write_corpus


def engine_verdict(raw: bytes) -> str:
    try:
        line = engine_decode(raw)
        if line.type == "hello":
            require_supported(line)
    except LineError as error:
        return error.kind
    return "ok"


def platform_verdict(raw: bytes) -> str:
    try:
        platform_decode(raw)
    except LineRefused as error:
        return str(error.kind)
    return "ok"


_JOURNAL = Path(tempfile.mkdtemp(prefix="fuzz-decoders-")) / "events.jsonl"
_HELLO = encode_line(
    1,
    Hello(engine_run_id="fuzz-journal-run", book_id="b", chunker_version="c"),
    "2026-11-30T02:08:57.213Z",
)


def verify_verdict(raw: bytes) -> str:
    """verify's verdict on `raw` as the line after a sound hello (a gap or a conflict is about
    the seq, not the line: it counts as read)."""
    _JOURNAL.write_bytes(_HELLO + raw)
    report = verify_journal(_JOURNAL)
    problems = [*report.orphans, *(s.problem for s in report.streams if s.problem is not None)]
    for problem in problems:
        if problem.verdict in ("malformed", "unsupported_version"):
            return problem.verdict
    return "ok"


def test_one_input(data: bytes) -> None:
    raw = data if data.endswith(b"\n") else data + b"\n"
    engine, platform = engine_verdict(raw), platform_verdict(raw)
    if engine != platform:
        raise AssertionError(f"verdicts differ: engine {engine}, platform {platform}: {raw!r}")
    if raw.count(b"\n") == 1 and verify_verdict(raw) != engine:
        raise AssertionError(f"verify differs from the decoders ({engine}): {raw!r}")


def main() -> None:
    corpus = write_corpus(Path(tempfile.mkdtemp(prefix="fuzz-decoders-corpus-")), seed_lines())
    args = list(sys.argv)
    if not any(not arg.startswith("-") for arg in args[1:]):
        args.append(str(corpus))
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
