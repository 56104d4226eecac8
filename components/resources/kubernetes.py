"""Hand a compiled manifest (plain dict) to the matching pulumi-kubernetes resource."""

from __future__ import annotations

import re
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

_CLASSES = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "PersistentVolumeClaim"): k8s.core.v1.PersistentVolumeClaim,
    ("v1", "Service"): k8s.core.v1.Service,
    ("v1", "Secret"): k8s.core.v1.Secret,
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


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def apply(name: str, manifest: dict, opts: Optional[pulumi.ResourceOptions] = None) -> pulumi.CustomResource:
    """Create the typed resource for ``manifest``; unknown kinds become CustomResources."""
    body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    cls = _CLASSES.get((manifest["apiVersion"], manifest["kind"]))
    if cls is not None:
        # Typed constructors take top-level fields in snake_case; nested dicts pass as they are
        # (wire-shape camelCase is what the provider expects there).
        return cls(name, **{_snake(k): v for k, v in body.items()}, opts=opts)
    return k8s.apiextensions.CustomResource(
        name, api_version=manifest["apiVersion"], kind=manifest["kind"], **body, opts=opts
    )
