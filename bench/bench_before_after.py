"""The same `platform-ingest sweep` from two revisions of this repository, in one run: what a change
of the code's shape (a move of modules, a split) did to the command's speed.

    python bench/bench_before_after.py --before REV [--after REV] [--lines N] [--rounds N]
        [--dsn DSN] [--json]

`--before` (and `--after`, default: this checkout's working tree) is checked out with `git
worktree` into a temporary directory and removed at the end. Each revision's sources run as their
own child processes (`PYTHONPATH` set to that tree's `src/`, bytecode cached as an installed
package has it), turn about, on one Postgres. Figures, each the median of `--rounds` rounds, the
after's beside the before's, with the ratio after / before:

- fixed cost: `sweep` over a book with no journal (start-up, imports, connection, registration, a
  pass that finds nothing), as wall time of the whole process;
- the pass's rate: `sweep` over a journal of `--lines` lines (the lines of `bench_ingest.py`) into
  a fresh database each round, as lines per second of the whole process.

A ratio within the spread of the rounds is no change. Nothing here is a pass/fail check.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPOSITORY / "src"))

from _report import FIGURES, figure, fresh_database, load_average, prose_to, say  # noqa: E402
from bench_ingest import journal_lines, write_journal  # noqa: E402
from platform_ingest.store.embedded import embedded_postgres  # noqa: E402

LAUNCHER = """
import sys
try:
    from platform_ingest.cli.main import main
except ImportError:  # a revision from before the command line was a package
    from platform_ingest._cli import main
sys.exit(main())
"""
"""Runs the command of whichever layout the tree on `PYTHONPATH` has."""


@contextlib.contextmanager
def checked_out(revision: str | None) -> Iterator[Path]:
    """The `src/` of `revision` in a temporary worktree, or of this checkout when None."""
    if revision is None:
        yield REPOSITORY / "src"
        return
    with tempfile.TemporaryDirectory(prefix="bench-before-after-") as directory:
        tree = Path(directory) / "tree"
        subprocess.run(
            [
                "git",
                "-C",
                str(REPOSITORY),
                "worktree",
                "add",
                "--detach",
                "-q",
                str(tree),
                revision,
            ],
            check=True,
        )
        try:
            yield tree / "src"
        finally:
            subprocess.run(
                ["git", "-C", str(REPOSITORY), "worktree", "remove", "--force", str(tree)],
                check=False,
            )


def _environment(src: Path, cache: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONPYCACHEPREFIX=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _sweep(env: dict[str, str], dsn: str, book: Path) -> float:
    argv = [sys.executable, "-c", LAUNCHER, "--dsn", dsn, "sweep", "--auto", "--json", str(book)]
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"sweep exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return elapsed


def _migrated(admin_dsn: str, name: str, env: dict[str, str]) -> str:
    dsn = fresh_database(admin_dsn, name)
    argv = [sys.executable, "-c", LAUNCHER, "--dsn", dsn, "migrate"]
    subprocess.run(argv, env=env, capture_output=True, check=True)
    return dsn


def compare(admin_dsn: str, work: Path, sides: dict[str, Path], lines: int, rounds: int) -> None:
    envs = {name: _environment(src, work / f"pycache-{name}") for name, src in sides.items()}
    empty = work / "empty-book"
    empty.mkdir()
    journal_book = work / "book-1"
    journal_book.mkdir()
    write_journal(journal_book / "events.jsonl", journal_lines("book-1", lines))
    fixed_dsn = {name: _migrated(admin_dsn, f"fixed_{name}", env) for name, env in envs.items()}
    fixed: dict[str, list[float]] = {name: [] for name in sides}
    rate: dict[str, list[float]] = {name: [] for name in sides}
    load_before = load_average()
    for turn in range(rounds + 1):  # turn 0 warms the bytecode and page caches
        order = list(sides)[:: 1 if turn % 2 else -1]
        for name in order:
            elapsed = _sweep(envs[name], fixed_dsn[name], empty)
            if turn:
                fixed[name].append(elapsed)
        for name in order:
            dsn = _migrated(admin_dsn, f"rate_{name}_{turn}", envs[name])
            elapsed = _sweep(envs[name], dsn, journal_book)
            if turn:
                rate[name].append(lines / elapsed)
    load_after = load_average()
    say(f"load {load_before} before, {load_after} after; {rounds} rounds, turn about")
    for name in sides:
        say(
            f"{name}: fixed {[round(x * 1e3, 1) for x in fixed[name]]} ms; "
            f"rate {[round(x) for x in rate[name]]} lines/s"
        )
    before_fixed, after_fixed = (statistics.median(fixed[n]) * 1e3 for n in ("before", "after"))
    before_rate, after_rate = (statistics.median(rate[n]) for n in ("before", "after"))
    say(
        f"fixed cost: before {before_fixed:.1f} ms, after {after_fixed:.1f} ms, ratio "
        f"{after_fixed / before_fixed:.3f}; rate: before {before_rate:,.0f} lines/s, after "
        f"{after_rate:,.0f} lines/s, ratio {after_rate / before_rate:.3f}"
    )
    figure(
        "fixed cost: `sweep` of a book with no journal, the whole process (after)",
        "ms",
        after_fixed,
        baseline_name="the same from the before revision",
        baseline=before_fixed,
        target="ratio within the rounds' spread",
    )
    figure(
        f"the pass's rate: `sweep` of a {lines:,}-line journal, the whole process (after)",
        "lines/s",
        after_rate,
        baseline_name="the same from the before revision",
        baseline=before_rate,
        target="ratio within the rounds' spread",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, metavar="REV")
    parser.add_argument("--after", default=None, metavar="REV")
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dsn", default=os.environ.get("PLATFORM_INGEST_DSN"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.json:
        prose_to(sys.stderr)
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ba-")))
        admin_dsn = args.dsn or stack.enter_context(embedded_postgres(work / "pg"))
        sides = {
            "before": stack.enter_context(checked_out(args.before)),
            "after": stack.enter_context(checked_out(args.after)),
        }
        compare(admin_dsn, work, sides, args.lines, args.rounds)
    if args.json:
        print(json.dumps({"bench": "before_after", "figures": FIGURES}))


if __name__ == "__main__":
    main()
