"""The peer of the preview benchmark: our compiled objects declared by a plain pulumi-kubernetes
program, so the two previews differ only by what is ours.

bench/scale.py writes `peer.json` beside this file in a throwaway project copy: the manifests
`components.compile.compile_stack` makes for the stack (exactly what `python -m components render`
writes, so the Kubernetes objects' count and kinds match ours by construction) and where the
provider points (the render directory, or the cluster's kubeconfig). This program imports no
llm-serving code: no config model, no compile, no component, no dynamic resource (our WeightsGate
and ModelStatus hold no Kubernetes object, so a plain program has nothing in their place). Order
is the obvious one: the stack-wide objects first, then per model each object after the previous
one (PVC -> Job -> Deployment -> Service, and whatever else the model has), as bench/peer_plain does.
"""

import json
import re
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

MODEL_LABEL = "llm-serving.dev/model"
TYPED = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("batch/v1", "Job"): k8s.batch.v1.Job,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("apps/v1", "StatefulSet"): k8s.apps.v1.StatefulSet,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
}

peer = json.loads((Path(__file__).resolve().parent / "peer.json").read_text())
provider = k8s.Provider("cluster", kubeconfig=peer.get("kubeconfig") or "",
                        render_yaml_to_directory=peer.get("render_dir"))


def declare(index: int, manifest: dict, depends_on: list) -> pulumi.CustomResource:
    name = f"{index:04d}-{manifest['kind'].lower()}-{manifest['metadata']['name']}"
    opts = pulumi.ResourceOptions(provider=provider, depends_on=depends_on)
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    cls = TYPED.get((manifest["apiVersion"], manifest["kind"]))
    if cls is None:
        return k8s.apiextensions.CustomResource(name, api_version=manifest["apiVersion"], kind=manifest["kind"],
                                                **body, opts=opts)
    return cls(name, **{re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in body.items()}, opts=opts)


stack_wide: list = []
previous: dict[str, pulumi.Resource] = {}
for index, manifest in enumerate(peer["manifests"]):
    model = (manifest["metadata"].get("labels") or {}).get(MODEL_LABEL)
    if model is None:
        stack_wide.append(declare(index, manifest, list(stack_wide)))
    else:
        previous[model] = declare(index, manifest, [previous[model]] if model in previous else list(stack_wide))

pulumi.export("objects", len(peer["manifests"]))
