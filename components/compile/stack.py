"""The raw objects of one model, and the stack-wide ones (``plan.compile_stack`` puts them in order)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..config.model import ModelConfig
from ..config.platform import PlatformConfig
from ..config.stack import StackConfig
from . import autoscaling, common, engines, multinode, network, server, weights


@dataclass(frozen=True)
class ModelManifests:
    """The objects of one model (the order they are declared in is its plan's: compile/plan.py)."""

    model: ModelConfig
    names: common.ModelNames
    weights_pvc: Optional[dict]  # None: a `pvc` source's existing claim (never ours), per-pod volumes, or a stream
    puller_job: Optional[dict]  # None: per-pod volumes (multiNode.weights: perPod) pull in the pods; a streamed
    # s3 source (source.load: stream) is read by the server itself
    deployment: dict  # the server: a Deployment, or a LeaderWorkerSet for a multi-node model
    service: dict
    network_policy: Optional[dict] = None  # platform.networkPolicy; before the pods it guards
    puller_network_policy: Optional[dict] = None  # platform.networkPolicy: the puller's egress
    pod_disruption_budget: Optional[dict] = None  # models that may run several server pods
    scaled_object: Optional[dict] = None  # autoscaling: KEDA scales the Deployment


def compile_model(model: ModelConfig, stack: StackConfig) -> ModelManifests:
    """The raw objects of one model (vLLM, or NIM on the raw path)."""
    stack = engines.stack_for(model, stack)  # a model's own uid/gid reaches all of its pods
    multi = model.multi_node is not None
    shared = not multinode.per_pod(model)  # per-pod volumes: no volume, Job or puller policy of the model's
    return ModelManifests(
        model=model,
        names=common.ModelNames.of(model),
        weights_pvc=weights.compile_weights_pvc(model, stack.platform) if shared else None,
        puller_job=weights.compile_puller_job(model, stack.platform) if shared else None,
        deployment=(multinode.compile_leader_worker_set(model, stack) if multi
                    else server.compile_server_deployment(model, stack)),
        service=multinode.compile_leader_service(model, stack) if multi else server.compile_service(model, stack.platform),
        network_policy=network.compile_model_network_policy(model, stack),
        puller_network_policy=network.compile_puller_network_policy(model, stack) if shared else None,
        pod_disruption_budget=server.compile_pod_disruption_budget(model, stack.platform),
        scaled_object=autoscaling.compile_scaled_object(model, stack),
    )


def pod_security_labels(stack: StackConfig) -> dict:
    """The Pod Security Standard the namespace enforces. Every workload this program renders meets
    `restricted`, so the API server is told to refuse anything that does not — unless a model is
    on the NIM operator path: the operator (k8s-nim-operator v3.1.2, its Deployment and
    LeaderWorkerSet templates) renders the server container without a securityContext (no
    allowPrivilegeEscalation: false, no capabilities drop, no runAsNonRoot; seccomp only on VMware
    TKGS), so `restricted` refuses its pods (FailedCreate, seen on the simulated cluster). The
    namespace then enforces `baseline` (still no privileged pods, host namespaces, hostPath or
    added capabilities) and keeps `restricted` as warn and audit, so anything below it is named
    on apply and in the audit log; the policy pack still holds our own objects to `restricted`."""
    enforce = "baseline" if any(model.on_operator for model in stack.models) else "restricted"
    labels = {"pod-security.kubernetes.io/enforce": enforce, "pod-security.kubernetes.io/enforce-version": "latest"}
    if enforce != "restricted":
        for mode in ("warn", "audit"):
            labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
            labels[f"pod-security.kubernetes.io/{mode}-version"] = "latest"
    return labels


def compile_namespace(stack: StackConfig) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": stack.platform.namespace,
            "labels": {
                "app.kubernetes.io/part-of": common.PART_OF,
                "app.kubernetes.io/managed-by": "pulumi",
                **pod_security_labels(stack),
            },
        },
    }


def compile_model_service_account(platform: PlatformConfig) -> dict:
    """Identity of serving and puller pods: bound to no Role, its token never mounted."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": platform.service_account_name,
            "namespace": platform.namespace,
            "labels": {"app.kubernetes.io/part-of": common.PART_OF, "app.kubernetes.io/managed-by": "pulumi"},
        },
        "automountServiceAccountToken": False,
    }
