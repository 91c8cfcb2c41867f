"""The reader's rules decided by the pure rules, with no Postgres: every rule case (rule_cases.py) over
journals on disk, read into a platform kept in memory, and the at-least-once property of
test_model.py over many more journals than a run against Postgres can afford."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_platform import MemoryPlatform
from rule_cases import RuleCases
from rule_model import build_journal, expected, journal_plans, model_state, observed


class TestRulesInMemory(RuleCases):
    @pytest.fixture
    def platform(self) -> MemoryPlatform:
        return MemoryPlatform()


def _check(data: st.DataObject, plan: list[tuple[list[object], int | None]]) -> None:
    platform = MemoryPlatform()
    book_id = "book-1"  # a fresh platform each time; a name of one length keeps draws stable
    built, committed = build_journal(data, book_id, plan)
    content = built.content
    cuts = sorted(data.draw(st.lists(st.integers(0, len(content)), max_size=4)))
    for cut in [*cuts, len(content)]:
        platform.sweep_content(book_id, content[:cut], batch_lines_max=data.draw(st.integers(1, 6)))
    state = platform.state_of(book_id)
    assert observed(state) == expected(model_state(committed, built.lines_per_stream))
    assert len(platform.books[book_id].hashes) == sum(built.lines_per_stream)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), plan=journal_plans)
def test_any_at_least_once_journal_ends_in_the_model_state(data: st.DataObject, plan: list) -> None:
    """Any at-least-once journal, read in passes cut at any byte, ends in the model state."""
    _check(data, plan)


@pytest.mark.slow
@settings(max_examples=5000, deadline=None)
@given(data=st.data(), plan=journal_plans)
def test_any_at_least_once_journal_ends_in_the_model_state_thorough(
    data: st.DataObject, plan: list
) -> None:
    """The same property over many more journals (a long profile)."""
    _check(data, plan)
