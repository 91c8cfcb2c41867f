"""The worker's look at the schema version while it runs: a newer release's `migrate` stops it.

The command checked the schema when it started (`cli.database`); a `migrate` of a newer release
may run under the worker afterwards. The worker then stops taking passes and exits for its
supervisor to start it on the new release (docs/platform/workers.md, "Upgrading a running fleet").
The rule is plain: any version newer than this code's is a change the worker does not go on
with. (What keeps the moments before it stops harmless is the migrations' own rule, that a step
only adds: `store.migrations`.)

The look is one small query (the version table's newest row), never one a pass: it is due when
the worker starts, every `interval_s` (the safety pass's interval), whenever the worker's session
was made again (a restored or promoted server may be another database), and at once when
`migrate` says it changed the schema (`store.migrations.SCHEMA_CHANNEL`, heard by the control
listener).
"""

from __future__ import annotations

import time

from ..errors import SchemaChanged
from ..store import migrations
from ..store.db import Database


class SchemaWatch:
    """`check` raises `SchemaChanged` once the database's schema version is newer than this
    code's; it queries only when a look is due."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.known_version = migrations.SCHEMA_VERSION
        self.next_look = 0.0
        """When the next look is due (monotonic): at once at the start."""

    def look_again(self) -> None:
        """A look is due at once: `migrate` said it changed the schema, or the session was made
        again."""
        self.next_look = 0.0

    def check(self, db: Database) -> None:
        now = time.monotonic()
        if now < self.next_look:
            return
        row = db.fetch_one(migrations.SCHEMA_VERSION_READ)
        self.next_look = now + self.interval_s
        found = 0 if row is None else int(row["version"])
        if found > self.known_version:
            raise SchemaChanged(found, self.known_version)
