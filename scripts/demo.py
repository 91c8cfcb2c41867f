"""The main job end to end, for a person to watch.

Reference engines write three books under ./demo-books/: one runs to the end, one stops at its money
ceiling and is resumed with a higher one, one is killed with SIGKILL midway and resumed. While they
run, the platform side sweeps the books into Postgres (an embedded one under ./.platform-ingest/) and
the runs are shown as Postgres sees them. At the end each journal is verified, and a summary of the
platform's state is printed.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path("demo-books")
UNITS = 8
console = Console(width=max(Console().width, 110))


def engine(book: str, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "engine-events",
            "--log-level",
            "WARNING",
            "demo",
            str(ROOT / book),
            "--units",
            str(UNITS),
            *options,
        ]
    )


def expect(process: subprocess.Popen[bytes], expected: int, what: str) -> None:
    code = process.wait(timeout=120)
    if code != expected:
        console.print(f"[red]{what}: exit {code}, expected {expected}[/red]")
        sys.exit(1)
    console.print(f"  {what}: exit {code}")


def sweep_and_show() -> dict[str, object]:
    books = [str(path) for path in sorted(ROOT.iterdir())]
    subprocess.run(
        ["platform-ingest", "sweep", "--auto", *books],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    shown = subprocess.run(
        ["platform-ingest", "show", "--json", *books],
        check=True,
        capture_output=True,
        text=True,
    )
    state: dict[str, object] = json.loads(shown.stdout)
    return state


def table(state: dict[str, object], title: str) -> Table:
    view = Table(title=title)
    for column in ("book", "run", "state", "reason", "units", "progress", "spend USD", "attempts"):
        view.add_column(column)
    for book in state["books"]:  # type: ignore[attr-defined]
        for run in book["runs"]:
            progress = ", ".join(
                f"{phase} {count['done']}/{count['total']}"
                for phase, count in sorted(run["progress"].items())
            )
            view.add_row(
                book["book_id"],
                str(run["run_id"]),
                run["state"],
                run["reason"] or run["outcome"] or "",
                str(len(run["units"])),
                progress,
                f"{(run['committed_micro_usd'] or 0) / 1_000_000:.2f}",
                ", ".join(attempt["state"] for attempt in run["attempts"]),
            )
    return view


def main() -> int:
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir()
    console.print("Engines are writing three books under demo-books/; the platform sweeps them:")
    alpha = engine("book-alpha", "--pace-ms", "300")
    beta = engine("book-beta", "--pace-ms", "150", "--ceiling-micro-usd", "2000000")
    gamma = engine("book-gamma", "--pace-ms", "300")
    time.sleep(1.0)
    console.print(table(sweep_and_show(), "Postgres, while the engines run"))
    gamma.send_signal(signal.SIGKILL)
    expect(gamma, -signal.SIGKILL, "book-gamma killed with SIGKILL midway")
    expect(beta, 4, "book-beta stopped by its ceiling (paused, not failed)")
    console.print(table(sweep_and_show(), "Postgres, after the ceiling and the kill"))
    resumed_beta = engine("book-beta", "--pace-ms", "100", "--ceiling-micro-usd", "9000000")
    resumed_gamma = engine("book-gamma", "--pace-ms", "100")
    time.sleep(1.0)
    console.print(table(sweep_and_show(), "Postgres, while the resumed engines run"))
    expect(alpha, 0, "book-alpha ran to the end")
    expect(resumed_beta, 0, "book-beta resumed with a higher ceiling")
    expect(resumed_gamma, 0, "book-gamma resumed after the kill")

    failures = 0
    for book in sorted(ROOT.iterdir()):
        verified = subprocess.run(
            ["engine-events", "verify", str(book / "events.jsonl")],
            check=False,
            capture_output=True,
            text=True,
        )
        console.print(verified.stdout.strip())
        failures += verified.returncode != 0
    state = sweep_and_show()
    console.print(table(state, "Postgres, at the end"))
    runs = [run for book in state["books"] for run in book["runs"]]  # type: ignore[attr-defined]
    done = all(run["state"] == "completed" and len(run["units"]) == UNITS for run in runs)
    if failures or not done:
        console.print("[red]The demo did not end as expected.[/red]")
        return 1
    console.print("Every journal verified; every run completed with each unit once, in Postgres.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
