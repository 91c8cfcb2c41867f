"""Benchmark of the platform's line decoder against its floor, measured in the same run.

    python bench/bench_decode.py [--streams N] [--units N] [--rounds N] [--json]

The lines are a journal as the engine writes it, made with the engine's own encoder: streams of a
hello, then for every unit one commit of three lines sharing one time (progress over three phases,
unit_done, spend: a third of the lines each), then a finished. Each round times `orjson.loads` on
every line (the floor: the parse alone, nothing checked) and `decode_line` on the same lines, the
two taking turns on chunks of a few hundred lines. Figures printed, as microseconds per line, the
median over the rounds:

- the decoder and its floor on that journal, and the ratio (the median of the rounds' ratios: a
  ratio is taken within one round, so that a machine busy with something else weighs on both);
- the same lines with a new time on every line (no two lines of one commit): the decoder then
  judges every time, where it otherwise remembers the last one;
- for scale, on both: the parse, the re-encoding that proves a line canonical and building the
  `Line`, with nothing else checked (what the decoder spends beyond its checks on a line of no
  remembered skeleton; the others are spared the re-encoding);
- the load average of the machine (/proc/loadavg) before and after: on a loaded machine both
  figures grow, and only the ratios of one run can be compared.

With --breakdown, the journal is also timed piece by piece in the same rounds, each piece with the
ones before it, up to the whole decoder: the lookup of the line's skeleton, the parse straight
into a `Line`, then `decode_line` (its checks, and the lines of no remembered skeleton: hello and
finished).

With --json the figures are printed as one JSON object on stdout (the prose goes to stderr), for
`bench/run_all.py`. Nothing here is a pass/fail check: the test suite has no timed assertion.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from _report import load_average, prose_to, say  # noqa: E402
from engine_events import ExitCode, Finished, PhaseCount, Progress, Spend, UnitDone  # noqa: E402
from engine_events._events import Hello  # noqa: E402
from engine_events._line import encode_line, format_time  # noqa: E402
from platform_ingest.journal.decode import MEMO, decode_line  # noqa: E402
from platform_ingest.journal.line import Line, parse_as_line  # noqa: E402
from platform_ingest.journal.memo import DIGITS_AS_ZERO  # noqa: E402

START = dt.datetime(2026, 11, 30, 2, 8, 57, 213000, tzinfo=dt.UTC)
PHASES = ("draft", "edit", "review")


def journal(streams: int, units: int) -> list[bytes]:
    """Streams of a hello, one commit of progress, unit_done and spend per unit, a finished."""
    lines: list[bytes] = []
    moment = START
    for _ in range(streams):
        seq = 1
        lines.append(
            encode_line(
                seq,
                Hello(engine_run_id=str(uuid.uuid4()), book_id="book-42", chunker_version="c1"),
                format_time(moment),
            )
        )
        for index in range(units):
            moment += dt.timedelta(milliseconds=1837)
            commit = format_time(moment)
            phases = {
                name: PhaseCount(done=min(units, index + 1 + offset), total=units)
                for offset, name in zip((1, 0, -1), PHASES, strict=True)
            }
            for event in (
                Progress(phases=phases),
                UnitDone(unit=f"unit-{index + 1:04d}", index=index),
                Spend(committed_micro_usd=250_000 * (index + 1)),
            ):
                seq += 1
                lines.append(encode_line(seq, event, commit))
        seq += 1
        moment += dt.timedelta(milliseconds=1)
        finished = Finished(
            exit_code=ExitCode.CLEAN,
            units_done=units,
            units_total=units,
            committed_micro_usd=250_000 * units,
        )
        lines.append(encode_line(seq, finished, format_time(moment)))
    return lines


def each_line_its_own_time(lines: list[bytes]) -> list[bytes]:
    """The same lines, each at its own time (one millisecond apart)."""
    moment = START
    out = []
    for raw in lines:
        value = orjson.loads(raw)
        moment += dt.timedelta(milliseconds=1)
        value["time"] = format_time(moment)
        out.append(orjson.dumps(value) + b"\n")
    return out


def parse_encode_build(raw: bytes) -> Line:
    """For scale: the parse, the re-encoding that proves a line canonical and the `Line`, with
    nothing else checked (what `decode_line` spends beyond its checks on a line of no remembered
    skeleton)."""
    value = orjson.loads(raw)
    if orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE) != raw:
        raise ValueError(raw)
    return Line(*value.values())  # as the decoder builds it


def skeleton(raw: bytes) -> object:
    """The lookup of the line's skeleton among those remembered, alone."""
    return MEMO.skeletons.get(raw.translate(DIGITS_AS_ZERO))


def skeleton_parse(raw: bytes) -> Line:
    """The lookup, then the parse straight into a `Line` (its four members typed on the way)."""
    MEMO.skeletons.get(raw.translate(DIGITS_AS_ZERO))
    return parse_as_line(raw)


