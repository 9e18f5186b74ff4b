"""docker-compose.yml is valid against the Compose Specification (no Docker engine here)."""

import subprocess
import sys
from pathlib import Path

import yaml

from pipeline.access import AccessConfig
from topics.catalogue import MAX_MESSAGE_BYTES

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
    assert compose["services"]["pipeline"]["environment"]["KIP_BOOTSTRAP"] == "kafka:9092"
    AccessConfig.from_file(ROOT / "deploy" / "access.example.json")


def test_a_broken_compose_file_is_caught(tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text("services:\n  x:\n    deploy: {resources: {reservations: {devices: 3}}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--schemafile", str(SCHEMA), str(bad)],
        capture_output=True, text=True)
    assert done.returncode != 0


def test_the_compose_broker_takes_the_largest_record_the_catalogue_allows():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    kafka = compose["services"]["kafka"]["environment"]
    assert int(kafka["KAFKA_MESSAGE_MAX_BYTES"]) == MAX_MESSAGE_BYTES
