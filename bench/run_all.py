"""Run every benchmark and write their figures to `docs/benchmarks.md`.

    python bench/run_all.py [--quick] [--dsn DSN] [--output docs/benchmarks.md] [--no-big]

Each benchmark measures the project and its floor (or a baseline) in the same run and reports the
ratio; this runner collects their figures and writes one page: a table per benchmark (the project's
figure, the floor or baseline, the ratio, the target), the machine it ran on, and how to rerun it.
The page is generated whole, every run; what the figures mean, and how they moved, is kept by hand
in `docs/performance.md`, which this runner never writes.

- `bench/bench_emitter.py --json`, `bench/bench_outbox_prune.py --json`,
  `bench/bench_ingest.py --json` (and `--big`, `--whole-process`: `platform-ingest sweep` as
  a process, by batch bounds, against COPY, and `--split`: a pass with its writer and with one that
  writes nothing) and `bench/bench_decode.py --json` print their
  figures as JSON (with notes to print under them, such as the machine's load while the figures
  were taken);
- `bench/bench_projections.py --json` (the spend ledger's cost to a pass against the same pass
  without a projection, and the time from an apply transaction's commit to a listener's
  `LISTEN platform_ingest` wake-up, against a bare `pg_notify` commit) likewise;
- `bench/bench_retention.py --json` (the platform's bounded storage: bytes per attempt before and
  after compaction, the apply rate beside a compacted history, the bytes a resume reads) likewise;
- `bench/bench_scrub.py --json` (the scrub of a book's applied lines against its floor, each line
  of the same file cut and sha256'd, and the CPU of the worker's background scrub at its default
  rate) likewise;
- `bench/bench_fleet.py --json` (4 worker processes over 40,000 books, one killed with SIGKILL
  and restarted every 10 s while a writer appends: takeover, fsync-to-commit latency, Postgres
  connections and advisory locks, lines applied twice) likewise;
- `bench/bench_growth.py --json` (how cost grows with the work: the pass's CPU per line over
  journals of 10^3, 10^5 and 10^7 lines against reading and parsing them, and a survey's CPU per
  book over roots of 10^3, 10^4 and 10^5 books, idle and with 1 % of them growing, against
  listing the root and stat-ing each journal; each size against the smallest) likewise;
- `bench/bench_fanin.py --json` (one worker, then two, over 5,000 books each growing a line at a
  time, the rate swept: latency, commits, CPU a line against a big pass's) likewise;
- `bench/bench_worker.py`, when present, is run with the options its `--help` offers (`--json` if
  it has it; otherwise its printed figures are kept as they are).

`--quick` runs every benchmark at small sizes (a minute or two: a smoke run, not figures to quote).

The machine's load average is read before and after each benchmark and written beside its figures;
when the 1-minute load exceeds half the cores on either side, the figures are marked as measured
under load: work beside the benchmark may have slowed them (the load after also counts the
benchmark's own processes, so a busy benchmark on a machine of few cores can mark itself).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _report import load_average

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"

FULL = {
    "emitter": [],
    "outbox-prune": [],
    "ingest": [],
    "ingest-big": ["--big"],
    "ingest-whole": ["--whole-process"],
    "ingest-split": ["--split"],
    "projections": ["--whole-process", "--profile"],
    "decode": [],
    "retention": [],
    "scrub": [],
    "fleet": [],
    "growth": [],
    "fanin": [],
}
QUICK = {
    "emitter": ["--events", "500", "--batched-events", "20000", "--memory-events", "100000"],
    "outbox-prune": ["--events", "2000"],
    "ingest": ["--lines", "20000", "--naive-lines", "2000"],
    "ingest-big": ["--big", "--big-bytes", "50000000"],
    "ingest-whole": [
        "--whole-process",
        "--whole-lines",
        "20000",
        "--whole-batches",
        "5000",
        "--naive-lines",
        "2000",
        "--rounds",
        "1",
    ],
    "ingest-split": ["--split", "--whole-lines", "20000", "--rounds", "1"],
    "projections": ["--quick"],
    "decode": ["--streams", "20", "--rounds", "7"],
    "retention": [
        "--attempt-lines",
        "100000",
        "--lines",
        "20000",
        "--history-lines",
        "1000000",
        "--rounds",
        "4",
    ],
    "scrub": ["--lines", "20000", "--streams", "2", "--rounds", "2"],
    "fleet": ["--books", "2000", "--churn-s", "30", "--steady-s", "10"],
    "growth": ["--lines", "1000,100000", "--books", "1000,5000", "--surveys", "3"],
    "fanin": [
        "--books",
        "300",
        "--rates",
        "100,1000",
        "--seconds",
        "3",
        "--two-workers-rate",
        "1000",
        "--big-lines",
        "5000",
    ],
}
WORKER_QUICK = {
    "--lines": "200",
    "--books": "300",
    "--idle-s": "5",
    "--busy-books": "20",
    "--busy-lines": "200",
}


@dataclass
class Result:
    title: str
    command: list[str]
    seconds: float = 0.0
    figures: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    text: str = ""
    error: str = ""
    load_before: str = ""
    load_after: str = ""


# Above this share of the cores busy (1-minute load average) before or after a benchmark, its
# figures are marked as measured under load: the benchmarks' own work is mostly one or two
# processes, so on an otherwise idle machine of several cores the load stays below it.
LOADED_SHARE = 0.5


def _one_minute(load: str) -> float | None:
    try:
        return float(load.split(maxsplit=1)[0])
    except (IndexError, ValueError):  # "unknown": no /proc/loadavg
        return None


def under_load(result: Result, cores: int | None = None) -> str:
    """The mark of figures measured under load, "measured under load (load a → b on N cores)",
    when the 1-minute load before or after is above LOADED_SHARE of the cores; "" otherwise (or
    when the load is unknown)."""
    cores = cores or os.cpu_count() or 1
    before, after = _one_minute(result.load_before), _one_minute(result.load_after)
    if not any(load is not None and load > LOADED_SHARE * cores for load in (before, after)):
        return ""
    shown = [f"{load:.2f}" if load is not None else "unknown" for load in (before, after)]
    return f"measured under load (load {shown[0]} → {shown[1]} on {cores} cores)"


def run(title: str, command: list[str], *, as_json: bool) -> Result:
    result = Result(title, command)
    print(f"== {title}: {' '.join(command)}", file=sys.stderr, flush=True)
    result.load_before = load_average()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    result.seconds = time.perf_counter() - started
    result.load_after = load_average()
    sys.stderr.write(done.stderr if as_json else done.stdout)
    loaded = under_load(result)
    print(
        f"== {title}: load average (1, 5, 15 min) {result.load_before} → {result.load_after}"
        + (f"; {loaded}" if loaded else ""),
        file=sys.stderr,
        flush=True,
    )
    if done.returncode != 0:
        result.error = f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"
        result.text = "" if as_json else done.stdout
        return result
    if as_json:
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
        printed = json.loads(last)
        result.figures = printed.get("figures", [])
        result.notes = printed.get("notes", [])
        result.text = done.stderr
    else:
        result.text = done.stdout
    return result


def worker_command(quick: bool, dsn: str | None) -> tuple[list[str], bool] | None:
    """The worker benchmark's command line, from the options its --help offers."""
    script = BENCH / "bench_worker.py"
    if not script.exists():
        return None
    helped = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    offered = set(re.findall(r"--[a-z][a-z0-9-]*", helped.stdout))
    command = [str(script.relative_to(ROOT))]
    as_json = "--json" in offered
    if as_json:
        command.append("--json")
    if quick:
        for option, value in WORKER_QUICK.items():
            if option in offered:
                command += [option, value]
    if dsn and "--dsn" in offered:
        command += ["--dsn", dsn]
    return command, as_json


