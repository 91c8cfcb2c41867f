"""Fault injection for hosts' and our own tests: one seam, the journal's system calls.

`FaultyIO` is a `JournalIO` that can fail writes with an errno (ENOSPC, EIO, ...) — first writing
part of the data, as a full disk does — and can kill the process with SIGKILL at a named point of the
projection:

    before_write   after the SQLite commit, before the line is written
    mid_write      after part of the line was written
    before_fsync   after the write, before fsync
    after_fsync    after fsync, before the watermark is recorded

With `in_process=True` a crash raises `SimulatedCrash` (a BaseException: nothing in the library
catches it) instead, and `abandon(emitter)` then does what the kernel does for a dead process: it
closes the journal and releases the lock without flushing anything. A model test can so crash and
restart an engine thousands of times in one process.

`python -m engine_events.testing BOOK_DIR [--crash-at POINT:N] [--fail-with ERRNO:N] [options]` runs
the reference engine with such an IO: the crash and fault tests use it on real processes.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import sys
from pathlib import Path

from ._demo import DemoOptions, StopRequests, run_demo
from ._emitter import Emitter
from ._journal_file import OsJournalIO

CRASH_POINTS = ("before_write", "mid_write", "before_fsync", "after_fsync")


class SimulatedCrash(BaseException):
    """The process died here (in-process crash simulation)."""


def abandon(emitter: Emitter) -> None:
    """What the kernel does when the engine process dies: descriptors closed, the flock released,
    the host's uncommitted transaction discarded. Nothing is flushed or recorded."""
    emitter._journal.close()
    emitter._lock.close()
    if emitter._conn.in_transaction:
        emitter._conn.rollback()


class FaultyIO(OsJournalIO):
    """The real system calls, with faults switched on and off by the test."""

    def __init__(
        self,
        *,
        crash_at: str | None = None,
        crash_on: int = 1,
        fail_errno: int | None = None,
        fail_after_writes: int = 0,
        in_process: bool = False,
    ) -> None:
        if crash_at is not None and crash_at not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {crash_at!r}; known: {', '.join(CRASH_POINTS)}")
        self.crash_at = crash_at
        self._crash_countdown = crash_on
        self._in_process = in_process
        self.fail_errno: int | None = None
        """While set, writes (after a partial one) and fsyncs fail with this errno."""
        self._pending_errno = fail_errno
        self._writes_before_failing = fail_after_writes
        self.failures = 0
        self._partial_written = False

    def write(self, fd: int, data: memoryview) -> int:
        self._maybe_crash("before_write")
        if self._pending_errno is not None:
            if self._writes_before_failing <= 0:
                self.fail_errno, self._pending_errno = self._pending_errno, None
            self._writes_before_failing -= 1
        if self.fail_errno is not None:
            if not self._partial_written and len(data) > 1:
                self._partial_written = True
                return os.write(fd, data[: len(data) // 2])
            self._partial_written = False
            self.failures += 1
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        if self.crash_at == "mid_write" and len(data) > 1 and self._due():
            os.write(fd, data[: len(data) // 2])
            self._die("mid_write")
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        self._maybe_crash("before_fsync")
        if self.fail_errno is not None:
            self.failures += 1
            raise OSError(self.fail_errno, os.strerror(self.fail_errno))
        os.fsync(fd)
        self._maybe_crash("after_fsync")

    def crash_next(self, point: str) -> None:
        """Crash the next time the projection reaches `point`."""
        if point not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {point!r}")
        self.crash_at, self._crash_countdown = point, 1

    def _maybe_crash(self, point: str) -> None:
        if self.crash_at == point and self._due():
            self._die(point)

    def _due(self) -> bool:
        self._crash_countdown -= 1
        return self._crash_countdown == 0

    def _die(self, point: str) -> None:
        if self._in_process:
            self.crash_at = None  # the next process starts healthy
            raise SimulatedCrash(point)
        os.kill(os.getpid(), signal.SIGKILL)


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
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_demo(args.book_dir, options, io=io, stops=stops)


if __name__ == "__main__":
    sys.exit(main())
