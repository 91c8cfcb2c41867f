"""`run`: the worker, until SIGTERM or SIGINT (then exit 0). Its modules (change notification,
metrics) cost a one-shot command about 40 ms of start-up: only this command imports them."""

from __future__ import annotations

import argparse
import signal

from ..errors import SchemaChanged
from ..worker.loop import Worker, WorkerSettings
from .database import open_database
from .exit_status import Exit
from .ingest_commands import load_projections


def run(args: argparse.Namespace) -> int:
    projections = load_projections(args)
    with open_database(args) as db:
        dsn = db.dsn
        db.close()
        worker = Worker(
            dsn,
            WorkerSettings(
                roots=args.roots,
                mode="auto" if args.auto else "named",
                survey_interval_s=args.safety_pass_s,
                membership_interval_s=args.membership_s,
                metrics_port=args.metrics_port,
                metrics_address=args.metrics_address,
                compact_quiet_s=None if args.no_compact else args.compact_quiet_s,
                scrub_bytes_per_s=args.scrub_bytes_per_s,
            ),
            worker_id=args.worker_id,
            projections=projections,
        )

        def stop(signum: int, _frame: object) -> None:
            worker.request_stop()

        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            return worker.run()
        except SchemaChanged:
            return Exit.SCHEMA_CHANGED  # said in the worker's log, at ERROR
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
