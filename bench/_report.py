"""What the benchmarks here share: where their prose goes, the figures `run_all.py` collects, the
machine's load beside them, and a fresh database to measure in.

Each benchmark is run as a script (`python bench/bench_x.py`), so this module is found beside it.
"""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path
from typing import Any, TextIO

import psycopg

_prose: TextIO = sys.stdout
FIGURES: list[dict[str, object]] = []
"""The figures of this run, printed as JSON under `--json` for `run_all.py`."""


def prose_to(stream: TextIO) -> None:
    """Where `say` writes: stdout, or stderr when stdout carries the JSON figures."""
    global _prose  # noqa: PLW0603 - chosen once, by the command line
    _prose = stream


def say(text: str) -> None:
    print(text, file=_prose, flush=True)


def figure(
    name: str,
    unit: str,
    value: float,
    *,
    baseline_name: str,
    baseline: float,
    target: str,
    ratio: float | None = None,
) -> None:
    """One figure beside its floor or baseline, measured in the same run (ratio = value/baseline
    unless given)."""
    FIGURES.append(
        {
            "name": name,
            "unit": unit,
            "value": value,
            "baseline_name": baseline_name,
            "baseline": baseline,
            "ratio": value / baseline if ratio is None and baseline else ratio,
            "target": target,
        }
    )


def load_average() -> str:
    """The machine's load (1, 5, 15 minutes): figures taken under load are noted as such."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def fresh_database(admin_dsn: str, name: str) -> str:
    """An empty database `name` on the server of `admin_dsn` (dropped first if it exists); its DSN."""
    with psycopg.connect(admin_dsn, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(admin_dsn)
    info["dbname"] = name
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def install_commit_stamp(connection: psycopg.Connection[Any]) -> None:
    """A deferred constraint trigger on `attempts` that writes, into `bench_commits (seq, at)`,
    the cursor an apply transaction moved and `clock_timestamp()` as that transaction reaches its
    commit (deferred: after everything the transaction does, the projections' check included)."""
    connection.execute("CREATE TABLE bench_commits (seq bigint, at timestamptz)")
    connection.execute(
        "CREATE FUNCTION bench_stamp() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " INSERT INTO bench_commits VALUES (NEW.last_seq, clock_timestamp()); RETURN NULL;"
        " END $$"
    )
    connection.execute(
        "CREATE CONSTRAINT TRIGGER bench_stamp AFTER UPDATE ON attempts"
        " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_stamp()"
    )


def scrape_metrics(port: int, timeout_s: float = 10.0) -> dict[str, float]:
    """A worker's metrics (Prometheus text on `127.0.0.1:port/metrics`), by sample name with its
    labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout_s) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found
