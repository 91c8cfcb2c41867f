"""The two installable halves: each wheel works alone, in a fresh venv, without the other half.

An engine host must not install Postgres binaries to write a journal. So `packaging/engine-events`
and `packaging/platform-ingest` each build a wheel of one package from the shared `src/` tree.
This test builds both wheels, installs each with its declared dependencies into a venv of its own
(no system site-packages, not the project's venv), and proves:

- engine-events: `engine-events demo` writes a journal, while `psycopg` is not importable (the
  wheel pulls in no Postgres driver and no server binaries); `--version` prints the root
  pyproject.toml's version.
- platform-ingest: `platform-ingest sweep --auto` applies a hand-written journal to a fresh test
  database; the engine's wheel comes with it as its dependency (the platform reads by the engine's
  grammar), of the same version, and nothing brings the engine's SQLite writer into the platform's
  process; `--version` prints the same version.
- platform-ingest's embedded Postgres is an extra: its wheel's metadata lists pgserver only under
  `extra == "embedded"`, so the venv installed without the extra has no `pgserver` (no server
  binaries on a host with a Postgres of its own), and a command given no database there exits 1
  with the typed message that says to install `platform-ingest[embedded]` or give a DSN.

It also proves the wheels declare every dependency their package imports: a missing one fails the
commands here, where the development install (both halves, every dependency) would hide it.

The dependencies come from pip's cache when the project's venv was installed on this machine, else
from the index: the test needs the network the first time.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

from platform_ingest.store.embedded import MISSING as EMBEDDED_MISSING
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
    """A fresh venv in `directory` holding `wheel` and its dependencies (the other half's wheel,
    when it is one, from beside it: it is not on the index); its bin directory."""
    _ok([sys.executable, "-m", "venv", directory], cwd=directory.parent)
    python = directory / "bin" / "python"
    _ok(
        [python, "-m", "pip", "install", "--quiet", "--find-links", wheel.parent, wheel],
        directory,
        INSTALL_TIMEOUT_S,
    )
    return directory / "bin"


@pytest.fixture(scope="module")
def platform_bin(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin directory of a fresh venv holding the platform wheel, without any extra."""
    return _venv_with(wheels["platform_ingest"], tmp_path_factory.mktemp("platform") / "venv")


def _metadata(wheel: Path) -> Message:
    """The wheel's METADATA (the core metadata pip reads to choose what to install with it)."""
    with zipfile.ZipFile(wheel) as archive:
        (path,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return Parser().parsestr(archive.read(path).decode())


def _requirements(wheel: Path) -> list[tuple[str, str]]:
    """The wheel's `Requires-Dist` entries as (normalised name, marker without spaces, its quotes
    made double: `extra == 'embedded'` and `extra == "embedded"` are one marker)."""
    entries = []
    for entry in _metadata(wheel).get_all("Requires-Dist") or []:
        requirement, _, marker = entry.partition(";")
        match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
        assert match is not None, entry
        name = re.sub(r"[-_.]+", "-", match.group()).lower()
        entries.append((name, marker.replace(" ", "").replace("'", '"')))
    return entries


def test_platform_wheel_lists_pgserver_only_under_the_embedded_extra(
    wheels: dict[str, Path],
) -> None:
    """pgserver (the embedded Postgres, ~100 MB of server binaries) is the `embedded` extra of
    platform-ingest, never a plain dependency; the engine's wheel does not name it at all."""
    platform = _requirements(wheels["platform_ingest"])
    assert "embedded" in (_metadata(wheels["platform_ingest"]).get_all("Provides-Extra") or [])
    assert [marker for name, marker in platform if name == "pgserver"] == ['extra=="embedded"']
    # Nothing else hides behind the extra, and the plain dependencies are still plain.
    assert [name for name, marker in platform if marker] == ["pgserver"]
    assert {"orjson", "psycopg", "msgspec", "watchdog", "prometheus-client"} <= {
        name for name, marker in platform if not marker
    }
    assert "pgserver" not in {name for name, _ in _requirements(wheels["engine_events"])}


def test_platform_wheel_depends_on_the_engine_wheel_of_its_own_version(
    wheels: dict[str, Path],
) -> None:
    """The platform reads by the engine's grammar: it requires the engine's wheel of the very
    version it is (the root pyproject.toml's), and the engine's wheel requires nothing of the
    platform's, nor a Postgres driver."""
    platform = dict(_requirements(wheels["platform_ingest"]))
    assert "engine-events" in platform
    (pinned,) = [
        entry
        for entry in _metadata(wheels["platform_ingest"]).get_all("Requires-Dist") or []
        if entry.startswith("engine-events")
    ]
    assert pinned.replace(" ", "") == f"engine-events=={VERSION}"
    engine = {name for name, _ in _requirements(wheels["engine_events"])}
    assert not engine & {"platform-ingest", "psycopg", "pgserver", "msgspec", "watchdog"}


def test_platform_ingest_wheel_without_the_extra_refuses_no_database_with_its_message(
    platform_bin: Path, tmp_path: Path
) -> None:
    """Installed without `[embedded]`: no pgserver, and a command given no database (no DSN, no
    PG* variable) exits 1 with the typed message, creating nothing under the data directory."""
    _cannot_import(platform_bin / "python", "pgserver", tmp_path)
    book = tmp_path / "books" / "book-1"
    book.mkdir(parents=True)
    write(book, hello(), spend(2, 2000), finished(3))
    done = _run([platform_bin / "platform-ingest", "sweep", "--auto", book], tmp_path)
    assert done.returncode == 1, done
    assert done.stderr == f"platform-ingest: {EMBEDDED_MISSING}\n", done.stderr  # no "creating"
    assert "platform-ingest[embedded]" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / ".platform-ingest").exists()


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
def test_platform_ingest_wheel_sweeps_a_journal_with_the_engines_grammar_alone(
    platform_bin: Path, tmp_path: Path, fresh_dsn: str
) -> None:
    bin_dir = platform_bin
    # The engine's wheel came with it, of the same version; a sweep loads its grammar, not its
    # writer (the emitter, the outbox, the book's SQLite database).
    assert _ok(
        [bin_dir / "python", "-c", "import engine_events; print(engine_events.__version__)"],
        tmp_path,
    ) == (f"{VERSION}\n")
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


