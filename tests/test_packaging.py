"""The two installable halves: each wheel works alone, in a fresh venv, without the other half.

An engine host must not install Postgres binaries to write a journal. So `packaging/engine-events`
and `packaging/platform-ingest` each build a wheel of one package from the shared `src/` tree.
This test builds both wheels, installs each with its declared dependencies into a venv of its own
(no system site-packages, not the project's venv), and proves:

- engine-events: `engine-events demo` writes a journal, while `psycopg` is not importable (the
  wheel pulls in no Postgres driver and no server binaries); `--version` prints the root
  pyproject.toml's version.
- platform-ingest: `platform-ingest sweep --auto` applies a hand-written journal to a fresh test
  database, while `engine_events` is not importable (the platform meets the engine only in the
  file format); `--version` prints the same version.

It also proves the wheels declare every dependency their package imports: a missing one fails the
commands here, where the development install (both halves, every dependency) would hide it.

The dependencies come from pip's cache when the project's venv was installed on this machine, else
from the index: the test needs the network the first time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from platform_journals import RUN_A, finished, hello, spend, write

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
INSTALL_TIMEOUT_S = 600


def _environment() -> dict[str, str]:
    """The caller's environment without anything that would reach outside the fresh venv."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PLATFORM_INGEST_DSN"}
        and not name.startswith("PG")
    }
    environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return environment


def _run(
    argv: list[str | Path], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in argv],
        cwd=cwd,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _ok(argv: list[str | Path], cwd: Path, timeout: float = 120) -> str:
    done = _run(argv, cwd, timeout)
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Both wheels, built from packaging/ as a user would build them."""
    out = tmp_path_factory.mktemp("wheels")
    _ok(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            out,
            ROOT / "packaging" / "engine-events",
            ROOT / "packaging" / "platform-ingest",
        ],
        cwd=ROOT,
        timeout=INSTALL_TIMEOUT_S,
    )
    built = {path.name.split("-")[0]: path for path in out.glob("*.whl")}
    assert set(built) == {"engine_events", "platform_ingest"}, built
    yield built


def _venv_with(wheel: Path, directory: Path) -> Path:
    """A fresh venv in `directory` holding `wheel` and its dependencies; its bin directory."""
    _ok([sys.executable, "-m", "venv", directory], cwd=directory.parent)
    python = directory / "bin" / "python"
    _ok([python, "-m", "pip", "install", "--quiet", wheel], directory, INSTALL_TIMEOUT_S)
    return directory / "bin"


def _cannot_import(python: Path, module: str, cwd: Path) -> None:
    done = _run([python, "-c", f"import {module}"], cwd)
    assert done.returncode != 0, f"{module} is importable in {python}"
    assert "ModuleNotFoundError" in done.stderr, done.stderr


def test_engine_events_wheel_alone_runs_the_demo_without_postgres(
    wheels: dict[str, Path], tmp_path: Path
) -> None:
    bin_dir = _venv_with(wheels["engine_events"], tmp_path / "venv")
    _cannot_import(bin_dir / "python", "psycopg", tmp_path)
    _cannot_import(bin_dir / "python", "platform_ingest", tmp_path)
    assert _ok([bin_dir / "engine-events", "--version"], tmp_path) == f"engine-events {VERSION}\n"
    book = tmp_path / "books" / "book-1"
    _ok([bin_dir / "engine-events", "demo", book, "--units", "1", "--pace-ms", "0"], tmp_path)
    assert (book / "events.jsonl").stat().st_size > 0
    _ok([bin_dir / "engine-events", "verify", book / "events.jsonl"], tmp_path)
    # The package's typing marker ships in the wheel.
    _ok(
        [
            bin_dir / "python",
            "-c",
            "import importlib.resources as r, engine_events as e; "
            "assert r.files(e).joinpath('py.typed').is_file()",
        ],
        tmp_path,
    )


@pytest.mark.postgres
def test_platform_ingest_wheel_alone_sweeps_a_journal_without_the_engine(
    wheels: dict[str, Path], tmp_path: Path, fresh_dsn: str
) -> None:
    bin_dir = _venv_with(wheels["platform_ingest"], tmp_path / "venv")
    _cannot_import(bin_dir / "python", "engine_events", tmp_path)
    assert (
        _ok([bin_dir / "platform-ingest", "--version"], tmp_path) == f"platform-ingest {VERSION}\n"
    )
    book = tmp_path / "books" / "book-1"
    book.mkdir(parents=True)
    write(book, hello(), spend(2, 2000), finished(3))
    ingest = [bin_dir / "platform-ingest", "--dsn", fresh_dsn]
    _ok([*ingest, "sweep", "--auto", book], tmp_path)
    (state,) = json.loads(_ok([*ingest, "show", book, "--json"], tmp_path))["books"]
    (run,) = state["runs"]
    (attempt,) = run["attempts"]
    assert (attempt["engine_run_id"], attempt["last_seq"]) == (RUN_A, 3)
    assert (run["state"], run["exit_code"], run["committed_micro_usd"]) == ("completed", 0, 2000)
    _ok(
        [
            bin_dir / "python",
            "-c",
            "import importlib.resources as r, platform_ingest as p; "
            "assert r.files(p).joinpath('py.typed').is_file()",
        ],
        tmp_path,
    )
