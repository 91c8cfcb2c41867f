"""The shortcuts the pass takes per line give what the plain forms gave: the batch's hashes are
indexed only when a duplicate looks one up, and answer as a dict filled at each line would."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from platform_ingest.decisions.batch import Batch
from platform_ingest.decisions.rules import BatchHashes
from platform_ingest.decisions.runs import RunView
from platform_ingest.decisions.views import AttemptView

# Each step: apply the next seq of attempt N (0..2), or look up (attempt N, seq S).
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("apply"), st.integers(0, 2)),
        st.tuples(st.just("look"), st.integers(0, 2), st.integers(0, 12)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(steps=_steps)
def test_batch_hashes_answer_as_a_dict_filled_at_each_line_would(steps: list[Any]) -> None:
    """Look-ups interleaved with applied lines in any order: each answer is the one a dict written
    as each line was applied gives (the index only catches up when asked)."""
    run = RunView(book_id="book")
    attempts = [AttemptView(engine_run_id=f"stream-{n}", run=run) for n in range(3)]
    batch = Batch()
    hashes = BatchHashes(batch)
    eager: dict[tuple[int, int], bytes] = {}
    for step in steps:
        attempt = attempts[step[1]]
        if step[0] == "apply":
            attempt.last_seq += 1
            digest = f"{step[1]}:{attempt.last_seq}".encode()
            batch.add_hash(attempt, attempt.last_seq, digest)
            eager[(id(attempt), attempt.last_seq)] = digest
        else:
            assert hashes.get(attempt, step[2]) == eager.get((id(attempt), step[2]))
    for attempt in attempts:
        for seq in range(attempt.last_seq + 2):
            assert hashes.get(attempt, seq) == eager.get((id(attempt), seq))
