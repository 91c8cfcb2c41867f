"""The alert rules (monitoring/platform-ingest.rules.yml), tested with `promtool test rules` on
series a real worker produced: a quarantine fires its alert and the runbook's command clears it,
and so for a stream waiting to be named and for Postgres away. The rules no real run here reaches
(a watcher down, a survey that stopped, a projection failing, a worker missing from the
membership) are tested on series written out below. The dashboard's every query names a metric a
real worker exports.

The expectations are built from the rules file itself: an alert that fires carries the rule's
labels and annotations, and every other alert of the file is expected silent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from platform_ingest import Database, migrate
from platform_ingest.cli.main import main
from platform_journals import (
    BIN,
    RUN_A,
    hello,
    log_entries,
    serves_metrics,
    spend,
    start_worker,
    stop_worker,
    unit_done,
    wait_for,
    worker_metrics,
    write,
)
from server_fixtures import pg_ctl

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "platform-ingest.rules.yml"
DASHBOARD = ROOT / "monitoring" / "grafana-dashboard.json"
ALERTS: dict[str, dict[str, Any]] = {
    rule["alert"]: rule
    for group in yaml.safe_load(RULES.read_text())["groups"]
    for rule in group["rules"]
}
JOB = {"job": "platform-ingest", "instance": "worker-1:9100"}
"""The labels Prometheus adds to every series it scrapes from the worker."""
BROKEN = b'{"seq":5,"type":"unit_done","time":"2026-11-30T02:08:57.213Z","data":{"unit":\n'


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool") or shutil.which("promtool", path=str(BIN))
    if found is None:
        pytest.skip(
            "promtool is not installed: scripts/test unpacks it from Debian's prometheus package"
            " (apt-get download prometheus), which could not be had on this machine"
        )
    return found


def _series_name(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _scraped_series(metrics: dict[str, float]) -> dict[str, float]:
    """A scrape as Prometheus stores it: every sample with the job's labels added."""
    series = {}
    for sample, value in metrics.items():
        name, _, rest = sample.partition("{")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        series[_series_name(name, {**labels, **JOB})] = value
    series[_series_name("up", JOB)] = 1.0  # the scrape itself succeeded
    return series


def _expected(alert: str, labels: dict[str, str]) -> dict[str, Any]:
    rule = ALERTS[alert]
    return {
        "exp_labels": {**labels, **rule.get("labels", {})},
        "exp_annotations": rule.get("annotations", {}),
    }


