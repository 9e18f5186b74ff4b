"""``kip rollout`` on the real broker: start, promote and rollback each write the next
revision of the alias's release, status tells the history, and a version that does not
verify is not released."""

from __future__ import annotations

import asyncio

import pytest

from kip.cli import main
from kip.rollout import history
from kip.models.registry import Registry
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames
from tests.pipeline.conftest import DIGITS_MANIFEST

pytestmark = pytest.mark.broker


def test_start_promote_rollback_and_status(broker, prefix, tmp_path, monkeypatch, capsys):
    registry = Registry(tmp_path / "registry")
    versions = []
    for content in (b"stable", b"canary"):
        artifact = tmp_path / "model.onnx"
        artifact.write_bytes(content)
        versions.append(registry.publish(artifact, DIGITS_MANIFEST, {}).manifest)
    stable, canary = versions
    registry.set_alias("digits", f"digits@{stable.version}")
    names = TopicNames(prefix)
    asyncio.run(apply(broker.kafka, catalogue(names, ["digits"], partitions=1)))
    for name, value in (("KIP_BOOTSTRAP", broker.bootstrap), ("KIP_TOPIC_PREFIX", prefix),
                        ("KIP_REGISTRY_DIR", str(registry.root)),
                        ("KIP_HOME", str(tmp_path / "home"))):
        monkeypatch.setenv(name, value)

    assert main(["rollout", "start", "digits", f"digits@{canary.version}", "--canary", "10",
                 "--reason", "retrained"]) == 0
    assert main(["rollout", "start", "digits", f"digits@{canary.version}"]) != 0
    assert "promote or roll back first" in capsys.readouterr().err
    assert main(["rollout", "promote", "digits"]) == 0
    assert main(["rollout", "rollback", "digits", "--reason", "p99 doubled"]) == 0
    assert main(["rollout", "pin", "digits", "acme", f"digits@{canary.version}"]) == 0
    assert main(["rollout", "pin", "digits", "acme"]) == 0
    capsys.readouterr()
    assert main(["rollout", "status", "digits"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[1].split(" by ")[0] for line in lines] == [
        "start", "promote", "rollback", "pin", "unpin"]
    assert f"pins {{'acme': 'digits@{canary.version}'}}" in lines[3]
    assert f"digits@{stable.version} 90%, digits@{canary.version} 10% (retrained)" in lines[0]
    assert lines[2].endswith(f"digits@{stable.version} 100% (p99 doubled)")

    releases = asyncio.run(history(broker.kafka, names, "digits"))
    assert [r.revision for r in releases] == [1, 2, 3, 4, 5]
    assert releases[1].routes[0].artifact_sha256 == canary.artifact_sha256

    (registry.root / "digits" / canary.version / "model.onnx").write_bytes(b"altered")
    assert main(["rollout", "start", "digits", f"digits@{canary.version}"]) != 0
    assert "does not match the manifest" in capsys.readouterr().err
    assert len(asyncio.run(history(broker.kafka, names, "digits"))) == 5   # nothing released
