"""`python -m engine_events.testing BOOK_DIR [--crash-at POINT:N] [--fail-with ERRNO:N] [options]`.

Runs the reference engine (`engine-events demo`) with a `FaultyIO`: the crash and fault tests use
it on real processes (a crash here is a real SIGKILL). `engine_events.testing` runs this `main`
when it is run as a module.
"""

from __future__ import annotations

import argparse
import errno
import logging
from pathlib import Path

from .._demo import DemoOptions, StopRequests, run_demo
from .._logs import configure as configure_logs
from .faults import FaultyIO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine_events.testing")
    parser.add_argument("book_dir", type=Path)
    parser.add_argument(
        "--crash-at", default=None, help="POINT:N — SIGKILL at the Nth time at POINT"
    )
    parser.add_argument(
        "--fail-with", default=None, help="ERRNO:N — after N good writes, writes fail with ERRNO"
    )
    parser.add_argument("--on-journal-error", choices=("degrade", "fail"), default="degrade")
    parser.add_argument("--units", type=int, default=4)
    parser.add_argument("--stages", default="draft,edit")
    parser.add_argument("--unit-cost-micro-usd", type=int, default=250_000)
    parser.add_argument("--pace-ms", type=int, default=0)
    args = parser.parse_args(argv)
    crash_at, crash_on = None, 1
    if args.crash_at:
        point, _, count = args.crash_at.partition(":")
        crash_at, crash_on = point, int(count or 1)
    fail_errno, fail_after = None, 0
    if args.fail_with:
        name, _, count = args.fail_with.partition(":")
        fail_errno, fail_after = getattr(errno, name), int(count or 0)
    stops = StopRequests()
    stops.install()
    options = DemoOptions(
        on_journal_error=args.on_journal_error,
        units=args.units,
        stages=tuple(args.stages.split(",")),
        unit_cost_micro_usd=args.unit_cost_micro_usd,
        pace_ms=args.pace_ms,
    )
    args.book_dir.mkdir(parents=True, exist_ok=True)
    io = FaultyIO(
        crash_at=crash_at, crash_on=crash_on, fail_errno=fail_errno, fail_after_writes=fail_after
    )
    configure_logs(logging.INFO, "text")  # the same lines as `engine-events`
    return run_demo(args.book_dir, options, io=io, stops=stops)
