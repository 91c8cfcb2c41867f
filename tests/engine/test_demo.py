"""The reference engine as a process: exit codes, the ceiling, stops by signal, resume, the lock."""

from __future__ import annotations

import importlib.util
import io
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import orjson
import pytest
from rich.console import Console

pytestmark = pytest.mark.crash


def demo(book_dir: Path, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine_events._cli", "demo", str(book_dir), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def finish(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr.decode()


def lines(book_dir: Path) -> list[dict[str, object]]:
    return [orjson.loads(raw) for raw in (book_dir / "events.jsonl").read_bytes().splitlines()]


def status(book_dir: Path) -> tuple[int, dict[str, object]]:
    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "status", str(book_dir), "--json"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return result.returncode, orjson.loads(result.stdout)


def wait_for_lines(book_dir: Path, count: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        journal = book_dir / "events.jsonl"
        if journal.exists() and journal.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"fewer than {count} lines after {timeout_s} s")


needs_proc = pytest.mark.skipif(
    not Path("/proc/self/stat").is_file(), reason="the engine's state is read from /proc"
)


def _signals_pending(pid: int) -> int:
    """The signals sent to the process that it has not taken yet (a mask: bit n-1 is signal n)."""
    masks = [
        int(value, 16)
        for name, _, value in (
            line.partition(":") for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        if name in ("SigPnd", "ShdPnd")
    ]
    assert len(masks) == 2, f"/proc/{pid}/status has no SigPnd or ShdPnd"
    return masks[0] | masks[1]


def _asleep_on_a_futex(pid: int) -> bool:
    """True while the main (and only) thread sleeps interruptibly, on a futex when the kernel
    says where (`/proc/PID/wchan` is "0" where it may not)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    if stat[stat.rindex(")") + 2] != "S":
        return False
    wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    return wchan in ("", "0") or "futex" in wchan


def wait_until_in_step(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> None:
    """Wait until the engine sleeps in a step's work, every signal sent to it taken and handled.

    Call it once the journal holds the hello and the first progress: from there the engine makes
    no blocking call but the wait of the first step's work (`StopRequests.hard.wait`, a futex), so
    its one thread asleep means it is in that wait. A signal is taken as it wakes the thread, and
    its Python handler runs before the thread waits again: no signal pending, then asleep, means
    every signal sent before this call was handled.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        assert process.poll() is None, f"the engine exited ({process.returncode}) before its step"
        if _signals_pending(process.pid) == 0 and _asleep_on_a_futex(process.pid):
            return
        assert time.monotonic() < deadline, f"the engine was not asleep in a step in {timeout_s} s"
        time.sleep(0.005)


def test_clean_run_exits_0_with_every_unit_and_the_money(tmp_path: Path) -> None:
    """A run to the end exits 0; finished carries the volume and the ledger's money."""
    book = tmp_path / "book-a"
    code, stderr = finish(
        demo(
            book,
            "--units",
            "3",
            "--stages",
            "a,b,c",
            "--pace-ms",
            "0",
            "--unit-cost-micro-usd",
            "1000",
        )
    )
    assert code == 0, stderr
    events = lines(book)
    assert [e["data"]["unit"] for e in events if e["type"] == "unit_done"] == [  # type: ignore[index]
        "unit-0001",
        "unit-0002",
        "unit-0003",
    ]
    spends = [e["data"]["committed_micro_usd"] for e in events if e["type"] == "spend"]  # type: ignore[index]
    assert spends == [1000 * step for step in range(1, 10)], "spend is cumulative"
    assert events[-1]["type"] == "finished"
    assert events[-1]["data"] == {
        "outcome": "clean",
        "exit_code": 0,
        "stop": None,
        "refusal": None,
        "volume": {"units_done": 3, "units_total": 3},
        "money": {"committed_micro_usd": 9000},
    }


def test_ceiling_stops_with_exit_4_and_resumes_as_a_new_stream(tmp_path: Path) -> None:
    """The ceiling stops before the step that would pass it (exit 4, shortfall); a resume finishes."""
    book = tmp_path / "book-c"
    code, stderr = finish(
        demo(
            book,
            "--units",
            "4",
            "--pace-ms",
            "0",
            "--unit-cost-micro-usd",
            "100",
            "--ceiling-micro-usd",
            "450",
        )
    )
    assert code == 4, stderr
    events = lines(book)
    ceiling, finished = events[-2], events[-1]
    assert ceiling["type"] == "ceiling"
    assert ceiling["data"] == {"halted": True, "scope": "book", "shortfall_micro_usd": 50}
    assert finished["data"]["outcome"] == "ceiling" and finished["data"]["exit_code"] == 4  # type: ignore[index]
    assert finished["data"]["money"] == {"committed_micro_usd": 400}  # type: ignore[index]
    _, report = status(book)
    assert report["ceiling"] == ceiling["data"]
    assert report["money"] == {"committed_micro_usd": 400}

    code, stderr = finish(
        demo(
            book,
            "--units",
            "4",
            "--pace-ms",
            "0",
            "--unit-cost-micro-usd",
            "100",
            "--ceiling-micro-usd",
            "10000",
        )
    )
    assert code == 0, stderr
    events = lines(book)
    hellos = [e for e in events if e["type"] == "hello"]
    assert len(hellos) == 2 and hellos[1]["seq"] == 1
    assert events[-1]["data"]["money"] == {"committed_micro_usd": 800}  # type: ignore[index]
    _, report = status(book)
    assert report["ceiling"] is None, "the latest stream did not stop at the ceiling"
    assert len(report["streams"]) == 2  # type: ignore[arg-type]


@needs_proc
def test_sigterm_is_a_soft_stop_with_exit_5(tmp_path: Path) -> None:
    """SIGTERM finishes the step in flight, then exits 5 with finished.stop = "soft"."""
    book = tmp_path / "book-s"
    process = demo(book, "--units", "50", "--pace-ms", "1500")
    wait_for_lines(book, 2)  # its hello and first progress
    wait_until_in_step(process)  # in the first step's 1.5 s of work
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process)
    assert code == 5, stderr
    events = lines(book)
    assert events[-1]["data"]["stop"] == "soft"  # type: ignore[index]
    assert events[-2]["type"] == "spend", "the step in flight was finished"
    spends = [e["data"]["committed_micro_usd"] for e in events if e["type"] == "spend"]  # type: ignore[index]
    assert spends == [250_000], "the step in flight, and no step after it"


@needs_proc
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_second_signal_is_a_hard_stop(tmp_path: Path, second: signal.Signals) -> None:
    """A second SIGTERM, or a SIGINT, abandons the step in flight: exit 5, stop = "hard"."""
    book = tmp_path / "book-h"
    process = demo(book, "--units", "50", "--pace-ms", "3000")
    wait_for_lines(book, 2)  # its hello and first progress
    wait_until_in_step(process)  # in the first step's 3 s of work
    if second == signal.SIGTERM:
        process.send_signal(signal.SIGTERM)
        # Handled before the second is sent (two signals pending at once would be one), and the
        # engine still in the step's work: a soft stop waits for the step.
        wait_until_in_step(process)
    process.send_signal(second)
    code, stderr = finish(process)
    assert code == 5, stderr
    events = lines(book)
    assert events[-1]["data"]["stop"] == "hard"  # type: ignore[index]
    assert not any(e["type"] == "spend" for e in events), "the abandoned step committed nothing"


def test_lock_refuses_a_second_engine_and_status_while_live(tmp_path: Path) -> None:
    """While an engine runs, a second engine and `status` both exit 12; after it, status works."""
    book = tmp_path / "book-l"
    live = demo(book, "--units", "50", "--pace-ms", "100")
    wait_for_lines(book, 2)
    code, stderr = finish(demo(book, "--units", "1"))
    assert code == 12, stderr
    code, report = status(book)
    assert (code, report) == (12, {"error": "project_locked"})
    live.send_signal(signal.SIGINT)
    assert finish(live)[0] == 5
    code, report = status(book)
    assert code == 0 and report["finished"]["stop"] == "hard"  # type: ignore[index]


def test_an_error_names_no_book_above_debug(tmp_path: Path) -> None:
    """A book error (its lock cannot be made) is logged at ERROR without the book's path or id.

    The error's own message names the lock file inside the book directory, which is named after
    the book: that message goes at DEBUG only.
    """
    book = tmp_path / "book-zq7-secret"
    (book / ".engine.lock").mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "--log-level", "DEBUG", "demo", str(book)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 11, result.stderr
    records = result.stderr.splitlines()
    errors = [record for record in records if " ERROR " in record]
    assert errors, result.stderr
    assert not [record for record in errors if "zq7" in record]
    assert [record for record in records if " DEBUG " in record and "zq7" in record]


def load_demo_script() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
    spec = importlib.util.spec_from_file_location("demo_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UNSAFE = frozenset(
    chr(code)
    for code in (*range(0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A))
)


def test_the_demo_table_shows_journal_text_as_plain_text() -> None:
    """Ids, phases, outcomes read back from Postgres are drawn as typed: markup, escapes inert."""
    hostile = "[/][bold red]\x1b[2J\x1b]0;pwned\x07\u202e\x9b" + "x" * 10_000
    state = {
        "books": [
            {
                "book_id": hostile,
                "lag": {"lines": 0},
                "runs": [
                    {
                        "run_id": 1,
                        "state": "[/red]",
                        "reason": None,
                        "outcome": hostile,
                        "units": [hostile],
                        "progress": {hostile: {"done": 1, "total": 2}},
                        "committed_micro_usd": 1_250_000,
                        "attempts": [{"state": hostile}],
                    }
                ],
            }
        ]
    }
    table = load_demo_script().table(state, "runs")
    out = io.StringIO()
    Console(file=out, force_terminal=False, no_color=True, width=400).print(table)
    text = out.getvalue()
    assert not {char for char in text if char in UNSAFE and char != "\n"}
    assert "[/][bold red]" in text
    assert "[/red]" in text
    assert "1.25" in text
    assert "x" * 100 not in text, "a value is cut to a bounded length"


def test_the_demo_writes_the_stream_version_it_is_given(tmp_path: Path) -> None:
    """`--stream-version 1.4` resumes a 1.3 book as a 1.4 stream whose hello carries the
    process's pid; `verify` reads the book's two versions as one journal."""
    book = tmp_path / "book-v"
    options = ("--units", "2", "--pace-ms", "0", "--unit-cost-micro-usd", "10")
    code, stderr = finish(demo(book, *options, "--ceiling-micro-usd", "20"))
    assert code == 4, stderr
    process = demo(book, *options, "--stream-version", "1.4")
    code, stderr = finish(process)
    assert code == 0, stderr
    hellos = [line["data"] for line in lines(book) if line["type"] == "hello"]
    assert [hello["stream_version"] for hello in hellos] == ["1.3", "1.4"]  # type: ignore[index]
    assert "pid" not in hellos[0] and hellos[1]["pid"] == process.pid  # type: ignore[index,operator]
    verify = subprocess.run(
        [sys.executable, "-m", "engine_events._cli", "verify", str(book / "events.jsonl")],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout.decode()
    assert status(book)[1]["money"] == {"committed_micro_usd": 40}


@pytest.mark.parametrize("version", ["1.5", "2.0", "one"])
def test_the_demo_refuses_a_stream_version_it_does_not_write(tmp_path: Path, version: str) -> None:
    """A version the emitter does not write is a configuration error: exit 10, and the book is
    left as it was (no lock file, no database, no journal)."""
    book = tmp_path / "book-x"
    code, stderr = finish(demo(book, "--stream-version", version))
    assert code == 10, stderr
    assert "StreamVersionNotSupported" in stderr
    assert sorted(path.name for path in book.iterdir()) == []
