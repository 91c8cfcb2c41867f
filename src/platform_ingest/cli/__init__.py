"""The `platform-ingest` command."""
