"""The worker run as a service: its unit's metrics port, the metrics on loopback unless told
otherwise, the DSN kept off the command line."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from cli_runs import BIN, DOCS, bare_environment, unit_exec_start


@pytest.mark.parametrize("instance", range(1, 10))
def test_worker_unit_metrics_port_is_a_real_unprivileged_port(instance: int) -> None:
    """`--metrics-port 91%i` made instance 1 ask for port 911 (privileged, and another
    scheme's): every documented instance gets a distinct port in 1024..65535."""
    (port_template,) = re.findall(r"--metrics-port (\S+)", unit_exec_start())
    port = int(port_template.replace("%i", str(instance)))
    assert 1024 <= port <= 65535
    assert port == int(port_template.replace("%i", "1")) + instance - 1


def _listening_address(port: int) -> str:
    """The local address (hex, as /proc/net/tcp writes it) of the socket listening on `port`."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # 0A: LISTEN
            return address
    raise AssertionError(f"nothing listens on port {port}")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("extra", "address"), [((), "0100007F"), (("--metrics-address", "0.0.0.0"), "00000000")]
)
def test_worker_metrics_listen_on_loopback_by_default(
    dsn: str, tmp_path: Path, extra: tuple[str, ...], address: str
) -> None:
    """`run --metrics-port` served on 0.0.0.0; it now serves on 127.0.0.1 unless
    `--metrics-address` opens it."""
    (tmp_path / "books").mkdir()
    worker = subprocess.Popen(
        [
            *(str(BIN / "platform-ingest"), "run", str(tmp_path / "books")),
            *("--metrics-port", "0", *extra),
        ],
        env=bare_environment(PLATFORM_INGEST_DSN=dsn),
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert worker.stderr is not None
    stderr = worker.stderr
    reader = threading.Thread(target=lambda: [lines.put(line) for line in stderr], daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            found = re.search(r"metrics on port (\d+)", lines.get(timeout=60))
            port = int(found.group(1)) if found else None
        assert port is not None
        assert _listening_address(port) == address
    finally:
        worker.terminate()
        code = worker.wait(timeout=60)
        reader.join(timeout=60)
        stderr.close()
    assert code == 0


def test_the_worker_docs_keep_the_dsn_off_the_command_line() -> None:
    """`ps` shows a command line to every user: the unit and the how-to pass the DSN through a
    mode-0600 environment file, never `--dsn` nor a unit's `Environment=`."""
    unit = unit_exec_start()
    workers = (DOCS / "platform" / "workers.md").read_text()
    how_to = (DOCS / "how-to" / "run-several-workers.md").read_text()
    assert "--dsn" not in unit
    assert "Environment=PLATFORM_INGEST_DSN" not in workers
    assert "EnvironmentFile=" in workers and "0600" in workers
    assert "--dsn" not in how_to and ".pgpass" in how_to
