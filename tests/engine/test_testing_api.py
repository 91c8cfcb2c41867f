"""`engine_events.testing` is the public import path of the fault seams and the simulated world;
a world used out of order raises an error of the package's tree."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine_events import Emitter, testing
from engine_events.errors import EngineEventsError, SimulationError


def _main(conn: sqlite3.Connection, emitter: Emitter) -> int:
    return 0


def test_every_public_name_is_importable_from_testing() -> None:
    """The names the docs and the tests import stay reachable from `engine_events.testing`."""
    for name in testing.__all__:
        assert getattr(testing, name) is not None, name


def test_a_world_used_out_of_order_raises_a_simulation_error(tmp_path: Path) -> None:
    """A step, a crash or an exit with no engine running is refused with `SimulationError`, which
    is both an `EngineEventsError` and, as before, a `RuntimeError`."""
    world = testing.EngineWorld(tmp_path / "book")
    try:
        with pytest.raises(SimulationError, match="no engine process is running"):
            world.step(lambda conn, emitter: 0)
        with pytest.raises(SimulationError, match="no engine process is running"):
            world.crash()
        assert world.run(_main, "run-1").exit_code == 0
        assert issubclass(SimulationError, EngineEventsError)
        assert issubclass(SimulationError, RuntimeError)
    finally:
        world.close()