BREAKDOWN: list[tuple[str, Callable[[bytes], Any]]] = [
    ("skeleton lookup alone", skeleton),
    ("+ the parse into a Line", skeleton_parse),
    ("decode_line (+ its checks, + the hello and finished lines)", decode_line),
]


def timed_ns(function: Callable[[bytes], Any], lines: list[bytes]) -> int:
    started = time.perf_counter_ns()
    for raw in lines:
        function(raw)
    return time.perf_counter_ns() - started


def measure(
    functions: list[Callable[[bytes], Any]], lines: list[bytes], rounds: int, chunk: int = 500
) -> list[tuple[float, float]]:
    """For each function, the median µs per line over the rounds and the median of the rounds'
    ratios to the first function's time.

    Within a round the functions take turns on chunks of a few hundred lines (a millisecond or so
    each), in an order that rotates, so that whatever else the machine does weighs on all alike."""
    for raw in lines:  # every line is one the decoder accepts (and warm-up)
        decode_line(raw)
    chunks = [lines[start : start + chunk] for start in range(0, len(lines), chunk)]
    count = len(functions)
    per_line: list[list[float]] = [[] for _ in functions]
    ratios: list[list[float]] = [[] for _ in functions]
    for number in range(rounds):
        totals = [0] * count
        for index, part in enumerate(chunks):
            for turn in range(count):
                which = (number + index + turn) % count
                totals[which] += timed_ns(functions[which], part)
        for which in range(count):
            per_line[which].append(totals[which] / len(lines) / 1000)
            ratios[which].append(totals[which] / totals[0])
    return [
        (statistics.median(per_line[which]), statistics.median(ratios[which]))
        for which in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--units", type=int, default=100, help="units per stream (3 lines each)")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    parser.add_argument(
        "--breakdown", action="store_true", help="also time the decoder piece by piece"
    )
    args = parser.parse_args()
    prose_to(sys.stderr if args.json else sys.stdout)

    lines = journal(args.streams, args.units)
    size = sum(len(raw) for raw in lines)
    load_before = load_average()
    say(
        f"journal: {len(lines):,} lines in {args.streams} streams, {size / len(lines):.0f} bytes"
        f" a line on average; {args.rounds} rounds; {os.cpu_count()} cores;"
        f" load average before: {load_before}"
    )
    figures: list[dict[str, object]] = []
    floor_name = "floor: orjson.loads of the same lines, in the same rounds"
    for name, sample in (
        ("one time per commit of three lines", lines),
        ("a new time on every line", each_line_its_own_time(lines)),
    ):
        (floor, _), (decoder, ratio), (scale, scale_ratio) = measure(
            [orjson.loads, decode_line, parse_encode_build], sample, args.rounds
        )
        say(
            f"{name}: decode_line {decoder:.3f} µs/line, orjson.loads {floor:.3f} µs/line,"
            f" ratio {ratio:.2f} (target <= 2); for scale, parse + re-encode + Line alone:"
            f" {scale:.3f} µs/line, ratio {scale_ratio:.2f}"
        )
        figures.append(
            {
                "name": f"decode_line, µs a line ({name})",
                "unit": "µs",
                "value": decoder,
                "baseline_name": floor_name,
                "baseline": floor,
                "ratio": ratio,
                "target": "ratio <= 2",
            }
        )
        figures.append(
            {
                "name": (
                    f"for scale ({name}): parse, re-encode to prove the line canonical, build"
                    " the Line; nothing else checked"
                ),
                "unit": "µs",
                "value": scale,
                "baseline_name": floor_name,
                "baseline": floor,
                "ratio": scale_ratio,
                "target": "(decode_line's cost, checks aside, without remembered skeletons)",
            }
        )
    if args.breakdown:
        pieces = measure([orjson.loads] + [piece for _, piece in BREAKDOWN], lines, args.rounds)
        say(f"piece by piece (one time per commit), orjson.loads {pieces[0][0]:.3f} µs/line:")
        for (name, _), (micros, ratio) in zip(BREAKDOWN, pieces[1:], strict=True):
            say(f"  {name}: {micros:.3f} µs/line, ratio {ratio:.2f}")
    load_after = load_average()
    say(f"load average after: {load_after}")
    if args.json:
        note = (
            f"{len(lines):,} lines, {size / len(lines):.0f} bytes a line on average,"
            f" {args.rounds} rounds; load average {load_before} before, {load_after} after,"
            f" on {os.cpu_count()} cores. A loaded machine slows both figures: compare ratios"
            " of one run, not microseconds across runs."
        )
        print(json.dumps({"bench": "decode", "figures": figures, "notes": [note]}))


if __name__ == "__main__":
    main()
