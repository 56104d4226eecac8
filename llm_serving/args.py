"""The typed arguments of ``ModelServing``: plain dataclasses and enums a program builds, turned
into the stack config's shape and validated by the same config model the stack files go through
(components/config), so a bad value is refused with the same message, before any resource.

Each class carries the common settings as typed fields; ``settings`` takes any other setting of
the same section by its stack-config name (docs/config-reference.md), e.g.
``ModelArgs(..., settings={"lora": {"enabled": True}})``. A setting given both ways is refused.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from components.config.secret_values import credential_shape


class Engine(enum.StrEnum):
    VLLM = "vllm"
    NIM = "nim"


@dataclass(frozen=True)
class HubSource:
    """Weights from a Hugging Face repository (``revision``: a commit, a tag or a branch; pin a
    commit: the library runs no preflight that would pin it for you)."""

    repo: str
    revision: str = "main"
    allow_patterns: Optional[Sequence[str]] = None

    def to_config(self, where: str = "HubSource") -> dict:
        return _drop_none({"type": "hf", "repo": self.repo, "revision": self.revision,
                           "allowPatterns": _list(self.allow_patterns, f"{where}.allow_patterns")})


@dataclass(frozen=True)
class S3Source:
    """Weights from an S3 bucket (``credentials_secret``: a Secret in the namespace with the
    access key pair; leave it out for a service account's role)."""

    bucket: str
    prefix: str = ""
    endpoint: Optional[str] = None
    region: Optional[str] = None
    credentials_secret: Optional[str] = None

    def to_config(self, where: str = "S3Source") -> dict:
        return _drop_none({"type": "s3", "bucket": self.bucket, "prefix": self.prefix, "endpoint": self.endpoint,
                           "region": self.region,
                           "credentials": {"secret": self.credentials_secret} if self.credentials_secret else None})


@dataclass(frozen=True)
class VolumeSource:
    """Weights already on a PersistentVolumeClaim of the namespace, served read-only."""

    claim_name: str
    sub_path: Optional[str] = None

    def to_config(self, where: str = "VolumeSource") -> dict:
        return _drop_none({"type": "pvc", "claimName": self.claim_name, "subPath": self.sub_path})


Source = Union[HubSource, S3Source, VolumeSource]


@dataclass(frozen=True)
class Resources:
    """The server container's requests (limits follow the config model's rules); ``kv_cache``: a
    CPU model's (``gpus=0``) KV cache, whole GiB (unset: derived from ``memory``)."""

    cpu: Optional[str] = None
    memory: Optional[str] = None
    kv_cache: Optional[str] = None

    def to_config(self) -> dict:
        return _drop_none({"cpu": self.cpu, "memory": self.memory, "kvCache": self.kv_cache})


@dataclass(frozen=True)
class ModelArgs:
    """One model server (a ``models[]`` entry)."""

    name: str
    source: Source
    engine: Engine = Engine.VLLM
    image: Optional[str] = None
    gpus: Optional[int] = None
    replicas: Optional[int] = None
    args: Optional[Sequence[str]] = None
    resources: Optional[Resources] = None
    weights_size: Optional[str] = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_config(self, where: Optional[str] = None) -> dict:
        """``where``: how a refusal names this model (``models[0]`` inside ``ModelServingArgs``)."""
        where = where or f"ModelArgs(name={_shown(self.name)})"
        typed = _drop_none({
            # An unknown engine goes to the config model as it is, which refuses it at
            # models[i].engine with the engines there are (and never repeats a credential).
            "name": self.name, "engine": self.engine.value if isinstance(self.engine, Engine) else self.engine,
            "source": _config_of(self.source, f"{where}.source"),
            "image": self.image, "gpus": self.gpus, "replicas": self.replicas, "args": _list(self.args, f"{where}.args"),
            "resources": self.resources.to_config() if self.resources else None,
            "weights": {"size": self.weights_size} if self.weights_size else None,
        })
        return _merged(typed, self.settings, where)


@dataclass(frozen=True)
class RouterArgs:
    """The request router in front of the models (``router``), with its OpenAI gateway."""

    name: Optional[str] = None
    image: Optional[str] = None
    replicas: Optional[int] = None
    models: Optional[Sequence[str]] = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_config(self) -> dict:
        typed = _drop_none({"name": self.name, "image": self.image, "replicas": self.replicas,
                            "models": _list(self.models, "RouterArgs.models")})
        return _merged(typed, self.settings, "RouterArgs")


@dataclass(frozen=True)
class ModelServingArgs:
    """Models (and a router) in one namespace of the cluster the program's provider points at.

    ``namespace``: created and owned by your program (give it in ``depends_on``), unless
    ``create_namespace``. ``kubeconfig_content``: the kubeconfig your ``kubernetes.Provider`` is
    given (content, e.g. a cluster resource's output; kept secret), for the resources that read
    the cluster (status, weights gate, checks): without it they read ``kubeconfig``/``context`` (a
    path; unset: the ambient kubeconfig), which must then be your provider's cluster.
    ``platform``: any other platform setting by its stack-config name."""

    namespace: str
    models: Sequence[ModelArgs]
    router: Optional[RouterArgs] = None
    create_namespace: bool = False
    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    kubeconfig_content: Optional[Any] = None  # pulumi.Input[str]: not part of the stack config
    platform: Mapping[str, Any] = field(default_factory=dict)

    def to_config(self) -> dict:
        """The stack config these arguments stand for (components/config's input shape)."""
        platform = _merged({"namespace": self.namespace, "createNamespace": self.create_namespace,
                            # No network while a program declares: the stack program's Hub
                            # preflight (pinning revisions) is not run by the library.
                            "preflight": {"enabled": False}},
                           self.platform, "ModelServingArgs.platform", overridable=("preflight",))
        if isinstance(self.models, (str, bytes)) or not isinstance(self.models, Sequence):
            raise TypeError(f"ModelServingArgs.models: a list of ModelArgs, not {type(self.models).__name__}")
        config: dict = {"platform": platform, "models": [_model_config(m, i) for i, m in enumerate(self.models)],
                        "cluster": _drop_none({"kubeconfig": self.kubeconfig, "context": self.context})}
        if self.router is not None:
            if not isinstance(self.router, RouterArgs):
                raise TypeError(f"ModelServingArgs.router: a RouterArgs, not {type(self.router).__name__}")
            config["router"] = self.router.to_config()
        return config


def _model_config(model: Any, index: int) -> dict:
    if not isinstance(model, ModelArgs):
        raise TypeError(f"ModelServingArgs.models[{index}]: a ModelArgs, not {type(model).__name__}")
    return model.to_config(f"models[{index}]")


def _config_of(source: Any, where: str) -> dict:
    if not isinstance(source, (HubSource, S3Source, VolumeSource)):
        raise TypeError(f"{where}: a HubSource, S3Source or VolumeSource, not {type(source).__name__}")
    return source.to_config(where)


# A value a refusal may repeat: a short plain word (a model or engine name). Anything else, and
# anything shaped like a credential, is described, never repeated: these messages end up in
# terminals and CI logs.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else None
    if text is not None and _PLAIN_WORD.fullmatch(text) and credential_shape(text) is None:
        return repr(text)
    return f"<a {type(value).__name__}, not repeated>"


def _merged(typed: dict, settings: Mapping[str, Any], where: str, overridable: tuple[str, ...] = ()) -> dict:
    if not isinstance(settings, Mapping):
        raise TypeError(f"{where}: a mapping of stack-config names to values (docs/config-reference.md), "
                        f"not {type(settings).__name__}")
    both = sorted(key for key in settings if key in typed and key not in overridable)
    if both:
        raise ValueError(f"{where}: {', '.join(both)} given both as an argument and in settings; give it once")
    return {**typed, **dict(settings)}


def _list(values: Optional[Sequence[str]], where: str) -> Optional[list[str]]:
    if values is None:
        return None
    if isinstance(values, (str, bytes)):
        # Never repeated: a command line written as one string is where a pasted token sits.
        raise TypeError(f"{where}: a list of strings, one item per word (e.g. ['--max-model-len', '4096']), not one "
                        "string; split it")
    if not isinstance(values, Sequence):
        raise TypeError(f"{where}: a list of strings, not {type(values).__name__}")
    return list(values)


def _drop_none(values: dict) -> dict:
    return {key: value for key, value in values.items() if value is not None}
