"""Every manifest the compilers emit is valid Kubernetes, checked strictly (unknown fields fail)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from components.config import load_stack_config, read_stack_file
from tests.support.builders import NIM_IMAGE, ROOT, STACK_FIXTURES, compile_stack, model, stack

# The newest schema the installed kubernetes-validate ships; at least the 1.33 the project targets.
K8S_VERSION = kubernetes_validate.latest_version()


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split(".")[:2])


SHIPPED_STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
FIXTURE_STACKS = sorted(STACK_FIXTURES.glob("Pulumi.*.yaml"))


def rich_config():
    """Two vLLM models (one TP 2 with LoRA and a token, one minimal) and a raw-path NIM model."""
    return stack(
        model(
            "llama-tp", gpus=2, tensorParallelSize=2, replicas=2,
            weights={"accessMode": "ReadWriteMany", "storageClassName": "nfs"},
            sharedMemorySizeLimit="8Gi", healthPath="ping",
            lora={"enabled": True, "maxLoras": 2}, hfTokenSecret={"name": "hf-token"},
            tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            nodeSelector={"gpu": "a100"}, env={"VLLM_LOGGING_LEVEL": "DEBUG"},
        ),
        model("small"),
        model("nim-8b", engine="nim", image=NIM_IMAGE, args=["--verbose"]),
        imagePullSecrets=["ngc"], storageClassName="fast", hfEndpoint="http://hf-mirror.svc:8080",
    )


# Custom resources: kubernetes-validate ships no schema for them, so each is checked where its
# compiler is tested: the NIM operator's field by field against its API (test_nim_compile.py),
# cert-manager's and the router's ServiceMonitors in the router's compiler tests, the models'
# ServiceMonitor against the prometheus-operator CRD fixture (test_metrics.py), the ScaledObject
# against KEDA's CRD fixture (test_autoscaling.py), a LeaderWorkerSet against the LWS CRD
# (test_multinode.py). A LeaderWorkerSet's two pod templates are core/v1 and checked here.
CRD_GROUPS = ("apps.nvidia.com/", "cert-manager.io/", "monitoring.coreos.com/", "keda.sh/", "leaderworkerset.x-k8s.io/")


def _pod_templates(manifest: dict) -> list[dict]:
    """A LeaderWorkerSet's leader and worker templates, as core/v1 PodTemplates."""
    if manifest["kind"] != "LeaderWorkerSet":
        return []
    lwt = manifest["spec"]["leaderWorkerTemplate"]
    return [{"apiVersion": "v1", "kind": "PodTemplate",
             "metadata": {"name": f"{manifest['metadata']['name']}-{role}"}, "template": lwt[f"{role}Template"]}
            for role in ("leader", "worker")]


def assert_strictly_valid(manifests: list[dict]) -> None:
    assert manifests, "nothing rendered"
    for manifest in [*manifests, *(t for m in manifests for t in _pod_templates(m))]:
        if manifest["apiVersion"].startswith(CRD_GROUPS):
            continue
        name = f"{manifest['kind']}/{manifest['metadata']['name']}"
        try:
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{name} is not valid Kubernetes {K8S_VERSION}: {error}")


def test_schema_version_is_recent_enough():
    assert _version_tuple(K8S_VERSION) >= (1, 33)


@pytest.mark.parametrize("path", SHIPPED_STACKS, ids=[p.name for p in SHIPPED_STACKS])
def test_shipped_stack_renders_valid_manifests(path: Path):
    assert_strictly_valid(compile_stack(load_stack_config(read_stack_file(path))))


@pytest.mark.parametrize("path", FIXTURE_STACKS, ids=[p.name for p in FIXTURE_STACKS])
def test_fixture_stack_renders_valid_manifests(path: Path):
    assert_strictly_valid(compile_stack(load_stack_config(read_stack_file(path))))


def test_rich_config_renders_valid_manifests():
    manifests = compile_stack(rich_config())
    kinds = [m["kind"] for m in manifests]
    assert kinds.count("Deployment") == 3 and kinds.count("Job") == 3
    assert_strictly_valid(manifests)


def test_strict_validation_catches_unknown_fields():
    """Guards the guard: strict mode must reject a misspelt field, or the tests above prove nothing."""
    deployment = next(m for m in compile_stack(rich_config()) if m["kind"] == "Deployment")
    broken = {**deployment, "spec": {**deployment["spec"], "replica": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
