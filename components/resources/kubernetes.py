"""Hand a compiled manifest (plain dict) to pulumi-kubernetes, as the manifest says it.

One generic resource for every kind: the Kubernetes provider takes any object in its wire shape
(camelCase, ``apiVersion`` / ``kind`` / ``metadata`` / ...) under the type token
``kubernetes:<group>/<version>:<kind>`` (group ``core`` for ``v1``), which is the token the typed
classes (``k8s.apps.v1.Deployment`` ...) register, so the URNs, the state and what the provider and the policy pack see are the same.
What the typed classes add is not needed here and costs every preview: importing their modules
(pulumi_kubernetes.core.v1 and friends, about a second of CPU), translating our camelCase keys to
snake_case arguments and back per object, and aliases to beta API versions (apps/v1beta1 ...) this
project never deployed. The one exception is Secret, whose typed class marks ``data`` and
``stringData`` secret: it stays typed (imported only when a stack has one).
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi_kubernetes import _utilities


class KubernetesObject(pulumi.CustomResource):
    """Any Kubernetes object, declared from its manifest (the wire shape, passed through)."""

    def __init__(self, name: str, manifest: dict[str, Any], opts: Optional[pulumi.ResourceOptions] = None):
        # What every pulumi-kubernetes class merges in: the provider plugin's version.
        opts = pulumi.ResourceOptions.merge(_utilities.get_resource_opts_defaults(), opts)
        super().__init__(type_token(manifest), name, dict(manifest), opts)


def type_token(manifest: dict[str, Any]) -> str:
    """The pulumi-kubernetes type of a manifest's kind: the core group's objects say `v1`, their
    type says `core/v1` (pulumi-kubernetes' schema; e.g. `kubernetes:core/v1:Namespace`)."""
    api_version = manifest["apiVersion"]
    return f"kubernetes:{api_version if '/' in api_version else 'core/' + api_version}:{manifest['kind']}"


def apply(name: str, manifest: dict, opts: Optional[pulumi.ResourceOptions] = None) -> pulumi.CustomResource:
    """Declare ``manifest`` as a pulumi-kubernetes resource named ``name``."""
    if (manifest["apiVersion"], manifest["kind"]) == ("v1", "Secret"):
        from pulumi_kubernetes.core.v1 import Secret

        body = {k: v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
        return Secret(name, **{_SECRET_ARGS.get(k, k): v for k, v in body.items()}, opts=opts)
    return KubernetesObject(name, manifest, opts)


# Secret's top-level fields as its typed constructor names them.
_SECRET_ARGS = {"stringData": "string_data"}
