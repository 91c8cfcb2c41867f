"""Each run's own part of its book's ledger (`spent_micro_usd`), pruned runs included.

The engine's ledger is the book's, cumulative across runs: a run's `committed_micro_usd` is that
ledger as last seen on the run, and `settled_micro_usd` what `repair` read from the engine. A
run's ledger is the greater of the two. Its own part is its ledger less the greatest ledger of
the runs before it (by run id), never below 0, so a sum of the parts over a book's runs is the
book's ledger.

A pruned run is one of "the runs before" for good: its ledger is kept in the prune's audit record
(`operator_actions`, action `prune`, evidence `committed_micro_usd` and `settled_micro_usd`), and
every part is computed over the survivors and the pruned runs together. So a prune changes no
surviving run's part, and the pruned run's own part, written in the same record
(`spent_micro_usd`), completes the sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def run_ledger(committed_micro_usd: int, settled_micro_usd: int | None) -> int:
    """A run's ledger: the freshest cumulative value seen on it."""
    return max(committed_micro_usd, settled_micro_usd or 0)


def pruned_ledgers(actions: Iterable[Mapping[str, Any]]) -> dict[int, int]:
    """The ledger of each pruned run (run id -> micro-USD), from a book's audit rows."""
    ledgers: dict[int, int] = {}
    for action in actions:
        if action["action"] != "prune":
            continue
        evidence = action["evidence"]
        ledgers[int(evidence["run_id"])] = run_ledger(
            int(evidence.get("committed_micro_usd") or 0), evidence.get("settled_micro_usd")
        )
    return ledgers


def spent_per_run(ledgers: Mapping[int, int], pruned: Mapping[int, int]) -> dict[int, int]:
    """Each run's own part (run id -> micro-USD) of the ledgers given by run id, the pruned
    runs' ledgers counted among the runs before."""
    every = sorted({**pruned, **ledgers}.items())
    spent: dict[int, int] = {}
    before = 0
    for run_id, ledger in every:
        if run_id in ledgers:
            spent[run_id] = max(0, ledger - before)
        before = max(before, ledger)
    return spent


def spent_of_book(
    runs: Iterable[Mapping[str, Any]], actions: Iterable[Mapping[str, Any]]
) -> dict[int, int]:
    """Each surviving run's own part (run id -> micro-USD), from a book's run rows (with
    `run_id`, `committed_micro_usd`, `settled_micro_usd`) and its audit rows."""
    ledgers = {
        int(run["run_id"]): run_ledger(run["committed_micro_usd"], run["settled_micro_usd"])
        for run in runs
    }
    return spent_per_run(ledgers, pruned_ledgers(actions))
