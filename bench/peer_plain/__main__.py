"""The peer of the orchestration-overhead benchmark: the same objects, plain pulumi-kubernetes.

Same compiled manifests as our program (components.compile: Namespace, ServiceAccount and, per
model, weights PVC, puller Job, Deployment, Service), declared with pulumi-kubernetes alone and
its native awaits: no `pulumi.com/skipAwait` annotation, no WeightsGate (so no hand-off of the
puller's pods), no ModelStatus (no classified failure, no routable-target check). Order is the
obvious one: PVC -> Job (awaited to completion) -> Deployment (awaited ready) -> Service
(awaited until it has endpoints).

bench/run.py runs it in a throwaway copy of the project (testkit/harness.py), where it
replaces __main__.py and reads the same `llm-serving:*` stack config. Vanilla vLLM models only
(no secrets, router or NIM): that is all the benchmark declares.
"""

import json
import sys
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

# Run from bench/peer_plain/ rather than a project copy: the repo root's packages. Appended, so a
# project copy's own `components` (beside this file, first on sys.path) wins.
sys.path.append(str(Path(__file__).resolve().parents[2]))

from components.compile import compile_model
from components.compile.common import SKIP_AWAIT
from components.compile.stack import compile_model_service_account, compile_namespace
from components.config import load_stack_config
from components.config.loader import PROJECT, SECTIONS, section_values
from components.config.stack_secrets import SECRET_SECTIONS
from components.resources.kubernetes import apply

config = pulumi.Config(PROJECT)


def _section(name: str):
    value = config.get(name)
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def native_awaits(manifest: dict) -> dict:
    """The manifest without our skipAwait annotation: pulumi-kubernetes awaits it natively."""
    meta = dict(manifest["metadata"])
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in SKIP_AWAIT}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    return {**manifest, "metadata": meta}


stack = load_stack_config(section_values(_section, [name for name in SECTIONS if name not in SECRET_SECTIONS]))
provider = k8s.Provider("cluster", kubeconfig=stack.cluster.kubeconfig, context=stack.cluster.context)
opts = pulumi.ResourceOptions(provider=provider)

platform_deps = []
if stack.platform.create_namespace:
    platform_deps.append(apply("platform-namespace", compile_namespace(stack), opts))
platform_deps.append(apply("platform-model-service-account", compile_model_service_account(stack.platform),
                           pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(platform_deps)))))


def after(*deps: pulumi.Resource) -> pulumi.ResourceOptions:
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(deps)))


for model in stack.models:
    m = compile_model(model, stack)
    weights = apply(f"{model.name}-weights", native_awaits(m.weights_pvc), after(*platform_deps))
    puller = apply(f"{model.name}-puller", native_awaits(m.puller_job), after(weights))
    server = apply(f"{model.name}-server", native_awaits(m.deployment), after(puller))
    apply(f"{model.name}-service", native_awaits(m.service), after(server))

pulumi.export("namespace", stack.platform.namespace)
pulumi.export("models", [model.name for model in stack.models])
