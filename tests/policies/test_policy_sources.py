"""The policy pack on s3 and pvc sources (issue 23): the objects their models compile to (rclone
pull and verify containers, an existing claim mounted read-only) pass every object rule, as the
Hub's do; a rule that finds something here means the compiler emits what the pack forbids."""

from __future__ import annotations

from policies.rules import ALL_RULES
from tests.support.policy_helpers import World, compiled_manifests, messages, run

SOURCES = {
    "platform": {"sharedMemorySizeLimit": "1Gi", "networkPolicy": {"enabled": True, "allowFrom": [
        {"namespaceSelector": {"kubernetes.io/metadata.name": "apps"}}]}},
    "models": [
        {"name": "objstore", "source": {"type": "s3", "bucket": "models", "prefix": "llama/",
                                        "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "s3-keys"}}},
        {"name": "irsa", "source": {"type": "s3", "bucket": "models", "prefix": "qwen/",
                                    "serviceAccountName": "models-reader"}},
        {"name": "onclaim", "source": {"type": "pvc", "claimName": "shared-weights", "subPath": "llama"}},
    ],
}


def test_every_object_rule_passes_on_s3_and_pvc_models():
    manifests = compiled_manifests(SOURCES)
    jobs = [m for m in manifests if m["kind"] == "Job"]
    images = {c["image"] for j in jobs for c in [*j["spec"]["template"]["spec"].get("initContainers", []),
                                                  *j["spec"]["template"]["spec"]["containers"]]}
    assert len(jobs) == 3 and images == {"docker.io/rclone/rclone:1.76.0"}
    findings = [f for rule in ALL_RULES if rule.scope != "stack" for f in run(rule, World(manifests))]
    assert not findings, messages(findings)
