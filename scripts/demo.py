"""The main job end to end, for a person to watch.

Reference engines write three books under ./demo-books/: one runs to the end, one stops at its money
ceiling and is resumed with a higher one, one is killed with SIGKILL midway and resumed. Each journal
is then verified, shown, and reported by the repair channel.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path("demo-books")


def engine(book: str, *options: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["engine-events", "--log-level", "WARNING", "demo", str(ROOT / book), *options]
    )


def wait(process: subprocess.Popen[bytes], expected: int, what: str) -> None:
    code = process.wait(timeout=120)
    mark = "ok" if code == expected else "UNEXPECTED"
    print(f"  {what}: exit {code} ({mark})")
    if code != expected:
        sys.exit(1)


def main() -> int:
    shutil.rmtree(ROOT, ignore_errors=True)
    ROOT.mkdir()
    print("Engines are writing three books under demo-books/ ...")
    alpha = engine("book-alpha", "--units", "8", "--pace-ms", "60")
    beta = engine("book-beta", "--units", "8", "--pace-ms", "60", "--ceiling-micro-usd", "2000000")
    gamma = engine("book-gamma", "--units", "8", "--pace-ms", "60")
    time.sleep(0.6)
    gamma.send_signal(signal.SIGKILL)
    wait(gamma, -signal.SIGKILL, "book-gamma killed with SIGKILL midway")
    wait(beta, 4, "book-beta stopped by its ceiling")
    resumed_gamma = engine("book-gamma", "--units", "8", "--pace-ms", "30")
    resumed_beta = engine("book-beta", "--units", "8", "--pace-ms", "30", "--ceiling-micro-usd", "9000000")
    subprocess.run(["engine-events", "watch", str(ROOT / "book-gamma"), "--timeout-s", "60"], check=False)
    wait(alpha, 0, "book-alpha ran to the end")
    wait(resumed_beta, 0, "book-beta resumed with a higher ceiling")
    wait(resumed_gamma, 0, "book-gamma resumed after the kill")

    failures = 0
    for book in sorted(ROOT.iterdir()):
        print(f"\n== {book.name}")
        subprocess.run(["engine-events", "watch", str(book), "--once"], check=False)
        verified = subprocess.run(["engine-events", "verify", str(book / "events.jsonl")], check=False)
        failures += verified.returncode != 0
        subprocess.run(["engine-events", "status", str(book), "--json"], check=False)
    print("\nAll journals verified." if not failures else f"\n{failures} journal(s) failed to verify.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
