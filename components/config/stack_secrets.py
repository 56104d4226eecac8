"""Stack secrets: Pulumi secret config values (`llm-serving:hfToken`, `llm-serving:ngcApiKey`) that
the program turns into Kubernetes Secrets, never into a manifest, an output or a log.

One entry per secret in ``STACK_SECRETS``: the config key, the Secret it becomes, and which models
read it when they name no Secret of their own. The loader, the program and the config model all
read this table; adding a stack secret is an entry here plus its ``StackConfig`` field (a test
checks that the two agree).

Defaults are resolved after validation, on typed models (``with_secret_defaults``), so there is
one spelling of every key and a model's own Secret always wins.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from .types import SecretKeyRef

if TYPE_CHECKING:  # model.py imports this module; the models are only passed in
    from .model import ModelConfig

HF_TOKEN_SECRET = SecretKeyRef(name="llm-serving-hf-token", key="token")
NGC_API_KEY_SECRET = SecretKeyRef(name="llm-serving-ngc-api-key", key="NGC_API_KEY")


def _hf_token_default(model: ModelConfig) -> Optional[dict]:
    # The operator path reads HF_TOKEN from nim.authSecret, never from hfTokenSecret.
    if model.on_operator or model.hf_token_secret is not None:
        return None
    return {"hf_token_secret": HF_TOKEN_SECRET}


def _ngc_api_key_default(model: ModelConfig) -> Optional[dict]:
    nim = model.nim_settings
    if model.engine != "nim" or nim.auth_secret:
        return None
    if model.on_operator and nim.cache_source == "hf":
        return None  # an hf cache needs HF_TOKEN in the same Secret: the user's own Secret
    return {"nim": nim.model_copy(update={"auth_secret": NGC_API_KEY_SECRET.name})}


def _reads_hf_token(model: ModelConfig) -> bool:
    ref = model.hf_token_secret
    return ref is not None and (ref.name, ref.key) == (HF_TOKEN_SECRET.name, HF_TOKEN_SECRET.key)


def _reads_ngc_api_key(model: ModelConfig) -> bool:
    return model.engine == "nim" and model.nim_settings.auth_secret == NGC_API_KEY_SECRET.name


@dataclass(frozen=True)
class StackSecretSpec:
    config_key: str  # `llm-serving:<config_key>`, set with `pulumi config set --secret`
    field: str  # the StackConfig field that holds its marker
    ref: SecretKeyRef  # the Kubernetes Secret (and key) the value goes into
    # The update that makes a model read this Secret, or None when the model does not use it
    # (it names its own Secret, or its path reads credentials elsewhere).
    default_for: Callable[[ModelConfig], Optional[dict]]
    # Whether a (resolved) model reads the Secret: the stack creates it only then.
    reads: Callable[[ModelConfig], bool]


HF_TOKEN = StackSecretSpec("hfToken", "hf_token", HF_TOKEN_SECRET, _hf_token_default, _reads_hf_token)
NGC_API_KEY = StackSecretSpec("ngcApiKey", "ngc_api_key", NGC_API_KEY_SECRET, _ngc_api_key_default,
                              _reads_ngc_api_key)
STACK_SECRETS = (HF_TOKEN, NGC_API_KEY)
# The StackConfig sections typed StackSecret: the program reads them as secret Outputs only.
SECRET_SECTIONS = tuple(spec.config_key for spec in STACK_SECRETS)


# Validation context: the config keys of the stack secrets a raw stack sets (see present_in).
CONTEXT_KEY = "stack_secrets"


def present_in(raw: dict) -> frozenset[str]:
    """The stack secrets set in raw sections (either key spelling), for validation context."""
    return frozenset(spec.config_key for spec in STACK_SECRETS
                     if raw.get(spec.config_key) is not None or raw.get(spec.field) is not None)


def configured(stack) -> tuple[StackSecretSpec, ...]:
    """The stack secrets this stack sets."""
    return tuple(spec for spec in STACK_SECRETS if getattr(stack, spec.field) is not None)


def used(stack) -> tuple[StackSecretSpec, ...]:
    """The stack secrets this stack sets and at least one of its models reads."""
    return tuple(spec for spec in configured(stack) if any(spec.reads(model) for model in stack.models))


def with_secret_defaults(model: ModelConfig, specs: tuple[StackSecretSpec, ...]) -> ModelConfig:
    """``model`` reading the given stack secrets wherever it names no Secret of its own."""
    for spec in specs:
        update = spec.default_for(model)
        if update:
            model = model.model_copy(update=update)
    return model