def _promtool_test(
    promtool: str,
    tmp_path: Path,
    series: dict[str, float],
    firing: dict[str, list[dict[str, str]]],
    *,
    moving: dict[str, str] | None = None,
) -> None:
    """Run `promtool test rules` over `series` held constant for 30 minutes (and `moving`, each
    with its own promtool values, `0+1x30`: one more a minute): at minute 20, the alerts of
    `firing` fire with those labels, every other alert of the rules file is silent."""
    unknown = set(firing) - set(ALERTS)
    assert unknown == set(), f"no such alert in the rules: {unknown}"
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    *(
                        {"series": name, "values": f"{value:g}x30"}
                        for name, value in series.items()
                    ),
                    *(
                        {"series": name, "values": values}
                        for name, values in (moving or {}).items()
                    ),
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": alert,
                        "exp_alerts": [
                            _expected(alert, labels) for labels in firing.get(alert, [])
                        ],
                    }
                    for alert in sorted(ALERTS)
                ],
            }
        ],
    }
    path = tmp_path / f"rules-test-{len(list(tmp_path.glob('rules-test-*')))}.json"
    path.write_text(json.dumps(test))  # JSON is YAML: promtool reads it as written
    done = subprocess.run(
        [promtool, "test", "rules", str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_are_valid(promtool: str) -> None:
    done = subprocess.run(
        [promtool, "check", "rules", str(RULES)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name, rule in ALERTS.items():
        runbook = rule["annotations"]["runbook"]
        assert re.search(r"`(platform-ingest|curl|systemctl) ", runbook), f"{name}: no command"


def test_the_check_fails_on_an_alert_that_does_not_fire(promtool: str, tmp_path: Path) -> None:
    """The helper can fail: an alert expected where the series say nothing is wrong."""
    series = {_series_name("platform_ingest_database_up", JOB): 1.0}
    with pytest.raises(AssertionError, match="PlatformIngestDatabaseDown"):
        _promtool_test(promtool, tmp_path, series, {"PlatformIngestDatabaseDown": [JOB]})


@pytest.fixture
def running(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """The workers a test starts, stopped after it however it ended."""
    workers: list[subprocess.Popen[bytes]] = []
    yield workers
    for worker in workers:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)


def _labelled(metrics: dict[str, float], name: str) -> dict[str, float]:
    prefix = f"platform_ingest_{name}{{"
    return {key.split('"')[1]: value for key, value in metrics.items() if key.startswith(prefix)}


def test_a_quarantine_fires_its_alert_and_the_runbooks_command_clears_it(
    promtool: str,
    fresh_dsn: str,
    tmp_path: Path,
    running: list[subprocess.Popen[bytes]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    lines = [hello(), *(unit_done(seq, f"u-{seq}", seq) for seq in range(2, 5)), BROKEN]
    write(book, *lines, *(unit_done(seq, f"u-{seq}", seq) for seq in range(6, 10)))
    log = tmp_path / "worker.log"
    running.append(
        start_worker(fresh_dsn, root, log, "--metrics-port", "0", "--safety-pass-s", "0.5")
    )
    wait_for("the port served", lambda: serves_metrics(log))
    wait_for(
        "the quarantine surveyed",
        lambda: _labelled(worker_metrics(log), "attempts").get("quarantined") == 1,
    )
    held = _scraped_series(worker_metrics(log))
    _promtool_test(promtool, tmp_path, held, {"PlatformIngestQuarantined": [JOB]})
    # The runbook: skip the line (its hash first, then with it).
    capsys.readouterr()
    main(["--dsn", fresh_dsn, "skip", str(book), RUN_A, "5", "--reason", "look"])
    told = capsys.readouterr()
    sha256 = re.search(r"[0-9a-f]{64}", told.out + told.err)
    assert sha256 is not None
    argv = ["--dsn", fresh_dsn, "skip", str(book), RUN_A, "5", "--sha256", sha256.group(0)]
    assert main([*argv, "--reason", "a torn line of a test"]) == 0
    wait_for(
        "the quarantine gone",
        lambda: (
            _labelled(worker_metrics(log), "lag_lines_held").get("quarantined") == 0
            and _labelled(worker_metrics(log), "attempts").get("quarantined") == 0
        ),
    )
    _promtool_test(promtool, tmp_path, _scraped_series(worker_metrics(log)), {})
    assert stop_worker(running[0]) == 0


def test_a_stream_waiting_to_be_named_fires_and_name_clears_it(
    promtool: str, fresh_dsn: str, tmp_path: Path, running: list[subprocess.Popen[bytes]]
) -> None:
    root = tmp_path / "books"
    book = root / "book-1"
    book.mkdir(parents=True)
    write(book, hello(), spend(2, 10))  # its hello's time is days ago: it has waited that long
    log = tmp_path / "worker.log"
    running.append(
        start_worker(
            fresh_dsn, root, log, "--metrics-port", "0", "--safety-pass-s", "0.5", auto=False
        )
    )
    wait_for("the port served", lambda: serves_metrics(log))
    wait_for(
        "the unnamed stream surveyed",
        lambda: _labelled(worker_metrics(log), "lag_lines_held").get("unnamed") == 2,
    )
    _promtool_test(
        promtool,
        tmp_path,
        _scraped_series(worker_metrics(log)),
        {"PlatformIngestWaitingToBeNamed": [JOB]},
    )
    assert main(["--dsn", fresh_dsn, "name", str(book), RUN_A]) == 0
    wait_for(
        "the stream applied",
        lambda: (
            _labelled(worker_metrics(log), "lag_lines_held").get("unnamed") == 0
            and worker_metrics(log)["platform_ingest_lines_applied_total"] == 2
        ),
    )
    _promtool_test(promtool, tmp_path, _scraped_series(worker_metrics(log)), {})
    assert stop_worker(running[0]) == 0


def test_postgres_away_fires_database_down(
    promtool: str, own_server: Any, tmp_path: Path, running: list[subprocess.Popen[bytes]]
) -> None:
    dsn: str = own_server.get_uri()
    db = Database(dsn)
    migrate(db)
    db.close()
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    log = tmp_path / "worker.log"
    running.append(start_worker(dsn, root, log, "--metrics-port", "0"))
    wait_for("the port served", lambda: serves_metrics(log))
    wait_for(
        "a survey", lambda: worker_metrics(log)["platform_ingest_last_survey_timestamp_seconds"] > 0
    )
    pg_ctl(own_server, "-w", "-m", "fast", "stop")
    wait_for("Postgres seen away", lambda: worker_metrics(log)["platform_ingest_database_up"] == 0)
    _promtool_test(
        promtool,
        tmp_path,
        _scraped_series(worker_metrics(log)),
        {"PlatformIngestDatabaseDown": [JOB]},
    )
    assert stop_worker(running[0]) == 0


def _healthy() -> dict[str, float]:
    """Series of a healthy worker, as a scrape gives them: the base the cases below change."""
    return {
        _series_name("platform_ingest_database_up", JOB): 1,
        _series_name("platform_ingest_watcher_up", JOB): 1,
        _series_name("platform_ingest_workers", JOB): 2,
        _series_name("platform_ingest_lag_age_seconds_max", JOB): 0,
        _series_name("platform_ingest_last_survey_timestamp_seconds", JOB): 1e12,
        **{
            _series_name("platform_ingest_oldest_hold_age_seconds", {**JOB, "hold": hold}): 0
            for hold in ("quarantined", "stalled", "refused", "parked", "unnamed")
        },
        _series_name("up", JOB): 1,
        _series_name("up", {**JOB, "instance": "worker-2:9100"}): 1,
    }


LEDGER = {**JOB, "projection": "ledger"}
CASES: dict[str, tuple[dict[str, float], dict[str, list[dict[str, str]]]]] = {
    "healthy": ({}, {}),
    "stalled": (
        {_series_name("platform_ingest_oldest_hold_age_seconds", {**JOB, "hold": "stalled"}): 90},
        {"PlatformIngestStalled": [JOB]},
    ),
    "parked a minute: not yet": (
        {_series_name("platform_ingest_oldest_hold_age_seconds", {**JOB, "hold": "parked"}): 60},
        {},
    ),
    "parked an hour": (
        {_series_name("platform_ingest_oldest_hold_age_seconds", {**JOB, "hold": "parked"}): 3600},
        {"PlatformIngestParked": [JOB]},
    ),
    "refused": (
        {_series_name("platform_ingest_oldest_hold_age_seconds", {**JOB, "hold": "refused"}): 5},
        {"PlatformIngestStreamRefused": [JOB]},
    ),
    "lag growing": (
        {_series_name("platform_ingest_lag_age_seconds_max", JOB): 900},
        {"PlatformIngestLagGrowing": [JOB]},
    ),
    "watcher down": (
        {_series_name("platform_ingest_watcher_up", JOB): 0},
        {"PlatformIngestWatcherDown": [JOB]},
    ),
    "no survey for an hour": (
        {_series_name("platform_ingest_last_survey_timestamp_seconds", JOB): 0},
        {"PlatformIngestNoSurvey": [JOB]},
    ),
    "projection behind": (
        {_series_name("platform_ingest_projection_lines_behind", LEDGER): 18},
        {"PlatformIngestProjectionBehind": [LEDGER]},
    ),
    "worker missing from the membership": (
        {_series_name("platform_ingest_workers", JOB): 1},
        {"PlatformIngestWorkerMissing": [{"job": "platform-ingest"}]},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rule_fires_on_its_case_and_no_other(promtool: str, tmp_path: Path, case: str) -> None:
    changed, firing = CASES[case]
    _promtool_test(promtool, tmp_path, {**_healthy(), **changed}, firing)


def test_a_failing_projection_fires_while_its_failures_grow(promtool: str, tmp_path: Path) -> None:
    """A counter's case: it grows by one a minute for the whole run."""
    failures = _series_name("platform_ingest_projection_failures_total", LEDGER)
    _promtool_test(
        promtool,
        tmp_path,
        _healthy(),
        {"PlatformIngestProjectionFailing": [LEDGER]},
        moving={failures: "0+1x30"},
    )


SAMPLE_SUFFIXES = {"histogram": ("_bucket", "_count", "_sum")}
"""The sample names of a family beyond its own (a counter's TYPE line names it with `_total`)."""


def _port(log: Path) -> int:
    (entry,) = [entry for entry in log_entries(log) if entry["message"].startswith("metrics on")]
    port: int = entry["metrics_port"]
    return port


def _exported_names(port: int) -> set[str]:
    """The sample names a worker's `/metrics` declares: from its `# TYPE` lines, so that a
    labelled counter nothing has counted yet (no sample line) is there too."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    names = set()
    for family, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        names.add(family)
        names.update(family + suffix for suffix in SAMPLE_SUFFIXES.get(kind, ()))
    return names


def test_every_dashboard_query_names_a_metric_a_worker_exports(
    fresh_dsn: str, tmp_path: Path, running: list[subprocess.Popen[bytes]]
) -> None:
    """Every panel's query resolves against a real worker's `/metrics` (with a projection loaded,
    so that its series exist): no panel names a metric that is not there."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    named = {name for query in queries for name in re.findall(r"\bplatform_ingest_\w+", query)}
    assert len(named) >= 15
    root = tmp_path / "books"
    (root / "book-1").mkdir(parents=True)
    write(root / "book-1", hello(), spend(2, 10))
    log = tmp_path / "worker.log"
    running.append(
        start_worker(
            fresh_dsn,
            root,
            log,
            "--metrics-port",
            "0",
            "--projection",
            "projection_fixtures:Recording",
        )
    )
    wait_for("the port served", lambda: serves_metrics(log))
    wait_for(
        "a survey", lambda: worker_metrics(log)["platform_ingest_last_survey_timestamp_seconds"] > 0
    )
    exported = _exported_names(_port(log))
    missing = sorted(name for name in named if name not in exported)
    assert missing == [], f"the dashboard names metrics no worker exports: {missing}"
    assert stop_worker(running[0]) == 0


def test_the_runbooks_name_the_worker_unit_as_its_instances_are_named() -> None:
    """The worker's unit is a template whose instance is a number (its metrics port is 910 and
    the instance, docs/platform/workers.md): every runbook that restarts a worker names it so,
    never by a root (`platform-ingest-worker@ROOT` is no unit)."""
    workers = (ROOT / "docs" / "platform" / "workers.md").read_text()
    assert "/etc/systemd/system/platform-ingest-worker@.service" in workers
    assert "--metrics-port 910%i" in workers
    runbooks = [rule["annotations"]["runbook"] for rule in ALERTS.values()]
    named = [
        name for text in runbooks for name in re.findall(r"platform-ingest-worker@(\w+)", text)
    ]
    assert named, "no runbook restarts a worker"
    assert all(name == "N" or name.isdigit() for name in named), named
    assert all(
        "N the instance: its metrics port is 910N" in text
        for text in runbooks
        if "platform-ingest-worker@N" in text
    )
