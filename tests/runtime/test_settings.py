"""Settings hygiene: every ``KIP_`` variable is a settings field, documented in the README,
and read only through the settings classes."""

from __future__ import annotations

import re
from pathlib import Path

from kip.devkit.layers import modules
from kip.devkit.settings import DevSettings
from kip.batch.settings import BatchSettings
from kip.pipeline.settings import PipelineSettings
from kip.runtime.settings import KafkaSettings, KipSettings
from tests.conftest import repo_root
from kip.workers.settings import WorkerSettings

SETTINGS = (KipSettings, PipelineSettings, WorkerSettings, DevSettings, KafkaSettings,
            BatchSettings)
READS_ENV = re.compile(r"""(environ\.get\(|environ\[|getenv\()\s*["']KIP_""")


def test_every_settings_field_is_in_the_readme_table():
    readme = (repo_root() / "README.md").read_text()
    table = {m.group(1) for m in re.finditer(r"^\| `(KIP_[A-Z_]+)`", readme, re.MULTILINE)}
    fields = {f"{cls.model_config['env_prefix']}{name.upper()}" for cls in SETTINGS
              for name in cls.model_fields}
    assert fields - table == set()


def test_no_module_reads_a_kip_variable_itself():
    readers = [str(p) for p in modules(repo_root()) if READS_ENV.search(p.read_text())]
    assert readers == []


def test_paths_default_to_places_under_home(monkeypatch, tmp_path):
    monkeypatch.setenv("KIP_HOME", str(tmp_path))
    assert KipSettings().registry_dir == tmp_path / "registry"
    assert PipelineSettings().access_file == tmp_path / "access.json"
    monkeypatch.setenv("KIP_REGISTRY_DIR", "/elsewhere")
    assert KipSettings().registry_dir == Path("/elsewhere")


def test_cli_and_worker_switches_are_settings(monkeypatch):
    monkeypatch.setenv("KIP_DEBUG", "1")
    monkeypatch.setenv("KIP_LOG_LEVEL", "INFO")
    monkeypatch.setenv("KIP_ASSUME_GPU", "1")
    assert KipSettings().debug and KipSettings().log_level == "INFO"
    assert WorkerSettings().assume_gpu
    assert KipSettings().kafka.bootstrap == KipSettings().bootstrap


def test_kafka_security_comes_from_the_config_file_then_the_variables(monkeypatch, tmp_path):
    config = tmp_path / "pipeline.json"
    config.write_text('{"bootstrap": "broker:9093", "security_protocol": "SASL_SSL", '
                      '"sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "pipeline", '
                      '"sasl_password": "from-file"}')
    monkeypatch.setenv("KIP_KAFKA_CONFIG", str(config))
    monkeypatch.setenv("KIP_KAFKA_SASL_PASSWORD", "from-env")
    kafka = KipSettings().kafka
    assert (kafka.bootstrap, kafka.sasl_username) == ("broker:9093", "pipeline")
    assert kafka.sasl_password.get_secret_value() == "from-env"
    assert "from-env" not in repr(kafka) and "from-env" not in str(KafkaSettings())
    monkeypatch.setenv("KIP_BOOTSTRAP", "elsewhere:9093")
    assert KipSettings().kafka.bootstrap == "elsewhere:9093"


def test_metrics_listen_on_loopback_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv("KIP_METRICS_HOST", raising=False)
    assert KipSettings().metrics_host == "127.0.0.1"
