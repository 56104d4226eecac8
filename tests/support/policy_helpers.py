"""A compliant world for the policy rules, and the small tools to mutate it one field at a time.

Every object comes from the project's own compilers (models on both NIM paths, the router and
its backend router, the teardown identity, and the Secret the stack makes from `hfToken`, as
compile/secrets.py declares it: value-free, the program adds the value), so the pack is proven to
accept what they emit. The resource graph mirrors the components' wiring
(PVC -> puller Job -> WeightsGate -> Deployment -> Service); ``test_policy_component_graph.py``
checks the real components produce a graph the stack rules accept.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from components.compile import compile_stack
from components.compile.secrets import stack_secrets
from components.config import load_stack_config
from policies.rules.base import Rule, violations
from policies.rules.kube import Finding, K8sObject, Stack, StackResource, type_token
from policies.rules.stack import GATE_TYPE

NAMESPACE = "llm-serving"
NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3"

STACK = {
    "platform": {"sharedMemorySizeLimit": "1Gi", "imagePullSecrets": ["registry-credentials"],
                 "teardownIdentity": {"enabled": True},
                 # The models' ServiceMonitors and the dashboard ConfigMap.
                 "metrics": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
    # A stack secret (`pulumi config set --secret hfToken`): the stack's one Secret, which the
    # pullers of the models without their own hfTokenSecret read and teardown deletes by name.
    "hfToken": {"secure": "v1:policy-tests"},
    "models": [
        # Two GPUs, tensor parallel, LoRA (an init container), shared weights, two replicas.
        {"name": "llama", "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct",
                                     "revision": "0e9e39f249a16976918f6564b8830bc894c89659"},
         "gpus": 2, "tensorParallelSize": 2, "replicas": 2, "resources": {"memory": "48Gi"},
         "weights": {"accessMode": "ReadWriteMany"}, "lora": {"enabled": True}},
        {"name": "qwen", "source": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"}, "resources": {"memory": "8Gi"}},
        # Across two nodes (multiNode): a LeaderWorkerSet, its leader and worker pod templates.
        {"name": "llama-405b", "source": {"repo": "meta-llama/Llama-3.1-405B-Instruct"}, "gpus": 8,
         "tensorParallelSize": 8, "resources": {"memory": "512Gi"},
         "weights": {"accessMode": "ReadWriteMany", "size": "1Ti"}, "multiNode": {"nodes": 2}},
        # A CPU model (gpus: 0): vLLM's CPU server, no GPU, its CPU limit, threads and KV cache.
        {"name": "qwen-cpu", "gpus": 0, "source": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"},
         "resources": {"cpu": "2", "memory": "8Gi"}},
        # NIM on the raw path: same objects, NIM's image and identity (1000/2000).
        {"name": "nim-llama", "engine": "nim", "image": NIM_IMAGE,
         "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "48Gi"}},
        # NIM on the operator path: NIMCache + NIMService.
        {"name": "nim-op", "engine": "nim", "path": "operator", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4",
         "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "48Gi"},
         "nim": {"authSecret": "ngc-api"}},
    ],
    # Two router replicas: the backend router (Deployment, Role on EndpointSlices) comes with it.
    "router": {"replicas": 2, "image": "ghcr.io/llm-serving/router:0.4.1",
               "backendRouter": {"image": "nvcr.io/nvidia/llm-backend-router:0.1.0"}},
}


def stack_secret_manifests(raw: Optional[dict] = None) -> list[dict]:
    """The Secrets the program creates from stack secrets (compile_stack leaves them out)."""
    return [secret.manifest for secret in stack_secrets(load_stack_config(raw or STACK))]


def compiled_manifests(raw: Optional[dict] = None) -> list[dict]:
    return compile_stack(load_stack_config(raw or STACK))


# ---- the world: manifests plus the resource graph the components declare ------------------

PROVIDER_URN = "urn:pulumi:test::llm-serving::pulumi:providers:kubernetes::cluster"


def urn(token: str, name: str) -> str:
    return f"urn:pulumi:test::llm-serving::{token}::{name}"


def logical_name(manifest: dict) -> str:
    """The Pulumi resource name the components give an object (a fallback name when a test made
    a naming field unknown)."""
    try:
        return _logical_name(manifest)
    except (AttributeError, KeyError, TypeError):
        name = manifest.get("metadata", {}).get("name") if isinstance(manifest.get("metadata"), dict) else None
        return f"{str(manifest.get('kind')).lower()}-{name if isinstance(name, str) else id(manifest)}"


def _logical_name(manifest: dict) -> str:
    labels = manifest["metadata"].get("labels", {})
    model = labels.get("llm-serving.dev/model")
    component = labels.get("app.kubernetes.io/component")
    kind = manifest["kind"]
    if model and manifest["apiVersion"] != "apps.nvidia.com/v1alpha1":
        role = {("PersistentVolumeClaim", "weights"): "weights", ("Job", "weights-puller"): "puller",
                ("Deployment", "server"): "server", ("LeaderWorkerSet", "server"): "server",
                ("Service", "server"): "service",
                ("PodDisruptionBudget", "server"): "pdb",
                ("ScaledObject", "autoscaler"): "scaled-object",
                ("ServiceMonitor", "metrics"): "service-monitor"}[(kind, component)]
        return f"{model}-{role}"
    if kind == "Namespace":
        return "platform-namespace"
    if kind == "ServiceAccount" and manifest["metadata"]["name"] == "llm-serving-model":
        return "platform-model-service-account"
    return f"{kind.lower()}-{manifest['metadata']['name']}"


@dataclass
class World:
    manifests: list[dict]
    rendering: bool = False
    removed_edges: set[tuple[str, str]] = field(default_factory=set)
    added_edges: set[tuple[str, str]] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)       # logical names left out of the stack
    extra: list[StackResource] = field(default_factory=list)

    # -- finding objects
    def get(self, kind: str, name: str) -> dict:
        (found,) = [m for m in self.manifests if m["kind"] == kind and m["metadata"]["name"] == name]
        return found

    def one(self, kind: str, component: Optional[str] = None) -> dict:
        """The single object of a kind (and component label): names are the compilers' business."""
        (found,) = [m for m in self.manifests if m["kind"] == kind and (
            component is None or m["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component)]
        return found

    def remove(self, manifest: dict) -> None:
        self.manifests.remove(manifest)

    def server(self, model: str) -> dict:
        return self.get("Deployment", model)

    def puller(self, model: str) -> dict:
        (found,) = [m for m in self.manifests if m["kind"] == "Job"
                    and m["metadata"]["labels"]["llm-serving.dev/model"] == model]
        return found

    # -- what the rules see
    def objects(self) -> list[K8sObject]:
        return [K8sObject.from_manifest(m, logical_name(m), urn(type_token(m["apiVersion"], m["kind"]), logical_name(m)))
                for m in self.manifests]

    def stack(self) -> Stack:
        names = {logical_name(m): m for m in self.manifests}
        tokens = {n: type_token(m["apiVersion"], m["kind"]) for n, m in names.items()}
        deps: dict[str, list[str]] = {n: [] for n in names}
        platform = [n for n in ("platform-namespace", "platform-model-service-account") if n in names]
        if "platform-model-service-account" in deps and "platform-namespace" in names:
            deps["platform-model-service-account"].append("platform-namespace")
        models = {name.removesuffix("-server") for name, m in names.items()
                  if m["kind"] in ("Deployment", "LeaderWorkerSet") and name.endswith("-server")}
        gates: dict[str, StackResource] = {}
        for model in sorted(models):
            if not self.rendering:
                gate_name = f"{model}-weights-gate"
                tokens[gate_name] = GATE_TYPE
                deps[gate_name] = [f"{model}-puller"]
                puller = names.get(f"{model}-puller")
                gates[gate_name] = StackResource(GATE_TYPE, gate_name, urn(GATE_TYPE, gate_name), {
                    "namespace": NAMESPACE, "model": model,
                    "puller_job": puller["metadata"]["name"] if puller else "",
                    "weights_ready": True,
                })
            deps.setdefault(f"{model}-weights", []).extend(platform)
            deps.setdefault(f"{model}-puller", []).append(f"{model}-weights")
            deps.setdefault(f"{model}-server", []).append(f"{model}-puller" if self.rendering else f"{model}-weights-gate")
            deps.setdefault(f"{model}-service", []).append(f"{model}-server")
        for name in names:
            if name not in {f"{m}-{r}" for m in models for r in ("weights", "puller", "server", "service")} \
                    and not name.startswith("platform-"):
                deps[name].extend(platform)
        for frm, to in self.added_edges:
            deps.setdefault(frm, []).append(to)
        provider = {"renderYamlToDirectory": "build/render"} if self.rendering else {"context": "gpu-prod"}
        resources = []
        for name, token in tokens.items():
            if name in self.removed:
                continue
            dep_urns = tuple(urn(tokens[d], d) for d in deps.get(name, [])
                             if d in tokens and (name, d) not in self.removed_edges and d not in self.removed)
            if name in gates:
                g = gates[name]
                resources.append(StackResource(g.type, g.name, g.urn, g.props, dep_urns))
            else:
                resources.append(StackResource(token, name, urn(token, name), names[name], dep_urns, provider))
        return Stack(tuple(resources + self.extra))


def compliant(rendering: bool = False, raw: Optional[dict] = None) -> World:
    """The compiled world of ``STACK`` (or of another stack config ``raw``)."""
    return World(compiled_manifests(raw) + ([] if rendering else stack_secret_manifests(raw)), rendering=rendering)


def run(rule: Rule, world: World, config: Optional[dict] = None) -> list[Finding]:
    if rule.scope == "stack":
        return rule(world.stack(), config)
    return [finding for obj in world.objects() for finding in rule(obj, config)]


def messages(findings: list[Finding]) -> str:
    return "\n".join(f.message for f in findings)


# ---- mutations ----------------------------------------------------------------------------

def pod(manifest: dict, role: str = "worker") -> dict:
    if manifest["kind"] == "CronJob":
        return manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if manifest["kind"] == "LeaderWorkerSet":  # its leader's or its workers' pod template
        return manifest["spec"]["leaderWorkerTemplate"][f"{role}Template"]["spec"]
    return manifest["spec"]["template"]["spec"]


def container(manifest: dict, name: Optional[str] = None) -> dict:
    """A container by name; without a name, the pod's first (main) container."""
    spec = pod(manifest)
    if name is None:
        return spec["containers"][0]
    (found,) = [c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == name]
    return found


def put(obj: dict, path: str, value: Any) -> None:
    """Set a dotted path (creating dicts); ``DELETE`` removes the key."""
    *parents, last = path.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    if value is DELETE:
        obj.pop(last, None)
    else:
        obj[last] = value


DELETE = object()


@dataclass(frozen=True)
class Case:
    """One failure case: the compliant world, one mutation, the rule that must now fail."""

    rule: Rule
    id: str
    mutate: Callable[[World], None]
    expect: str
    config: Optional[dict] = None
    rendering: bool = False
    raw: Optional[dict] = None  # the stack config the compliant world is compiled from (None: STACK)

    def world(self) -> World:
        world = compliant(self.rendering, self.raw)
        self.mutate(world)
        return world


def check_case(case: Case) -> list[Finding]:
    found = violations(run(case.rule, case.world(), case.config))
    assert found, f"{case.rule.name} did not fail for: {case.id}"
    assert case.expect in messages(found), f"expected {case.expect!r} in:\n{messages(found)}"
    return found


def deep(value: Any) -> Any:
    return copy.deepcopy(value)
