"""The names `engine_events` exports are what a host embedding the emitter uses (the how-tos and
examples); the reader's and the encoder's internals are imported from their own modules."""

from __future__ import annotations

import importlib
import inspect

import pytest

import engine_events
from engine_events import Emitter

PUBLIC = {
    "STREAM_VERSIONS",
    "BankStop",
    "BookLock",
    "Ceiling",
    "DurabilityError",
    "Emitter",
    "EngineEventsError",
    "EventError",
    "ExitCode",
    "FileModeInvalid",
    "Finished",
    "JournalWriteError",
    "LineTooLong",
    "MoneyError",
    "NotInTransaction",
    "PhaseCount",
    "Progress",
    "ProjectLocked",
    "RetentionInvalid",
    "Spend",
    "StreamFinished",
    "StreamVersionNotSupported",
    "UnitDone",
    "__version__",
    "connect",
    "usd_to_micro_usd",
}

MOVED = {
    "DATABASE_FILE_NAME": "engine_events._schema",
    "DEFAULT_FILE_MODE": "engine_events._file_mode",
    "LINE_BYTES_MAX": "engine_events._line",
    "encode_line": "engine_events._line",
    "format_time": "engine_events._line",
    "STREAM_VERSION": "engine_events._events",
    "Event": "engine_events._events",
    "Hello": "engine_events._events",
    "JournalErrorPolicy": "engine_events._emitter",
    "Line": "engine_events.readers.decode",
    "decode_line": "engine_events.readers.decode",
    "BookDirectoryError": "engine_events.errors",
    "LineError": "engine_events.errors",
    "MalformedLine": "engine_events.errors",
    "NotARegularFile": "engine_events.errors",
    "SchemaMismatch": "engine_events.errors",
    "UnsupportedVersion": "engine_events.errors",
    "PruneResult": "engine_events._prune",
    "require_micro_usd": "engine_events._money",
}
"""Each name the package root no longer exports, and the module it is imported from now (as
CHANGELOG.md says)."""


def test_the_package_exports_what_a_host_uses_and_nothing_else() -> None:
    assert set(engine_events.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(engine_events, name) is not None, name


@pytest.mark.parametrize(("name", "module"), sorted(MOVED.items()))
def test_a_moved_name_is_imported_from_its_module_not_the_root(name: str, module: str) -> None:
    assert hasattr(importlib.import_module(module), name)
    assert not hasattr(engine_events, name)
    with pytest.raises(ImportError):
        exec(f"from engine_events import {name}", {})


def test_emitter_open_has_no_test_seam_in_its_signature() -> None:
    """The journal's system calls (`io`) and the status file's pace are not a host's options:
    `engine_events.testing.open_emitter` takes the IO."""
    parameters = inspect.signature(Emitter.open).parameters
    assert "io" not in parameters
    assert "status_interval_s" not in parameters
    assert set(parameters) == {
        "conn",
        "book_dir",
        "book_id",
        "chunker_version",
        "engine_run_id",
        "on_journal_error",
        "lock",
        "stream_version",
        "retention",
        "prune_interval_s",
        "file_mode",
    }
