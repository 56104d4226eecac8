"""Kubernetes Secrets made from the stack's Pulumi secrets (``llm-serving:hfToken``,
``llm-serving:ngcApiKey``).

Pure and value-free: the manifests here carry no data. The program (``resources.platform``) adds
the value as a secret Output, so it exists only encrypted in the stack state and in the cluster.
``render`` never writes these Secrets: a rendered file would hold the value in plain text (that is
what pulumi-kubernetes' renderYamlToDirectory does with Secret data), and a data-less copy applied
by a GitOps tool could blank the real one. Rendered stacks create them in the cluster instead.

A Secret is declared only when a model reads it: the config model makes it the default
``hfTokenSecret`` / ``nim.authSecret`` of models that name no Secret of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.loader import PROJECT
from ..config.model import reads_stack_secret
from ..config.stack import StackConfig
from ..config.stack_secrets import HF_TOKEN_SECRET, NGC_API_KEY, NGC_API_KEY_SECRET
from ..config.types import SecretKeyRef
from . import common

SECRET_COMPONENT = "credentials"
VALUE_FROM_ANNOTATION = f"{common.DOMAIN}/value-from"


@dataclass(frozen=True)
class StackSecret:
    config_key: str  # `llm-serving:<config_key>`, set with `pulumi config set --secret`
    ref: SecretKeyRef  # the Kubernetes Secret and the key the value goes under
    manifest: dict  # without data


def _manifest(ref: SecretKeyRef, config_key: str, namespace: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": ref.name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/component": SECRET_COMPONENT,
                "app.kubernetes.io/part-of": common.PART_OF,
                "app.kubernetes.io/managed-by": "pulumi",
            },
            "annotations": {VALUE_FROM_ANNOTATION: f"pulumi-config:{PROJECT}:{config_key}"},
        },
    }


def uses_hf_token(stack: StackConfig) -> bool:
    return any(m.hf_token_secret is not None and m.hf_token_secret.name == HF_TOKEN_SECRET.name
               for m in stack.models)


def uses_ngc_api_key(stack: StackConfig) -> bool:
    return any(reads_stack_secret(m, NGC_API_KEY) for m in stack.models)


def stack_secrets(stack: StackConfig) -> list[StackSecret]:
    """The Secrets to create from stack secrets: each configured one that a model reads."""
    namespace = stack.platform.namespace
    found = []
    if stack.hf_token is not None and uses_hf_token(stack):
        found.append(StackSecret("hfToken", HF_TOKEN_SECRET, _manifest(HF_TOKEN_SECRET, "hfToken", namespace)))
    if stack.ngc_api_key is not None and uses_ngc_api_key(stack):
        found.append(StackSecret("ngcApiKey", NGC_API_KEY_SECRET,
                                 _manifest(NGC_API_KEY_SECRET, "ngcApiKey", namespace)))
    return found


def unused_stack_secrets(stack: StackConfig) -> list[str]:
    """Configured stack secrets no model reads (the program warns about them)."""
    used = {secret.config_key for secret in stack_secrets(stack)}
    configured = [key for key, value in (("hfToken", stack.hf_token), ("ngcApiKey", stack.ngc_api_key))
                  if value is not None]
    return [key for key in configured if key not in used]
