"""Shared test settings: hypothesis profiles and the `--run-slow` switch."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile(
    "soak",  # between ci and thorough: a few minutes for the seam simulation
    max_examples=400,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    stateful_step_count=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", help="also run tests marked slow (long profiles)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    selected = [item for item in items if "slow" not in item.keywords]
    deselected = [item for item in items if "slow" in item.keywords]
    if deselected:
        # Deselected, not skipped: a slow test is not counted as passing when it did not run.
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    """One Postgres server for the whole session: PLATFORM_INGEST_TEST_DSN's, or an embedded one.

    The embedded server's data lives in a directory of its own, not under pytest's temporary
    root, which another pytest session on the machine may prune while this one runs.
    """
    external = os.environ.get("PLATFORM_INGEST_TEST_DSN")
    if external:
        yield external
        return
    from platform_ingest._embedded import embedded_postgres

    with (
        tempfile.TemporaryDirectory(prefix="test-pg-") as directory,
        embedded_postgres(Path(directory)) as dsn,
    ):
        yield dsn
