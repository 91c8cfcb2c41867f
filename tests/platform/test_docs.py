"""The platform docs stay true: their shell examples run, and the CLI reference names every option."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from platform_ingest.cli.parser import build_parser as _parser

DOCS = Path(__file__).resolve().parent.parent.parent / "docs" / "platform"
BIN = Path(sys.executable).parent


def _blocks(path: Path) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", path.read_text(), flags=re.DOTALL)


def test_cli_reference_names_every_command_and_option() -> None:
    """Every subcommand and option of `platform-ingest` appears in docs/platform/cli.md."""
    text = (DOCS / "cli.md").read_text()
    parser = _parser()
    missing = [
        option
        for action in parser._actions
        for option in action.option_strings
        if option not in {"-h", "--help"} and option not in text
    ]
    for action in parser._actions:
        choices = getattr(action, "choices", None)
        if isinstance(choices, dict):
            for name, subparser in choices.items():
                if f"### `{name}" not in text:
                    missing.append(name)
                missing.extend(
                    option
                    for sub_action in subparser._actions
                    for option in sub_action.option_strings
                    if option not in ("-h", "--help") and option not in text
                )
    assert missing == []


@pytest.mark.postgres
def test_readme_examples_run(tmp_path: Path, fresh_dsn: str) -> None:
    """The tutorial's shell blocks run as written (embedded Postgres first, then a DSN)."""
    environment = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DSN": fresh_dsn,
        "ENGINE_RUN_ID": str(uuid.uuid4()),
        "PYTHONWARNINGS": "ignore",
    }
    environment.pop("PLATFORM_INGEST_DSN", None)
    (tmp_path / "books").mkdir()
    outputs = []
    for block in _blocks(DOCS / "README.md"):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    shown = json.loads(outputs[0][outputs[0].index("{") :])
    (run,) = shown["books"][0]["runs"]
    assert (run["state"], len(run["units"])) == ("completed", 3)