def machine() -> str:
    cpu = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kib = int(meminfo.read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB RAM"
    return (
        f"{platform.system()} {platform.release()} on {platform.machine()}, {cpu}, "
        f"{os.cpu_count()} cores{memory}; Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}"
    )


def _number(value: Any, unit: str = "") -> str:
    if not isinstance(value, int | float):
        return str(value)
    if unit == "bytes" or (isinstance(value, int) and abs(value) >= 1000):
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def _ratio(value: Any) -> str:
    """Three significant digits: a ratio of 0.005 must not print as 0.00."""
    return f"{value:.3g}" if isinstance(value, int | float) else str(value)


def render(results: list[Result], *, quick: bool, started: str, command: str) -> str:
    loaded = [result.title for result in results if under_load(result)]
    lines = [
        "# Benchmarks: the latest run",
        "",
        "Every figure below was measured in one run of `bench/run_all.py`, each beside its floor",
        "(the bare system calls or server work it cannot beat) or a baseline (a naive design),",
        "measured in the same run on the same machine; the ratio is the project's figure divided by",
        "that floor or baseline. The test suite makes no timed assertion: speed is shown here.",
        "This page is generated whole by each run; what the figures mean, how they moved and what",
        "was tried is in [performance.md](performance.md).",
        "",
        f"- Run: {started} UTC{' (quick sizes: a smoke run, not figures to quote)' if quick else ''}",
        f"- Machine: {machine()}",
        f"- Command: `{command}`",
        f"- Load: {len(loaded)} of {len(results)} benchmarks measured under load (1-minute load "
        f"average above {LOADED_SHARE:.0%} of the {os.cpu_count()} cores before or after)"
        + (": " + "; ".join(loaded) if loaded else ""),
        "",
    ]
    for result in results:
        lines += [f"## {result.title}", ""]
        lines += [f"`python {' '.join(result.command)}` — {result.seconds:.0f} s", ""]
        lines += [
            f"Load average (1, 5, 15 min): {result.load_before or 'unknown'} before, "
            f"{result.load_after or 'unknown'} after.",
            "",
        ]
        if loaded_note := under_load(result):
            lines += [
                f"**{loaded_note[0].upper()}{loaded_note[1:]}**: work beside the benchmark "
                "may have slowed these figures.",
                "",
            ]
        if result.error:
            lines += ["It did not complete:", "", "```text", result.error, "```", ""]
            if result.text.strip():
                lines += ["What it printed before it stopped:", "", "```text"]
                lines += [result.text.strip(), "```", ""]
            continue
        if result.figures:
            lines += [
                "| figure | project | floor or baseline | ratio | target |",
                "|---|---:|---|---:|---|",
            ]
            for item in result.figures:
                unit = item.get("unit", "")
                lines.append(
                    f"| {item['name']} | {_number(item['value'], unit)} {unit} "
                    f"| {_number(item['baseline'], unit)} {unit}: {item['baseline_name']} "
                    f"| {_ratio(item.get('ratio'))} | {item.get('target', '')} |"
                )
            lines.append("")
            for note in result.notes:
                lines += [note, ""]
        elif result.text.strip():
            lines += [
                "Its figures, as it prints them:",
                "",
                "```text",
                result.text.strip(),
                "```",
                "",
            ]
    lines += [
        "## How to rerun",
        "",
        "```sh",
        "python bench/run_all.py            # full sizes; rewrites docs/benchmarks.md",
        "python bench/run_all.py --quick    # small sizes, a minute or two",
        "python bench/run_all.py --dsn postgresql://...   # a Postgres of yours instead of the",
        "                                                 # embedded one (benchmarks that take --dsn)",
        "```",
        "",
        "Each benchmark also runs alone (`python bench/bench_emitter.py --help`, ...). Run them on",
        "an otherwise idle machine, with the temporary directory on the disk an engine would use.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--dsn", default=None, help="a Postgres to use instead of the embedded one")
    parser.add_argument("--no-big", action="store_true", help="skip the ~1 GB journal pass")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M")
    dsn_args = ["--dsn", args.dsn] if args.dsn else []
    results = [
        run(
            "Emitter: durable events against SQLite and fsync",
            ["bench/bench_emitter.py", "--json", *sizes["emitter"]],
            as_json=True,
        ),
        run(
            "Emitter: the outbox's bytes before and after pruning",
            ["bench/bench_outbox_prune.py", "--json", *sizes["outbox-prune"]],
            as_json=True,
        ),
        run(
            "Tailer: one pass into Postgres",
            ["bench/bench_ingest.py", "--json", *sizes["ingest"], *dsn_args],
            as_json=True,
        ),
    ]
    if not args.no_big:
        results.append(
            run(
                "Tailer: a journal of about 1 GB" if not args.quick else "Tailer: a big journal",
                ["bench/bench_ingest.py", "--json", *sizes["ingest-big"], *dsn_args],
                as_json=True,
            )
        )
    results.append(
        run(
            "Tailer: `platform-ingest sweep` as a whole process, by batch bounds",
            ["bench/bench_ingest.py", "--json", *sizes["ingest-whole"], *dsn_args],
            as_json=True,
        )
    )
    results.append(
        run(
            "Tailer: where a pass's time goes (its writer's share)",
            ["bench/bench_ingest.py", "--json", *sizes["ingest-split"], *dsn_args],
            as_json=True,
        )
    )
    results.append(
        run(
            "Projections",
            ["bench/bench_projections.py", "--json", *sizes["projections"], *dsn_args],
            as_json=True,
        )
    )
    results.append(
        run(
            "Platform decoder: a line against orjson.loads",
            ["bench/bench_decode.py", "--json", *sizes["decode"]],
            as_json=True,
        )
    )
    results.append(
        run(
            "Bounded storage (platform)",
            ["bench/bench_retention.py", "--json", *sizes["retention"], *dsn_args],
            as_json=True,
        )
    )
    results.append(
        run(
            "The scrub: history checked again",
            ["bench/bench_scrub.py", "--json", *sizes["scrub"], *dsn_args],
            as_json=True,
        )
    )
    worker = worker_command(args.quick, args.dsn)
    if worker is not None:
        command, as_json = worker
        results.append(run("Worker: `platform-ingest run`", command, as_json=as_json))
    results.append(
        run(
            "Workers: a fleet sharing books, one killed and restarted every 10 s",
            ["bench/bench_fleet.py", "--json", *sizes["fleet"], *dsn_args],
            as_json=True,
        )
    )
    results.append(
        run(
            "Fan-in: many books, a line each, one worker and two",
            ["bench/bench_fanin.py", "--json", *sizes["fanin"], *dsn_args],
            as_json=True,
        )
    )
    results.append(
        run(
            "How cost grows with the work: a pass per line, a survey per book",
            ["bench/bench_growth.py", "--json", *sizes["growth"], *dsn_args],
            as_json=True,
        )
    )
    flags = " ".join(
        [*(["--quick"] if args.quick else []), *(["--no-big"] if args.no_big else [])]
        + (["--dsn DSN"] if args.dsn else [])
    )
    text = render(
        results,
        quick=args.quick,
        started=started,
        command=f"python bench/run_all.py {flags}".strip(),
    )
    args.output.write_text(text)
    print(f"wrote {args.output}", file=sys.stderr)
    if any(result.error for result in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
