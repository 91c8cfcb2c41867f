"""Shared test settings: hypothesis profiles, the `--run-slow` switch, and the fixture plugins.

The helpers and fixtures shared by several test directories live in `tests/fixtures/` (on the
import path through `pythonpath` in pyproject.toml): `platform_journals` (hand-made journal lines,
workers as processes), `seam_model` (the seam simulation's model), `verdicts` (each reader's verdict
on a line), `rule_cases` with `memory_platform` and `rule_model` (the reader's rules as cases, run in memory
and against Postgres), `terminal` (a command run with its stderr on a pseudo-terminal),
`shell_completion` (what bash offers and zsh completes with a completion script loaded) and the four fixture
plugins named below (`local_user`: a second, unprivileged local user, and commands run as it). `server_fixtures` also fails the
session when a Postgres server a test started is still running after it.

`scripts/test` runs the tests in pytest-xdist's worker processes: each worker is a session of its
own (its own Postgres, its own temporary root), and what a session reports at its end (the slow
tests left out, a server left running, the seam simulation's figures) its controller reports.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["server_fixtures", "platform_fixtures", "seam_fixtures", "local_user"]
# Helper modules whose asserts are the tests' own: pytest explains them when they fail.
pytest.register_assert_rewrite("rule_cases", "rule_model", "memory_platform")

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
        # An xdist worker: its controller, which collects none, says how many.
        workeroutput: dict[str, object] | None = getattr(config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[_SLOW_DESELECTED] = len(deselected)


_SLOW_DESELECTED = "slow_tests_deselected"
_SLOW_DESELECTED_COUNT = pytest.StashKey[int]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    """In an xdist controller: how many slow tests the workers left out (each collects them all)."""
    count = getattr(node, "workeroutput", {}).get(_SLOW_DESELECTED, 0)
    node.config.stash[_SLOW_DESELECTED_COUNT] = max(
        count, node.config.stash.get(_SLOW_DESELECTED_COUNT, 0)
    )


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    count = config.stash.get(_SLOW_DESELECTED_COUNT, 0)
    if count:
        terminalreporter.write_line(f"slow tests deselected: {count} (--run-slow runs them)")
