"""Postgres: every statement, listed (`statements`), the frozen migrations (`migrations`), the one
execute helper with bounded waits and SQLSTATE classes (`db`), binary COPY data (`copy_data`), the
schema's version (`schema`) and the embedded server (`embedded`)."""
