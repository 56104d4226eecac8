"""Preflight over a whole stack: one ``Check`` per model that the puller downloads, one verdict
each, and the stack with pinned revisions when every verdict allows it.

The endpoint asked is the model's own HF endpoint (the one the puller uses), unless the machine
running preview reaches the same hub by another URL: ``platform.preflight.endpoint``, or the
environment variable ``LLM_SERVING_HF_PREFLIGHT_ENDPOINT`` (which wins; CI and tests point it at
a mirror or a loopback server, since the puller's endpoint may never be loopback).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Optional

from ..config.model import ModelConfig
from ..config.stack import StackConfig
from ..config.stack_secrets import HF_TOKEN_SECRET
from . import hub, s3
from .adapters import preflight_adapters
from .decide import Check, Verdict, decide

ENDPOINT_ENV = "LLM_SERVING_HF_PREFLIGHT_ENDPOINT"

Fetch = Callable[..., tuple]


class PreflightError(Exception):
    """Preflight refused the stack: ``problems`` holds one ``models.N.field: reason`` line each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("preflight failed (nothing was created):\n" + "\n".join(f"  {p}" for p in problems))


@dataclass
class PreflightReport:
    stack: StackConfig                         # the stack to deploy: pinned revisions in place
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Per model: repo, the revision asked for, the commit deployed (None: not pinned).
    revisions: dict[str, dict] = field(default_factory=dict)


def s3_check(model: ModelConfig, stack: StackConfig, env: Mapping[str, str],
             list_objects: Callable = s3.list_objects,
             list_versions_at: Callable = s3.list_versions_at) -> s3.S3Verdict:
    """List an s3 source's prefix from this machine (as it was at ``versionAt``, if set); the
    verdict pins the listing when ``pin``."""
    source = model.source
    endpoint = (env.get(s3.ENDPOINT_ENV) or source.endpoint_url).rstrip("/")
    creds = s3.Credentials.from_env(env)
    # AWS: virtual-hosted requests (path style is deprecated there); other stores: path style.
    virtual_host = source.endpoint is None and not env.get(s3.ENDPOINT_ENV)
    pin = stack.platform.pin if model.pin is None else model.pin
    # The part sizes of multipart objects are for the puller's check of a pinned listing.
    sizes = {"part_sizes": True} if pin and not source.streams else {}
    if source.version_at:
        answer = list_versions_at(endpoint, source.region, source.bucket, source.prefix, creds,
                                  source.version_at, virtual_host=virtual_host, **sizes)
    else:
        answer = list_objects(endpoint, source.region, source.bucket, source.prefix, creds,
                              virtual_host=virtual_host, **sizes)
    preflight = stack.platform.preflight
    return s3.decide_s3(
        source, answer, endpoint=endpoint, pin=pin,
        volume_size=model.weights.size, volume_size_default="size" not in model.weights.model_fields_set,
        headroom_percent=preflight.headroom_percent, on_unreachable=preflight.on_unreachable,
        has_credentials=creds is not None, revisions_held=revisions_held(model))


def preflight_endpoint(model: ModelConfig, stack: StackConfig, env: Mapping[str, str]) -> str:
    override = env.get(ENDPOINT_ENV) or stack.platform.preflight.endpoint
    if override:
        return override.rstrip("/")
    return model.hf_endpoint or stack.platform.hf_endpoint


def revisions_held(model: ModelConfig) -> int:
    """Revisions the model's weights volume must hold at once (decide.Check.revisions_held)."""
    return 2 if model.multi_node is not None and model.multi_node.per_pod else 1


def reads_stack_token(model: ModelConfig) -> bool:
    """The model's puller reads the Secret made from the stack's `llm-serving:hfToken`."""
    secret = model.hf_token_secret
    return secret is not None and (secret.name, secret.key) == (HF_TOKEN_SECRET.name, HF_TOKEN_SECRET.key)


def check_for(model: ModelConfig, stack: StackConfig, env: Mapping[str, str],
              token_from_stack: bool = False) -> Check:
    preflight = stack.platform.preflight
    secret = model.hf_token_secret
    return Check(
        repo=model.source.repo,
        revision=model.source.revision,
        endpoint=preflight_endpoint(model, stack, env),
        pin=stack.platform.pin if model.pin is None else model.pin,
        allow_patterns=model.source.allow_patterns,
        ignore_patterns=model.source.ignore_patterns,
        volume_size=model.weights.size,
        volume_size_default="size" not in model.weights.model_fields_set,
        headroom_percent=preflight.headroom_percent,
        revisions_held=revisions_held(model),
        on_unreachable=preflight.on_unreachable,
        token_secret=f"{secret.name}/{secret.key}" if secret else None,
        token_from_stack=token_from_stack,
    )


