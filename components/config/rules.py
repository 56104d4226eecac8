"""Cross-field rules of one model that need several of its settings: the NIM paths and their
credentials, and per-engine identities. Paths are relative to the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic.alias_generators import to_snake

from .values import Problem

if TYPE_CHECKING:
    from .model import ModelConfig

# (uid, gid) each engine's image has a passwd entry for: vLLM's `vllm` user, NIM's user.
ENGINE_IDENTITY = {"vllm": (2000, 0), "nim": (1000, 2000)}


def nim_problems(model: ModelConfig) -> list[Problem]:
    """Engine / path combinations and the credentials each path needs."""
    if model.engine != "nim":
        return [Problem("nim", "NIM settings apply to engine 'nim' only; remove them")] if model.nim else []
    nim, problems = model.nim_settings, []
    if model.path == "raw":
        operator_only = ("cacheSource", "modelPuller", "pullSecret", "profiles", "cacheResources")
        for key in operator_only:
            if to_snake(key) in nim.model_fields_set:
                hint = (" (raw-path pods take their pull secrets from platform.imagePullSecrets)"
                        if key == "pullSecret" else "")
                problems.append(Problem(f"nim.{key}", "only used by path: operator (NIMCache); "
                                        f"remove it, or set path: operator{hint}"))
        return problems
    source = nim.cache_source or "ngc"
    if source == "hf" and not nim.pull_secret:
        problems.append(Problem("nim.pullSecret", "an hf cache source needs the image pull Secret of "
                                "its modelPuller (nvcr.io); name it here"))
    if source == "hf" and nim.profiles:
        problems.append(Problem("nim.profiles", "profiles select NGC-optimized profiles; an hf cache "
                                "downloads the whole repo: remove them or use cacheSource: ngc"))
    if "all" in nim.profiles and len(nim.profiles) > 1:
        problems.append(Problem("nim.profiles", "'all' caches every profile and must be the only entry"))
    if model.image and "@" in model.image and ":" not in model.image.split("@")[0].rsplit("/", 1)[-1]:
        problems.append(Problem("image", "the NIM operator takes repository and tag; add a tag before "
                                "the digest (repo:tag@sha256:...)"))
    if model.lora.enabled:
        problems.append(Problem("lora.enabled", "LoRA adapters are prepared by the raw path's init "
                                "container; the operator path does not support them: use path: raw"))
    if model.hf_token_secret:
        problems.append(Problem("hfTokenSecret", "the operator path reads HF_TOKEN from nim.authSecret; "
                                "put the token there and remove hfTokenSecret"))
    return problems


def auth_secret_problems(model: ModelConfig) -> list[Problem]:
    """The operator path needs nim.authSecret: checked on the model with the stack's secret
    defaults in place (a stack ngcApiKey fills it), so the stack asks for it."""
    nim = model.nim_settings
    if not model.on_operator or nim.auth_secret:
        return []
    source = nim.cache_source or "ngc"
    keys = "NGC_API_KEY" if source == "ngc" else "HF_TOKEN (and optionally NGC_API_KEY)"
    fix = ("set the stack secret llm-serving:ngcApiKey (`pulumi config set --secret "
           "ngcApiKey <key>`), or create the Secret and name it here" if source == "ngc"
           else "create it and name it here")
    return [Problem("nim.authSecret", f"the NIM operator needs a Secret with key {keys} "
                    f"for the NIMCache and NIMService; {fix}")]


def identity_problems(model: ModelConfig) -> list[Problem]:
    """uid/gid stay per engine: another engine's (or any other) identity must be explicit."""
    context = model.security_context
    if context is None:
        return []
    uid, gid = ENGINE_IDENTITY.get(model.engine, (None, None))
    problems: list[Problem] = []
    if not context.allow_non_default_identity:
        for key, value, default in (("runAsUser", context.run_as_user, uid),
                                    ("runAsGroup", context.run_as_group, gid)):
            if value is None or value == default:
                continue
            borrowed = [e for e, ident in ENGINE_IDENTITY.items()
                        if e != model.engine and ident[key == "runAsGroup"] == value]
            label = {"vllm": "vLLM", "nim": "NIM"}
            what = "uid" if key == "runAsUser" else "gid"
            whose = f"{label[borrowed[0]]}'s {what}, " if borrowed else ""
            problems.append(Problem(f"securityContext.{key}", (
                f"{value} is {whose}not the {label[model.engine]} image's {what} "
                f"({default}); an image without a passwd entry for it crashes "
                "(`getpwuid(): uid not found`). Remove it, or set "
                "securityContext.allowNonDefaultIdentity: true if the image has that user"
            )))
    elif context.run_as_user is None and context.run_as_group is None:
        problems.append(Problem("securityContext.allowNonDefaultIdentity",
                                "nothing to allow: set runAsUser/runAsGroup, or remove it"))
    return problems
