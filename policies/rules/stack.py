"""Weight-readiness gating: no serving Deployment before its weights are complete.

Each model's server Deployment must depend (directly or through other resources) on that model's
WeightsGate dynamic resource, found by type and by its `model` input (or its name
`<model>-weights-gate`). Dependencies are read from the engine's resource graph
(`dependencies` and `property_dependencies`).

A server that streams its weights straight from an object store (vLLM given an `s3://` or `gs://`
model with `--load-format runai_streamer`, and no PersistentVolumeClaim in its pod: the program's
`source.load: stream`) has no weights of ours to gate: it is exempt, and the policy says so by
reading exactly those facts from its pod spec.

Rendering mode: a stack whose Kubernetes provider writes YAML (`renderYamlToDirectory`) talks to no
cluster, so the program declares no dynamic resources. There the Deployment must at least depend
on its model's puller Job (manifests are applied later in dependency order by whoever applies
them). Any other stack without the gate is a violation.

Per-pod weights (a multi-node model with ``multiNode.weights: perPod``): a LeaderWorkerSet whose
``leaderWorkerTemplate.volumeClaimTemplates`` give each pod its own weights volume has no gate or
Job to wait on; instead each pod template (leader and worker) must fill and check the volume before
its server starts: an init container ``weights-pull`` (then ``weights-verify`` where the source has
one) mounting the claim at the revision directory (``subPath``) every server container reads, and
the servers mounting it read-only. A server container that mounts the claim elsewhere, or a pod
with no pull step, could start on weights nobody verified: a violation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import stack_rule
from .kube import (
    COMPONENT_LABEL,
    MODEL_LABEL,
    PULLER,
    REVISION_OF_LABEL,
    SERVER,
    UNKNOWN,
    Finding,
    K8sObject,
    Stack,
    StackResource,
    as_list,
    containers,
    get,
    labelled,
    unchecked,
    violation,
)

GATE_TYPE = "pulumi-python:dynamic/llm-serving:WeightsGate"
# Per-pod weights: the init containers (contract.labels.WEIGHTS_*_INIT; the pack does not import
# the program) that fill and check a pod's own volume.
PULL_STEP, VERIFY_STEP = "weights-pull", "weights-verify"
ROLES = ("leaderTemplate", "workerTemplate")
GATE_SUFFIX = "-weights-gate"


def gate_model(resource: StackResource) -> Any:
    model = get(resource.props, "model")
    if isinstance(model, str) and model:
        return model
    return resource.name[: -len(GATE_SUFFIX)] if resource.name.endswith(GATE_SUFFIX) else None


STREAM_SCHEMES = ("s3://", "gs://")
STREAM_LOAD_FORMAT = "runai_streamer"


def load_format(args: list) -> Any:
    """The value of vLLM's `--load-format` (`--load_format`, `=value` too) in a container's args."""
    for index, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name in ("--load-format", "--load_format"):
            return value if value else (args[index + 1] if index + 1 < len(args) else None)
    return None


def streams_weights(obj: K8sObject) -> bool:
    """A server Deployment that reads its weights from an object store and mounts no claim."""
    if obj.kind != "Deployment":
        return False
    _, spec = obj.pod_spec()
    volumes = as_list(get(spec, "volumes")) if isinstance(spec, dict) else UNKNOWN
    if volumes is UNKNOWN or any(get(v, "persistentVolumeClaim") is not None for v in volumes or []):
        return False
    for container in as_list(get(spec, "containers")) or []:
        args = get(container, "args")
        if (isinstance(args, list) and args and all(isinstance(a, str) for a in args)
                and args[0].startswith(STREAM_SCHEMES) and load_format(args) == STREAM_LOAD_FORMAT):
            return True
    return False


def rendering(resource: StackResource) -> Any:
    """True when the resource's Kubernetes provider only renders YAML; UNKNOWN if unknowable."""
    target = get(resource.provider_props, "renderYamlToDirectory")
    if target is UNKNOWN:
        return UNKNOWN
    return isinstance(target, str) and target != ""


