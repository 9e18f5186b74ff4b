"""kip's Prometheus files checked offline by promtool: the alert rules (syntax, and their
unit tests in deploy/monitoring/prometheus/alerts_test.yml), the scrape config, and every query of
the Grafana dashboard (each parsed as a recording rule)."""

import json
import subprocess

import pytest

from kip.devkit.prometheus import (ALERT_RULES, DASHBOARD, PrometheusUnavailable, binary,
                                   dashboard_queries)


@pytest.fixture(scope="module")
def promtool() -> str:
    try:
        return binary("promtool")
    except PrometheusUnavailable as err:
        pytest.skip(str(err))


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=60)


def test_the_alert_rules_check_and_pass_their_unit_tests(promtool):
    checked = _run(promtool, "check", "rules", str(ALERT_RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _run(promtool, "test", "rules", "alerts_test.yml", cwd=ALERT_RULES.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_planted_error_in_a_rule_fails_the_check(promtool, tmp_path):
    broken = tmp_path / "alerts.yml"
    broken.write_text(ALERT_RULES.read_text().replace("max by (model) (kip_pipeline_live_workers)",
                                                      "max by (model) (kip_pipeline_live_workers", 1))
    assert _run(promtool, "check", "rules", str(broken)).returncode != 0


def test_the_scrape_config_checks(promtool):
    checked = _run(promtool, "check", "config", "prometheus.yml", cwd=ALERT_RULES.parent)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_every_dashboard_query_parses(promtool, tmp_path):
    queries = dashboard_queries()
    assert len(queries) >= 15
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"kip:panel_{i}", "expr": expr} for i, (_, _, expr) in enumerate(queries)]}]}
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(json.dumps(rules))
    checked = _run(promtool, "check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    panels = json.loads(DASHBOARD.read_text())["panels"]
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == ["Traffic", "Latency", "Batches", "Lag", "Workers and models", "GPU",
                    "Rollouts and health gate", "Health of what kip reads"]
    assert {p["datasource"]["uid"] for p in panels if p["type"] != "row"} == {"kip-prometheus"}
