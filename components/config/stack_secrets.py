"""Stack secrets: Pulumi secret config values (`llm-serving:hfToken`, `llm-serving:ngcApiKey`) that
the program turns into Kubernetes Secrets, never into a manifest, an output or a log.

One entry per secret in ``STACK_SECRETS``: the config key, its ``StackConfig`` field and the Secret
it becomes. The loader, the program and the config model all read this table; adding a stack
secret is an entry here, its ``StackConfig`` field, and which models read it (``model.py``
``SECRET_READERS``: the setting it fills where a model names no Secret of its own; tests check
that the three agree).

Defaults are resolved after validation, on typed models (``model.with_secret_defaults``, run by
the stack), so there is one spelling of every key and a model's own Secret always wins.
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import SecretKeyRef

HF_TOKEN_SECRET = SecretKeyRef(name="llm-serving-hf-token", key="token")
NGC_API_KEY_SECRET = SecretKeyRef(name="llm-serving-ngc-api-key", key="NGC_API_KEY")










@dataclass(frozen=True)
class StackSecretSpec:
    config_key: str  # `llm-serving:<config_key>`, set with `pulumi config set --secret`
    field: str  # the StackConfig field that holds its marker
    ref: SecretKeyRef  # the Kubernetes Secret (and key) the value goes into


HF_TOKEN = StackSecretSpec("hfToken", "hf_token", HF_TOKEN_SECRET)
NGC_API_KEY = StackSecretSpec("ngcApiKey", "ngc_api_key", NGC_API_KEY_SECRET)
STACK_SECRETS = (HF_TOKEN, NGC_API_KEY)
# The StackConfig sections typed StackSecret: the program reads them as secret Outputs only.
SECRET_SECTIONS = tuple(spec.config_key for spec in STACK_SECRETS)


# Validation context: the config keys of the stack secrets a raw stack sets (see present_in).
CONTEXT_KEY = "stack_secrets"


def present_in(raw: dict) -> frozenset[str]:
    """The stack secrets set in raw sections (either key spelling), for validation context."""
    return frozenset(spec.config_key for spec in STACK_SECRETS
                     if raw.get(spec.config_key) is not None or raw.get(spec.field) is not None)
