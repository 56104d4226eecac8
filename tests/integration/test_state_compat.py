"""A stack deployed by the code before the model-pipeline refactor keeps working with this code
(issue 14, item 6), on the real engine and the simulated cluster.

`pulumi up` with the program of commit 8485478 (extracted with `git archive`), then switch the
project to this checkout's program: `pulumi preview` shows no create, replace or delete and no
update but those listed (ALLOWED_*: each changed on purpose after the refactor, with its
reason); `pulumi refresh` and `pulumi destroy` run the
providers the old code pickled into the state (by their old module paths) and succeed.
"""

from __future__ import annotations

import json

import pytest

from testkit.harness import small_model, stack_config
from tests.support.names import stem

pytestmark = pytest.mark.integration

BASELINE = "8485478"  # main before the refactor: the code deployed stacks were created with
ROUTER_IMAGE = "registry.example.com/llm/request-router:0.16.2"

# The refactor itself (issue 14) changes nothing a deployed stack holds. What is listed here was
# changed on purpose by later work in the same release, each with its reason. Updates by
# (logical name, property path or a prefix of it).
ALLOWED_UPDATES: dict[tuple[str, str], str] = {
    ("compat-server", "spec.template.spec.enableServiceLinks"):
        "issue 15: no service links (a Service named like VLLM_* breaks vLLM's env parsing)",
    ("compat-server", "spec.template.spec.terminationGracePeriodSeconds"):
        "issue 16: server pods get drainSeconds + 15 s to stop (135 by default), so a rollout or a "
        "node drain lets running streams finish instead of the Kubernetes default 30 s",
    ("compat-server", "spec.template.spec.containers[0].lifecycle"):
        "issue 16: a preStop wait (drainSeconds, 120 by default): vLLM 0.11 aborts running "
        "requests on SIGTERM, so the pod finishes its streams before the signal",
    ("compat-status", "deployment_revision"): "the server's pod template changed (above): the status waits again",
    ("compat-status", "puller_job"): "the replaced puller Job has a name of its own (ALLOWED_REPLACES)",
    ("edge-workload", "spec.template"): "issue 17: the router runs as the llm-request-router chart 0.16.2 renders it",
    ("edge-service", "spec.ports"): "issue 17: the chart's ports (http 8000, grpc, quic, metrics)",
    ("edge-targets", "fronted_targets"): "issue 17: targets are read under the upstream rules (router pods, pylons)",
}
# Children a deployed stack gains (create) or gets anew (replace), by logical name, with the reason.
ALLOWED_CREATES: dict[str, str] = {
    "edge-service-account": "issue 17: the router's own identity, as the chart's",
    "edge-role": "issue 17: the chart's pod-reader Role",
    "edge-role-binding": "issue 17: binds it",
    "edge-headless-service": "issue 17: always rendered; the backend router and pylons watch it",
    # Issue 21: the OpenAI front door in front of the router, on by default; the router's own
    # objects are not touched by it (its NetworkPolicy only when networkPolicy is on).
    "edge-gateway": "issue 21: the gateway's nginx Deployment",
    "edge-gateway-config": "issue 21: its nginx.conf and njs script",
    "edge-gateway-service": "issue 21: the URL clients call",
    "edge-gateway-pdb": "issue 21: two gateway replicas by default",
    "edge-gateway-network-policy": "issue 21: networkPolicy covers the gateway",
}
ALLOWED_REPLACES: dict[str, str] = {
    # A Job's pod template is immutable: the puller's new template (no service links, read-only
    # root) replaces the finished Job once. The new Job re-checks the files against the hub and
    # downloads nothing the volume already holds; the volume itself is unchanged.
    "compat-puller": "issue 15: the puller's pod template changed",
    # The replaced Job has a name of its own (common.puller_name): the gate keyed on it waits for it.
    "compat-weights-gate": "the puller Job's new name: the gate waits for the new Job",
}


def allowed_update(name: str, path: str) -> bool:
    return any(name == allowed_name and (path == prefix or path.startswith((prefix + ".", prefix + "[")))
               for allowed_name, prefix in ALLOWED_UPDATES)


def config(namespace: str) -> dict:
    # Valid for both programs: no setting whose spelling changed between them (router resources).
    router = {"name": "edge", "image": ROUTER_IMAGE}
    return {**stack_config(namespace, [small_model("compat")]), "router": router}


def input_paths(old, new, prefix: str = "") -> list[str]:
    """Dotted paths where two recorded inputs differ (lists by index)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted((set(old) | set(new)) - {"__provider"})
        return [p for k in keys for p in input_paths(old.get(k), new.get(k), f"{prefix}{k}.")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [p for i, (o, n) in enumerate(zip(old, new, strict=True)) for p in input_paths(o, n, f"{prefix}[{i}].")]
    return [] if old == new else [prefix.rstrip(".") or "(whole value)"]


def changed_paths(step: dict) -> list[str]:
    """The properties an update changes: as the provider reports them, else (a dynamic provider
    reports none) where the old and new inputs differ."""
    paths = list((step.get("detailedDiff") or {}).keys()) or list(step.get("diffReasons") or [])
    if not paths:
        paths = input_paths((step.get("oldState") or {}).get("inputs") or {},
                            (step.get("newState") or {}).get("inputs") or {})
    return paths or ["(no property named)"]


@pytest.fixture(scope="module")
def moved(make_project):
    """A stack up with the old program, then switched to this one."""
    project = make_project(config)
    project.use_program(BASELINE)
    project.up()
    project.use_program()
    return project


def test_preview_with_the_new_code_changes_nothing(moved):
    assert (moved.root / "components" / "compile" / "plan.py").exists(), "the project must run this checkout"
    deployed = {r["urn"].rsplit("::", 1)[-1] for r in state_resources(moved)}
    assert {"compat-weights-gate", "compat-status", "edge-workload-kind", "edge-targets"} <= deployed, deployed
    steps = moved.preview_steps()
    unexpected = []
    for step in steps:
        # The weights children are named after their source since, aliased to the names before.
        name, op = stem(step["urn"].rsplit("::", 1)[-1]), step["op"]
        if op in ("same", "read"):
            continue
        if (op == "create" and name in ALLOWED_CREATES) or (op == "replace" and name in ALLOWED_REPLACES):
            continue
        if op != "update":
            unexpected.append(f"{op} {name} ({step['urn']})")
            continue
        unexpected += [f"update {name}: {path}" for path in changed_paths(step)
                       if not allowed_update(name, path)]
    assert unexpected == [], "a deployed stack would see:\n" + "\n".join(unexpected)


def state_resources(project) -> list[dict]:
    exported = json.loads(project.run("stack", "export").stdout)
    return exported["deployment"].get("resources") or []


def status_record(project) -> dict:
    [status] = [r for r in state_resources(project) if r["urn"].endswith("::compat-status")]
    return status


def test_refresh_runs_the_pickled_providers(moved):
    before = status_record(moved)["outputs"]["observed_at"]
    moved.run("refresh", "--yes", "--skip-preview")
    after = status_record(moved)["outputs"]
    # Re-read (a new observation) by the provider the old code pickled into the record.
    assert after["state"] == "READY", after
    assert after["observed_at"] != before


def test_destroy_with_the_new_code_succeeds(moved, kube):
    moved.run("destroy", "--yes", "--skip-preview")
    assert kube.AppsV1Api().list_namespaced_deployment(moved.namespace).items == []