@pytest.mark.postgres
def test_the_quarantine_how_tos_repair_step_works_on_a_platform_host(
    platform_bin: Path, wheels: dict[str, Path], tmp_path: Path, fresh_dsn: str
) -> None:
    """A platform host installed as the README says holds the platform wheel, with the engine's
    wheel it depends on beside it, and the engine's own install is elsewhere (`/opt/engine/bin` in
    the example units). The how-to's repair step, run as written (its paths put where this test
    installed them, the DSN in the environment as a unit gives it), settles the run; the same
    command without `--status-command` runs the `engine-events` installed with the platform, with
    no `engine-events` on the PATH."""
    how_to = (ROOT / "docs" / "platform" / "states.md").read_text()
    (written,) = re.findall(
        r"^ *(platform-ingest repair BOOK_DIR --status-command .+)$", how_to, re.M
    )
    engine_bin = _venv_with(wheels["engine_events"], tmp_path / "engine")
    book = tmp_path / "books" / "book-1"
    _ok([engine_bin / "engine-events", "demo", book, "--units", "1", "--pace-ms", "0"], tmp_path)
    environment = {**_environment(), "PLATFORM_INGEST_DSN": fresh_dsn}
    # A platform host: no `engine-events` on its PATH (the development venv, first on the test
    # runner's PATH, has one).
    environment["PATH"] = os.pathsep.join(
        directory
        for directory in environment.get("PATH", "").split(os.pathsep)
        if directory and not (Path(directory) / "engine-events").exists()
    )
    ingest = str(platform_bin / "platform-ingest")
    swept = subprocess.run(
        [ingest, "sweep", "--auto", str(book)],
        check=False,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert swept.returncode == 0, swept.stderr
    argv = [
        ingest if word == "platform-ingest" else str(book) if word == "BOOK_DIR" else word
        for word in shlex.split(written.replace("/opt/engine/bin", str(engine_bin)))
    ]
    done = subprocess.run(
        argv, check=False, env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    repaired = json.loads(done.stdout)
    assert repaired["book_id"] == "book-1", repaired
    bare = subprocess.run(
        [ingest, "repair", str(book)], check=False, env=environment, capture_output=True, text=True
    )
    assert bare.returncode == 0, bare.stdout + bare.stderr
    assert json.loads(bare.stdout)["book_id"] == "book-1", bare.stdout
