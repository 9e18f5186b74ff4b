"""deploy/kubernetes, rendered by kustomize and checked offline: every Kubernetes object
against the API's schemas (kubernetes-validate, strict: an unknown field fails, as
server-side field validation fails it), every ScaledObject against KEDA's CRD schema
(tests/deploy/keda-*.yaml, made as strict); then what kip needs of them: a worker
Deployment per model with static membership, probes, a grace period past its drain,
a PDB and a ScaledObject capped at the partitions; the pipelines split by class."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")
from kip.devkit.go_tools import ToolUnavailable, kustomize_binary  # noqa: E402
from tests.conftest import repo_root  # noqa: E402

HERE = Path(__file__).parent
KUBERNETES = "1.33.0"
PARTITIONS = 12   # docs/deploy.md: work topics of 12 partitions for this example
KEDA_CRD = HERE / "keda-v2.20.2-scaledobjects.yaml"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict]:
    try:
        kustomize = kustomize_binary()
    except ToolUnavailable as err:
        pytest.skip(str(err))
    tree = tmp_path_factory.mktemp("k8s") / "kubernetes"
    shutil.copytree(repo_root() / "deploy" / "kubernetes", tree)
    overlay = tree / "overlays" / "example"
    _placeholder_secrets(overlay)
    out = subprocess.run([str(kustomize), "build", str(overlay)], capture_output=True,
                         text=True, check=True, timeout=60)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def _placeholder_secrets(overlay: Path) -> None:
    """The files the overlay's secretGenerator reads (kept out of git), made up."""
    spec = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    for generator in spec["secretGenerator"]:
        for name in generator.get("files", []) + generator.get("envs", []):
            path = overlay / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("username=kip\npassword=not-a-secret\n" if name.endswith(".env")
                            else "{}\n")


def _scaledobject_schema() -> dict:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return _strict(served["schema"]["openAPIV3Schema"])


def _strict(schema: dict) -> dict:
    """The schema with unknown fields refused wherever the API server refuses them: an
    object that lists its properties and keeps no unknown fields."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for value in node.values():
            stack.extend(value if isinstance(value, list) else [value])
    return schema


def _validate(doc: dict) -> None:
    if doc["apiVersion"].startswith("keda.sh/"):
        jsonschema.validate(doc, _scaledobject_schema())
    else:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_every_rendered_manifest_validates(rendered):
    assert len(rendered) >= 15
    for doc in rendered:
        _validate(doc)


@pytest.mark.parametrize("kind, path, planted", [
    ("Deployment", ("spec", "template", "spec", "containers", 0), ("resource", {})),
    ("Deployment", ("spec", "template", "spec"), ("terminationGracePeriodSeconds", "45s")),
    ("PodDisruptionBudget", ("spec",), ("maxUnavailabe", 1)),
    ("ScaledObject", ("spec",), ("cooldownPeriods", 300)),
    ("ScaledObject", ("spec",), ("maxReplicaCount", "twelve")),
])
def test_a_planted_invalid_field_fails(rendered, kind, path, planted):
    doc = copy.deepcopy(next(d for d in rendered if d["kind"] == kind))
    node = doc
    for step in path:
        node = node[step]
    node[planted[0]] = planted[1]
    with pytest.raises(jsonschema.ValidationError):
        _validate(doc)


def _of(rendered, kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in rendered if d["kind"] == kind}


def test_workers_are_static_members_that_drain_and_scale_within_the_partitions(rendered):
    deployments, scaled = _of(rendered, "Deployment"), _of(rendered, "ScaledObject")
    pdbs = _of(rendered, "PodDisruptionBudget")
    workers = {n: d for n, d in deployments.items() if n.startswith("kip-worker-")}
    assert set(workers) == {"kip-worker-minilm", "kip-worker-digits"}
    for name, deployment in workers.items():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["KIP_GROUP_INSTANCE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.name"
        assert pod["terminationGracePeriodSeconds"] > float(env["KIP_DRAIN_TIMEOUT_S"]["value"])
        assert {"readinessProbe", "livenessProbe", "startupProbe"} <= set(container)
        assert name in pdbs and name in scaled
        so = scaled[name]["spec"]
        assert so["scaleTargetRef"]["name"] == name
        assert 1 <= so["minReplicaCount"] <= so["maxReplicaCount"] <= PARTITIONS
        assert so["cooldownPeriod"] >= 60
        assert so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
            "stabilizationWindowSeconds"] >= 60
    gpu = workers["kip-worker-minilm"]["spec"]["template"]["spec"]["containers"][0]
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_pipelines_split_by_class_and_nothing_starts_a_broker(rendered):
    deployments = _of(rendered, "Deployment")
    args = {n: d["spec"]["template"]["spec"]["containers"][0]["args"]
            for n, d in deployments.items() if n.startswith("kip-pipeline-")}
    assert args == {"kip-pipeline-interactive": ["pipeline", "--classes", "interactive"],
                    "kip-pipeline-background": ["pipeline", "--classes", "standard,batch",
                                                "--nice", "19"]}
    images = {c["image"] for d in deployments.values()
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"kip:0.1.0"}   # no Kafka, no ZooKeeper, no store of its own
    secrets = {n.rsplit("-", 1)[0] for n in _of(rendered, "Secret")}
    assert {"kip-keys", "kip-access", "kip-kafka-ca", "kip-kafka-pipeline",
            "kip-model-store"} <= secrets
    assert all(d["metadata"]["namespace"] == "kip" for d in rendered)


def test_every_process_is_probed_on_its_metrics_port(rendered):
    for name, deployment in _of(rendered, "Deployment").items():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz",
                                                         "port": "metrics"}, name
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz",
                                                          "port": "metrics"}, name


@pytest.fixture(scope="module")
def monitoring() -> list[dict]:
    try:
        kustomize = kustomize_binary()
    except ToolUnavailable as err:
        pytest.skip(str(err))
    out = subprocess.run([str(kustomize), "build", str(repo_root() / "deploy" / "monitoring")],
                         capture_output=True, text=True, check=True, timeout=60)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def test_the_alert_rules_and_dashboard_ship_as_config_maps(monitoring):
    for doc in monitoring:
        _validate(doc)
    maps = _of(monitoring, "ConfigMap")
    root = repo_root() / "deploy" / "monitoring"
    assert maps["kip-prometheus-rules"]["data"]["alerts.yml"] == \
        (root / "prometheus" / "alerts.yml").read_text()
    dashboard = maps["kip-grafana-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["kip.json"] == (root / "grafana" / "dashboards" / "kip.json").read_text()
    assert all(d["metadata"]["namespace"] == "monitoring" for d in monitoring)


def test_the_audit_verifier_holds_the_public_keys_alone(rendered):
    deployment = _of(rendered, "Deployment")["kip-audit-verify"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"][:3] == ["audit", "verify", "--every"]
    (keys,) = [v for v in pod["volumes"] if v["name"] == "keys"]
    assert keys["secret"]["items"] == [{"key": "result-public.json",
                                        "path": "result-public.json"}]
