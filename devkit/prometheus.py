"""A real Prometheus on loopback, scraping a running kip, for the dashboard and alert tests.

It is the ``prometheus`` binary of the host (Debian's package has it, with ``promtool``;
scripts/bootstrap installs it as root). It loads kip's own alert rules
(deploy/monitoring/prometheus/alerts.yml) and scrapes the given targets every second, so a test
sees a rate after a few seconds and an alert's ``for`` window in real time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from kip.devkit.broker import free_port_run
from kip.devkit.stack import terminate

ROOT = Path(__file__).resolve().parent.parent
ALERT_RULES = ROOT / "deploy" / "monitoring" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "monitoring" / "grafana" / "dashboards" / "kip.json"


class PrometheusUnavailable(RuntimeError):
    """No prometheus binary on this host."""


def binary(name: str = "prometheus") -> str:
    found = shutil.which(name)
    if found is None:
        raise PrometheusUnavailable(f"no {name} on PATH (Debian: apt-get install prometheus)")
    return found


class PrometheusServer:
    """One Prometheus under ``home``, scraping ``targets`` (host:port) as job ``kip``."""

    def __init__(self, home: Path, targets: list[str], rules: Path = ALERT_RULES) -> None:
        self.home, self.targets, self.rules = Path(home), targets, rules
        self.port = free_port_run(1)
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "prometheus.yml"
        config.write_text(json.dumps({   # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.rules)],
            "scrape_configs": [{"job_name": "kip",
                                "static_configs": [{"targets": self.targets}]}]}))
        with open(self.home / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(
                [binary(), f"--config.file={config}", f"--storage.tsdb.path={self.home / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)
        give_up = time.monotonic() + timeout_s
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"prometheus did not start: see {self.home / 'prometheus.log'}")
            time.sleep(0.2)
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                return True
        except OSError:
            return False

    def api(self, path: str, **params) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus refused {path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """The instant vector ``expr`` evaluates to now."""
        return self.api("query", query=expr)["result"]

    def firing(self, alert: str) -> list[dict]:
        return [a for a in self.api("alerts")["alerts"]
                if a["labels"].get("alertname") == alert and a["state"] == "firing"]

    def stop(self) -> None:
        if self.proc is not None:
            terminate([self.proc], 10.0)


def dashboard_queries(dashboard: Path = DASHBOARD) -> list[tuple[str, str, str]]:
    """(row, panel title, expr) of every query of the dashboard."""
    out, row = [], ""
    for panel in json.loads(dashboard.read_text())["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        out += [(row, panel["title"], t["expr"]) for t in panel.get("targets", [])]
    return out
