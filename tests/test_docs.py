"""Code in the docs runs: every ```python block of docs/ is executed, in a fresh namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
EXAMPLES = [
    pytest.param(code, id=f"{path.relative_to(DOCS)}#{number}")
    for path in sorted(DOCS.rglob("*.md"))
    for number, code in enumerate(BLOCK.findall(path.read_text()), start=1)
]


def test_there_are_examples() -> None:
    """The docs do carry runnable examples (so the parametrized test below is not empty)."""
    assert EXAMPLES


@pytest.mark.parametrize("code", EXAMPLES)
def test_doc_example_runs(code: str) -> None:
    """The example runs to its end, including its own assertions."""
    exec(compile(code, "<docs>", "exec"), {"__name__": "__docs__"})
