"""The recording projection at version 2, for `platform-ingest rebuild`: its rows are emptied
(`reset`) and given again from the journals, so that what the workers fed it live can be compared
with what a rebuild from scratch gives. Named on the command line as
`restore_projections:RecordingRebuilt`."""

from __future__ import annotations

from platform_ingest.projections import ProjectionSession
from projection_fixtures import Recording


class RecordingRebuilt(Recording):
    version = 2

    def reset(self, session: ProjectionSession) -> None:
        session.execute("DELETE FROM recorded_events")