@stack_rule(
    "llm-serving-stack-server-weights-gate",
    "Every serving Deployment (app.kubernetes.io/component: server) depends on its model's "
    "WeightsGate (pulumi-python:dynamic/llm-serving:WeightsGate), so serving starts only once the "
    "weights are complete and the puller has released the volume; when rendering YAML "
    "(renderYamlToDirectory, no gate exists) it depends on the model's puller Job. A server that "
    "streams its weights from an object store (an s3:// or gs:// model with --load-format "
    "runai_streamer, no PersistentVolumeClaim mounted) has no weights to gate and is exempt.",
    fix="Declare the Deployment with depends_on=[<model>-weights-gate] (VllmModel/NimModel do), and "
    "label it llm-serving.dev/model.",
    severity="high",
    config={"gateType": {"type": "string", "default": GATE_TYPE,
                         "description": "Type token of the weight gate resource."}},
)
def server_weights_gate(stack: Stack, config: dict) -> Iterator[Finding]:
    gates: dict[Any, list[StackResource]] = {}
    for resource in stack.of_type(config["gateType"]):
        gates.setdefault(gate_model(resource), []).append(resource)
    servers, pullers = [], {}
    for resource, obj in stack.k8s_objects():
        if obj.kind not in ("Deployment", "LeaderWorkerSet", "Job"):
            continue
        component, findings = labelled(obj, COMPONENT_LABEL, "component")
        yield from (Finding(f.message, resource.urn, True) for f in findings)
        if obj.kind in ("Deployment", "LeaderWorkerSet") and component == SERVER and not streams_weights(obj):
            servers.append((resource, obj))
        elif obj.kind == "Job" and component == PULLER:
            model = obj.label(MODEL_LABEL)
            pullers.setdefault(model, []).append(resource)
    for resource, obj in servers:
        if obj.kind == "LeaderWorkerSet":
            claims = per_pod_claims(obj)
            if claims is UNKNOWN:
                yield unchecked(f"{obj.display}: its volumeClaimTemplates", resource.urn)
                continue
            if claims:
                yield from per_pod_findings(obj, resource, claims)
                continue
        model, findings = labelled(obj, MODEL_LABEL, "model")
        if findings:
            yield from (Finding(f.message, resource.urn, True) for f in findings)
            continue
        if model is None:
            yield violation(f"{obj.display} has no {MODEL_LABEL} label, so its weight gate cannot be "
                            "found; label it with its model name", resource.urn)
            continue
        # A next revision's server (models[].next) waits on the gate of the weights it uses: its
        # own, declared under its model's name, or its model's.
        revision_of = obj.label(REVISION_OF_LABEL)
        model_gates = gates.get(model, []) + (gates.get(revision_of, []) if isinstance(revision_of, str) else [])
        if model_gates:
            if not any(stack.depends_on(resource.urn, gate.urn) for gate in model_gates):
                yield violation(f"{obj.display} does not depend on WeightsGate '{model_gates[0].name}', "
                                "so it can start before the weights are complete; add it to the "
                                "Deployment's depends_on", resource.urn)
            continue
        mode = rendering(resource)
        if mode is UNKNOWN:
            yield unchecked(f"{obj.display}: whether its provider renders YAML", resource.urn)
        elif not mode:
            yield violation(f"{obj.display}: the stack has no WeightsGate for model '{model}' "
                            f"('{model}{GATE_SUFFIX}'); declare the gate and make the Deployment "
                            "depend on it", resource.urn)
        else:
            jobs = (pullers.get(model, []) + pullers.get(UNKNOWN, [])
                    + (pullers.get(revision_of, []) if isinstance(revision_of, str) else []))
            if not jobs:
                yield violation(f"{obj.display} (rendering mode): the stack has no puller Job for "
                                f"model '{model}'; declare it and make the Deployment depend on it",
                                resource.urn)
            elif not any(stack.depends_on(resource.urn, job.urn) for job in jobs):
                yield violation(f"{obj.display} (rendering mode) does not depend on its model's "
                                "puller Job; add the Job to the Deployment's depends_on", resource.urn)


def per_pod_claims(obj: Any) -> Any:
    """Names of a LeaderWorkerSet's per-pod claims (its volumeClaimTemplates); UNKNOWN if unknowable."""
    templates = get(obj.props, "spec", "leaderWorkerTemplate", "volumeClaimTemplates", default=[])
    if templates is UNKNOWN or not isinstance(templates, list):
        return UNKNOWN if templates is UNKNOWN else set()
    names = set()
    for claim in templates:
        name = get(claim, "metadata", "name")
        if name is UNKNOWN:
            return UNKNOWN
        if isinstance(name, str):
            names.add(name)
    return names


def _claim_mounts(container: Any, claims: set) -> list[dict]:
    return [m for m in get(container, "volumeMounts", default=[]) or []
            if isinstance(m, dict) and m.get("name") in claims]


def per_pod_findings(obj: Any, resource: StackResource, claims: set) -> Iterator[Finding]:
    """Each pod template fills and checks its own volume before any server container reads it."""
    for role in ROLES:
        path = ("spec", "leaderWorkerTemplate", role, "spec")
        spec = get(obj.props, *path)
        where = f"{obj.display} {role}"
        refs, unknown = containers(spec, ".".join(path))
        if unknown or spec is UNKNOWN:
            yield unchecked(f"{where}: its containers", resource.urn)
            continue
        init = [c for c in get(spec, "initContainers", default=[]) or [] if isinstance(c, dict)]
        steps = {c.get("name"): c for c in init}
        pull = steps.get(PULL_STEP)
        if pull is None or not _claim_mounts(pull, claims):
            yield violation(f"{where}: its per-pod weights volume has no '{PULL_STEP}' init container filling "
                            "it, so the server could start on an empty or unverified volume; render the pull and "
                            "verify steps (multiNode.weights: perPod does)", resource.urn)
            continue
        revision = {m.get("subPath") for m in _claim_mounts(pull, claims)}
        checked = steps.get(VERIFY_STEP)
        if checked is not None and {m.get("subPath") for m in _claim_mounts(checked, claims)} != revision:
            yield violation(f"{where}: '{VERIFY_STEP}' checks another directory than '{PULL_STEP}' filled; "
                            "mount both at the same subPath", resource.urn)
        for ref in refs:
            if ref.path.split(".")[-1].startswith("initContainers"):
                continue
            for mount in _claim_mounts(ref.container, claims):
                if {mount.get("subPath")} != revision or mount.get("readOnly") is not True:
                    yield violation(f"{where}: {ref.path} mounts the per-pod weights volume "
                                    f"(subPath {mount.get('subPath')!r}, readOnly {mount.get('readOnly')!r}) other "
                                    f"than the directory '{PULL_STEP}' filled and checked "
                                    f"({sorted(str(r) for r in revision)}), or writably; mount exactly that "
                                    "subPath, read-only", resource.urn)
