"""docker-compose.yml is valid against the Compose Specification (no Docker engine here)."""

import subprocess
import sys
from pathlib import Path

import yaml

from kip.pipeline.access import AccessConfig

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = Path(__file__).resolve().parent / "compose-spec.json"   # copy of shared/compose


def test_compose_file_validates_against_the_compose_spec():
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA),
         str(ROOT / "docker-compose.yml")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compose_reserves_a_gpu_for_the_encoder_worker_and_wires_kip_settings():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    worker = compose["services"]["worker-minilm"]
    [device] = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and worker["environment"]["KIP_DEVICE"] == "cuda"
    AccessConfig.from_file(ROOT / "deploy" / "access.example.json")


def test_compose_runs_every_process_as_its_own_principal_with_no_secret_in_the_repo():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    roles = {"pipeline": "pipeline", "pipeline-background": "pipeline",
             "worker-minilm": "worker-minilm",
             "worker-digits": "worker-digits", "topics-init": "admin", "acls-init": "admin"}
    for service, user in roles.items():
        assert services[service]["environment"]["KIP_KAFKA_CONFIG"] == \
            f"/security/clients/{user}.json", service
    assert "secrets" not in compose and "access.example" not in yaml.safe_dump(compose)
    assert services["security-init"]["command"][:2] == ["security", "init"]
    assert "/mnt/shared/config" in " ".join(services["kafka"]["volumes"])


def test_interactive_requests_have_a_pipeline_of_their_own():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    classes = [services[name]["command"][services[name]["command"].index("--classes") + 1]
               for name in ("pipeline", "pipeline-background")]
    assert classes == ["interactive", "standard,batch"]


def test_a_broken_compose_file_is_caught(tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  x:\n    deploy: {resources: {reservations: {devices: 3}}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), str(bad)],
        capture_output=True, text=True)
    assert done.returncode != 0


def test_prometheus_loads_the_alert_rules_and_grafana_the_dashboard():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    assert "./deploy/monitoring/prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
    config = yaml.safe_load((ROOT / "deploy" / "monitoring" / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["alerts.yml"]
    scraped = set(config["scrape_configs"][0]["static_configs"][0]["targets"])
    for name, service in services.items():
        port = (service.get("environment") or {}).get("KIP_METRICS_PORT")
        if port:
            assert f"{name}:{port}" in scraped, name
            assert "/readyz" in " ".join(service["healthcheck"]["test"]), name
    grafana = " ".join(services["grafana"]["volumes"])
    assert "./deploy/monitoring/grafana/dashboards:/var/lib/grafana/dashboards" in grafana
    assert "./deploy/monitoring/grafana/provisioning:/etc/grafana/provisioning" in grafana