def adapters_check(model: ModelConfig, stack: StackConfig, env: Mapping[str, str],
                   token_from_stack: bool = False) -> Check:
    """The hub settings the adapters of a model without a Hub source (s3, pvc) are asked with:
    the endpoint and token its server pod's ``lora-cache-init`` downloads with (the model's
    ``hfEndpoint`` / ``hfTokenSecret``, as for a Hub model's adapters). The repo and revision
    are each adapter's own (``preflight_adapters`` fills them)."""
    preflight = stack.platform.preflight
    secret = model.hf_token_secret
    return Check(
        repo="", revision="", endpoint=preflight_endpoint(model, stack, env),
        pin=stack.platform.pin if model.pin is None else model.pin,
        volume_size=model.lora.cache_size_limit, headroom_percent=preflight.headroom_percent,
        on_unreachable=preflight.on_unreachable, token_secret=f"{secret.name}/{secret.key}" if secret else None,
        token_from_stack=token_from_stack,
    )


def has_adapters(model: ModelConfig) -> bool:
    return not getattr(model, "on_operator", False) and model.lora.enabled and bool(model.lora.adapters)


def pinned(model: ModelConfig, revision: str) -> ModelConfig:
    if revision == model.source.revision:
        return model
    return model.model_copy(update={"source": model.source.model_copy(update={"revision": revision})})


def preflight_stack(stack: StackConfig, *, fetch: Fetch = hub.fetch,
                    env: Optional[Mapping[str, str]] = None, token=None,
                    stack_token: Optional[str] = None,
                    list_objects: Callable = s3.list_objects,
                    list_versions_at: Callable = s3.list_versions_at) -> PreflightReport:
    """Check every puller-downloaded model; raise ``PreflightError`` listing every problem, or
    return the stack to deploy (revisions pinned where ``pin``).

    ``stack_token`` is the stack's `llm-serving:hfToken`: a model whose puller reads the Secret
    made from it is checked with it (the token that will download, not the one on the machine
    running preview); other models with ``token`` (None: huggingface_hub's own, HF_TOKEN or
    `hf auth login`)."""
    env = os.environ if env is None else env
    problems: list[str] = []
    report = PreflightReport(stack)
    models: list[ModelConfig] = []

    def check_adapters(index: int, model: ModelConfig, base: Check, from_stack: bool) -> ModelConfig:
        # The adapters' init container downloads with this model's endpoint and token.
        adapters = preflight_adapters(model, base, fetch, token=stack_token if from_stack else token)
        problems.extend(f"models.{index}.{p.field}: {p.message}" for p in adapters.problems)
        report.warnings.extend(f"model '{model.name}': {w}" for w in adapters.warnings)
        report.notes.extend(f"model '{model.name}': {n}" for n in adapters.notes)
        report.revisions.setdefault(model.name, {})["adapters"] = adapters.revisions
        return adapters.model

    def hub_weights(index: int, model: ModelConfig) -> ModelConfig:
        """The puller runs `hf download` of ``source``: ask the Hub, pin the revision."""
        from_stack = bool(stack_token) and reads_stack_token(model)
        check = check_for(model, stack, env, token_from_stack=from_stack)
        answer, access = fetch(check.endpoint, check.repo, check.revision,
                               check.allow_patterns, check.ignore_patterns,
                               token=stack_token if from_stack else token)
        verdict = decide(check, answer, access)
        report.verdicts[model.name] = verdict
        report.revisions[model.name] = {"repo": check.repo, "requested": check.revision,
                                        "commit": verdict.commit if verdict.pinned else None}
        problems.extend(f"models.{index}.{p.field}: {p.message}" for p in verdict.errors)
        report.warnings.extend(f"model '{model.name}': {w}" for w in verdict.warnings)
        report.notes.extend(f"model '{model.name}': {n}" for n in verdict.notes)
        model = pinned(model, verdict.revision)
        if model.lora.enabled and model.lora.adapters:
            model = check_adapters(index, model, check, from_stack)
        return model

    def hub_adapters(index: int, model: ModelConfig) -> ModelConfig:
        """Base weights from elsewhere (a store, a claim, the NIM operator's cache), adapters from
        the Hub all the same."""
        if has_adapters(model):
            from_stack = bool(stack_token) and reads_stack_token(model)
            model = check_adapters(index, model, adapters_check(model, stack, env, from_stack), from_stack)
        return model

    def store_weights(index: int, model: ModelConfig) -> ModelConfig:
        """List the store's prefix; the listing pins the copy (``pin``)."""
        found = s3_check(model, stack, env, list_objects, list_versions_at)
        problems.extend(f"models.{index}.{p.field}: {p.message}" for p in found.errors)
        report.warnings.extend(f"model '{model.name}': {w}" for w in found.warnings)
        report.notes.extend(f"model '{model.name}': {n}" for n in found.notes)
        if found.manifest is not None:
            model = model.model_copy(update={"source": model.source.model_copy(update={"manifest": found.manifest})})
        return hub_adapters(index, model)

    # What preflight asks about each `source.type` on the raw path: the Hub, or the store; a pvc
    # claim is checked by its verify Job only. The NIM operator path caches through its NIMCache.
    weights_checks = {"hf": hub_weights, "s3": store_weights, "pvc": hub_adapters}
    for index, model in enumerate(stack.models):
        on_operator = getattr(model, "on_operator", False)
        models.append((hub_adapters if on_operator else weights_checks[model.source.type])(index, model))
    if problems:
        raise PreflightError(problems)
    report.stack = stack.model_copy(update={"models": tuple(models)})
    return report
