"""Fault injection for hosts' and our own tests: one seam, the journal's system calls.

The fault seams (`faults`): `FaultyIO`, a `JournalIO` that fails writes with an errno as a full
disk does and kills the process at a named point of the projection (`CRASH_POINTS`), or raises
`SimulatedCrash` in process, given to an emitter by `open_emitter(conn, book_dir, io, ...)`, with `abandon(emitter)` doing what the kernel does for a dead process;
and `FaultyConnection`, which tells a world of every COMMIT so the process can die right there, and
can die in the middle of a prune (`MID_PRUNE`).

`EngineWorld` is a simulated world for a host's own checkpoint code: a book directory with a real
SQLite database and a real journal file, in which engine processes start, run the host's steps,
crash — right after any SQLite COMMIT, or at any point of the projection — exit, restart and are
repaired, with the disk failing and healing, all through the same seam. The host's code runs
unchanged: it gets the world's connection and the emitter, as it would get its own in production.

    world = EngineWorld(book_dir, setup=create_my_tables)
    world.crash_after_commit(3)                   # the process dies right after its 3rd COMMIT
    outcome = world.run(my_engine_main)           # my_engine_main(conn, emitter) -> exit code
    if outcome.crashed_at is not None:
        world.repair()                            # or: world.run(my_engine_main) again
    world.check_journal(complete=True)            # every committed row is in the file, once
    world.close()

Power cuts (`engine_events.testing.power_cut`, re-exported here): `EngineWorld(book, recorder=PowerCutIO())`
records every system call of the journal and a snapshot of the database after every COMMIT;
`crash_states` enumerates what the disk may hold after a power cut at every point of that
recording, and `materialize` lays one out for an engine to restart on. `live` plays a scripted life
of the reference engine in a world.

`python -m engine_events.testing BOOK_DIR [--crash-at POINT:N] [--fail-with ERRNO:N] [options]` runs
the reference engine with such an IO: the crash and fault tests use it on real processes.

This module is the public import path; the code lives in `faults` (`FaultyIO`, `open_emitter`,
`FaultyConnection`, the crash points, `SimulatedCrash`, `abandon`), `world` (`EngineWorld`, `live`, the reference
engine as a host), `power_cut` (the power-cut model) and `main` (the command's `main`).
"""

from __future__ import annotations

from ..errors import SimulationError
from .faults import (
    AFTER_COMMIT,
    BEFORE_DIRECTORY_FSYNC,
    CRASH_POINTS,
    MID_PRUNE,
    FaultyConnection,
    FaultyIO,
    SimulatedCrash,
    abandon,
    open_emitter,
)
from .main import main
from .power_cut import PAGE_BYTES, CrashState, Op, PowerCutIO, Tears, crash_states, materialize
from .world import (
    EngineWorld,
    Host,
    InvariantViolated,
    JournalCheck,
    LifeStep,
    Outcome,
    live,
    reference_engine,
)

__all__ = [
    "AFTER_COMMIT",
    "BEFORE_DIRECTORY_FSYNC",
    "CRASH_POINTS",
    "MID_PRUNE",
    "PAGE_BYTES",
    "CrashState",
    "EngineWorld",
    "FaultyConnection",
    "FaultyIO",
    "Host",
    "InvariantViolated",
    "JournalCheck",
    "LifeStep",
    "Op",
    "Outcome",
    "PowerCutIO",
    "SimulatedCrash",
    "SimulationError",
    "Tears",
    "abandon",
    "crash_states",
    "live",
    "main",
    "materialize",
    "open_emitter",
    "reference_engine",
]
