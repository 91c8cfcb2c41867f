"""The traps a new operator fell into (issue 10), each pinned by a test through the CLIs and docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _unit_exec_start() -> str:
    text = (DOCS / "platform" / "workers.md").read_text()
    (line,) = re.findall(r"^ExecStart=.*platform-ingest run .*$", text, flags=re.MULTILINE)
    return line


@pytest.mark.parametrize("instance", range(1, 10))
def test_worker_unit_metrics_port_is_a_real_unprivileged_port(instance: int) -> None:
    """`--metrics-port 91%i` made instance 1 ask for port 911 (privileged, and another
    scheme's): every documented instance gets a distinct port in 1024..65535."""
    (port_template,) = re.findall(r"--metrics-port (\S+)", _unit_exec_start())
    port = int(port_template.replace("%i", str(instance)))
    assert 1024 <= port <= 65535
    assert port == int(port_template.replace("%i", "1")) + instance - 1
