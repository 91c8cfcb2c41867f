"""The main job end to end, for a person to watch.

An embedded Postgres is started once under ./.platform-ingest/ and every command is given its DSN
(one server, one owner: this script). A worker (`platform-ingest run --auto`) tails ./demo-books/.
Reference engines write four books: one runs to the end, one stops at its money ceiling and is
resumed with a higher one, one is killed with SIGKILL midway and resumed, one starts later (a new
book directory the worker finds by itself). The runs are shown live as Postgres sees them. At the
end the worker is stopped with SIGTERM (it must exit 0), each journal is verified, and a summary
of the platform's state is printed.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from engine_events.readers.plain import plain
from platform_ingest import Database
from platform_ingest.operate.show import show_state
from platform_ingest.store.embedded import embedded_postgres

ROOT = Path("demo-books")
DATA_DIR = Path(".platform-ingest")
UNITS = 8
STAGES = ("draft", "edit")
DEADLINE_S = 120.0
CELL_CHARS_MAX = 60
"""The most shown of one value in the table: ids and names come from journals, of any length."""
console = Console(width=max(Console().width, 110))
happenings: list[str] = []


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
            "--stages",
            ",".join(STAGES),
            *options,
        ]
    )


def cell(value: object, style: str = "", max_chars: int = CELL_CHARS_MAX) -> Text:
    """A value read back from Postgres, so from a journal: plain text, never markup or a control."""
    return Text(plain(str(value), max_chars), style=style)


def table(state: dict[str, Any], title: str) -> Table:
    view = Table(title=title, expand=False)
    for column in (
        "book",
        "run",
        "state",
        "why",
        "units",
        "progress",
        "spend USD",
        "attempts",
        "lag lines",
    ):
        view.add_column(column)
    for book in state["books"]:
        for run in book["runs"]:
            progress = "  ".join(
                f"{plain(phase, 20)} {count['done']}/{count['total']}"
                for phase, count in sorted(run["progress"].items())
            )
            colour = {"completed": "green", "paused": "yellow", "running": "cyan"}.get(
                run["state"], "red"
            )
            view.add_row(
                cell(book["book_id"]),
                cell(run["run_id"]),
                cell(run["state"], colour),
                cell(run["reason"] or run["outcome"] or ""),
                cell(f"{len(run['units'])}/{UNITS}"),
                cell(progress, max_chars=3 * CELL_CHARS_MAX),
                cell(f"{(run['committed_micro_usd'] or 0) / 1_000_000:.2f}"),
                cell(", ".join(attempt["state"] for attempt in run["attempts"])),
                cell(book["lag"]["lines"]),
            )
    return view


class Screen:
    """A live table of the runs, refreshed from Postgres while the script waits."""

    def __init__(self, db: Database, live: Live) -> None:
        self.db = db
        self.live = live
        self.state: dict[str, Any] = {"books": []}

    def refresh(self) -> None:
        self.state = show_state(self.db)
        notes = Text("\n".join(happenings[-8:]))
        self.live.update(Group(table(self.state, "Postgres, live (platform-ingest run)"), notes))
        self.live.refresh()

    def wait(self, what: str, done: Callable[[], bool]) -> None:
        end = time.monotonic() + DEADLINE_S
        while True:
            self.refresh()
            if done():
                return
            if time.monotonic() > end:
                raise SystemExit(f"the demo did not see this within {DEADLINE_S:.0f} s: {what}")
            time.sleep(0.25)

    def units(self, book: str) -> int:
        return sum(
            len(run["units"])
            for shown in self.state["books"]
            if shown["book_id"] == book
            for run in shown["runs"]
        )


def exited(process: subprocess.Popen[bytes], expected: int, what: str) -> Callable[[], bool]:
    def check() -> bool:
        code = process.poll()
        if code is None:
            return False
        if code != expected:
            raise SystemExit(f"{what}: exit {code}, expected {expected}")
        happenings.append(f"- {what}: exit {code}")
        return True

    return check


def metrics(port: int) -> dict[str, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return dict(
        line.rsplit(" ", 1)
        for line in text.splitlines()
        if line.startswith("platform_ingest_") and " " in line
    )


def metrics_port(log: Path) -> int | None:
    for text in log.read_text().splitlines():
        message = json.loads(text).get("message", "")
        if message.startswith("metrics on port "):
            return int(message.rsplit(" ", 1)[1])
    return None


def main() -> int:
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir()
    for book in ("book-alpha", "book-beta", "book-gamma"):
        (ROOT / book).mkdir()
    # A clean slate: the demo's own runs only (the data directory is the demo's to reset).
    shutil.rmtree(DATA_DIR / "postgres", ignore_errors=True)
    DATA_DIR.mkdir(mode=0o700, exist_ok=True)  # the embedded server's data: its owner's alone
    log = DATA_DIR / "worker.log"
    console.print("Starting the embedded Postgres under .platform-ingest/ ...")
    with embedded_postgres(DATA_DIR) as dsn:
        subprocess.run(["platform-ingest", "--dsn", dsn, "migrate"], check=True)
        with open(log, "wb") as stderr:
            worker = subprocess.Popen(
                [
                    *("platform-ingest", "--dsn", dsn, "run", str(ROOT), "--auto"),
                    *("--metrics-port", "0", "--safety-pass-s", "5"),
                ],
                stderr=stderr,
            )
        engines: list[subprocess.Popen[bytes]] = []
        db = Database(dsn)
        try:
            code = run_engines(db, worker, engines, log)
        finally:
            db.close()
            for process in engines:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    return code


def run_engines(
    db: Database,
    worker: subprocess.Popen[bytes],
    engines: list[subprocess.Popen[bytes]],
    log: Path,
) -> int:
    console.print(f"A worker tails {ROOT}/ (its JSON log: {log}); engines start writing.")
    with Live(console=console, auto_refresh=False) as live:
        screen = Screen(db, live)
        alpha = engine("book-alpha", "--pace-ms", "700")
        beta = engine("book-beta", "--pace-ms", "400", "--ceiling-micro-usd", "2000000")
        gamma = engine("book-gamma", "--pace-ms", "500")
        engines += [alpha, beta, gamma]
        happenings.append("- three engines started; the worker applies their lines as they come")
        screen.wait("book-gamma has 2 units in Postgres", lambda: screen.units("book-gamma") >= 2)
        gamma.send_signal(signal.SIGKILL)
        screen.wait("book-gamma killed", exited(gamma, -signal.SIGKILL, "book-gamma SIGKILLed"))
        screen.wait("book-beta's ceiling", exited(beta, 4, "book-beta stopped by its ceiling"))
        happenings.append("- book-delta: a new book directory, found by the worker by itself")
        delta = engine("book-delta", "--pace-ms", "400")
        resumed_beta = engine("book-beta", "--pace-ms", "300", "--ceiling-micro-usd", "9000000")
        resumed_gamma = engine("book-gamma", "--pace-ms", "300")
        engines += [delta, resumed_beta, resumed_gamma]
        happenings.append("- book-beta resumed with a higher ceiling; book-gamma resumed")
        screen.wait("book-alpha", exited(alpha, 0, "book-alpha ran to the end"))
        screen.wait("book-beta", exited(resumed_beta, 0, "book-beta completed after the resume"))
        screen.wait("book-gamma", exited(resumed_gamma, 0, "book-gamma completed after the kill"))
        screen.wait("book-delta", exited(delta, 0, "book-delta ran to the end"))

        def all_in() -> bool:
            books = screen.state["books"]
            return len(books) == 4 and all(
                book["lag"]["lines"] == 0
                and book["runs"]
                and book["runs"][-1]["state"] == "completed"
                for book in books
            )

        screen.wait("every run completed in Postgres", all_in)
    console.print()
    port = metrics_port(log)
    figures = metrics(port) if port is not None else {}
    worker.send_signal(signal.SIGTERM)
    worker_exit = worker.wait(timeout=60)
    console.print(f"The worker stopped on SIGTERM: exit {worker_exit}")
    failures = worker_exit != 0
    for book in sorted(ROOT.iterdir()):
        verified = subprocess.run(
            ["engine-events", "verify", str(book / "events.jsonl")],
            check=False,
            capture_output=True,
            text=True,
        )
        report = verified.stdout.strip().splitlines()
        console.print(Text("\n".join(plain(line, 300) for line in report)))
        failures |= verified.returncode != 0
    state = show_state(db)
    console.print(table(state, "Postgres, at the end"))
    for name in (
        "platform_ingest_lines_applied_total",
        "platform_ingest_duplicates_total",
        'platform_ingest_passes_total{trigger="notify"}',
        'platform_ingest_passes_total{trigger="survey"}',
        "platform_ingest_apply_seconds_count",
    ):
        if name in figures:
            console.print(Text(plain(f"  {name} {figures[name]}")))
    runs = [run for book in state["books"] for run in book["runs"]]
    done = all(run["state"] == "completed" and len(run["units"]) == UNITS for run in runs)
    if failures or not done or len(state["books"]) != 4:
        console.print("[red]The demo did not end as expected.[/red]")
        return 1
    console.print(
        "Every journal verified; every run completed in Postgres with each unit once, "
        "applied live by one worker; nothing is left running."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
