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

# The verdict helpers are shared with the differential test (tests/fixtures/verdicts.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "fixtures"))

with atheris.instrument_imports():
    from verdicts import engine_verdict, platform_verdict, verify_verdict

from _seeds import seed_lines, write_corpus

_SCRATCH = Path(tempfile.mkdtemp(prefix="fuzz-decoders-"))


def test_one_input(data: bytes) -> None:
    raw = data if data.endswith(b"\n") else data + b"\n"
    engine, platform = engine_verdict(raw), platform_verdict(raw)
    if engine != platform:
        raise AssertionError(f"verdicts differ: engine {engine}, platform {platform}: {raw!r}")
    if raw.count(b"\n") == 1 and verify_verdict(raw, _SCRATCH) != engine:
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
