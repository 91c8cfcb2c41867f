"""The states of a run, and what an engine's exit code makes of one: typed once, for the run state
machine (`runs`) and the reading of exit codes (`exit_codes`) alike."""

from __future__ import annotations

from typing import Literal, get_args

RunState = Literal["running", "paused", "completed", "failed", "refused"]
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
ENDED_RUN_STATES: frozenset[RunState] = frozenset({"completed", "failed", "refused"})

PauseReason = Literal["ceiling", "bank_stop", "stop", "unsupported_version"]
"""Why a run is `paused`."""
PAUSE_REASONS: tuple[PauseReason, ...] = get_args(PauseReason)
RunOutcome = Literal["completed", "completed_with_flags"]
"""How a `completed` run completed."""
StopKind = Literal["soft", "hard"]
"""How a run was told to stop (`finished.stop`, a `stop` the launcher reported)."""
STOP_KINDS: tuple[StopKind, ...] = get_args(StopKind)
