"""``ModelServingArgs``: the set of models (and a router) ``ModelServing`` declares, and the names the
library had before its arguments were generated from the config model.

The sections (``Model``, ``Router``, ``Platform``, ``HubSource``, ``S3Source``, ... in
llm_serving/sections.py) are the stack config's, field for field, typed. ``ModelServingArgs`` holds
what a stack file says outside them: the namespace and whether to create it (``platform.namespace``,
``platform.createNamespace``), the cluster (``cluster.*``) and the stack secrets (``hfToken``,
``ngcApiKey``), which take a ``pulumi.Input`` (a secret from another resource).

Kept for programs written against the earlier arguments, each with what replaces it:
``ModelArgs`` (``Model``; its ``settings`` mapping and ``weights_size``), ``RouterArgs``
(``Router``; ``settings``), ``S3Source(credentials_secret=...)`` (``credentials=S3Credentials(...)``)
and ``ModelServingArgs(platform={...})`` (``platform=Platform(...)``). They still work and warn
(DeprecationWarning).
"""

from __future__ import annotations

import enum
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, ClassVar, Optional, Union

from pulumi import Input

from components.config.secret_values import credential_shape
from components.config.types import SECRET_MARKER

from . import sections
from .section import Inputs, is_output, plain, text_list


class Engine(enum.StrEnum):
    VLLM = "vllm"
    NIM = "nim"


# The library's earlier spellings, kept working (each says what replaces it).
HubSource = sections.HubSource
VolumeSource = sections.VolumeSource
Resources = sections.Resources


@dataclass(frozen=True)
class S3Source(sections.S3Source):
    __doc__ = sections.S3Source.__doc__

    credentials_secret: Optional[str] = None
    """Deprecated: ``credentials=S3Credentials(secret=...)``. A Secret with the access key pair."""

    extra_fields: ClassVar[frozenset[str]] = frozenset({"credentials_secret"})

    def to_config(self, where: Optional[str] = None, inputs: Optional[Inputs] = None) -> dict:
        config = super().to_config(where or "S3Source", inputs)
        if self.credentials_secret is not None:
            _deprecated("S3Source(credentials_secret=...)", "S3Source(credentials=S3Credentials(secret=...))")
            if self.credentials is not None:
                raise ValueError(f"{where or 'S3Source'}: credentials_secret and credentials both given; give "
                                 "credentials=S3Credentials(secret=...) alone")
            config["credentials"] = {"secret": self.credentials_secret}
        return config


@dataclass(frozen=True)
class ModelArgs(sections.Model):
    """One model server (a ``models[]`` entry): ``Model``, with the earlier ``settings`` mapping
    (deprecated: every setting is a typed field of ``Model``) and ``weights_size`` (deprecated:
    ``weights=WeightsStorage(size=...)``)."""

    _: KW_ONLY
    weights_size: Optional[Union[str, int]] = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    extra_fields: ClassVar[frozenset[str]] = frozenset({"weights_size", "settings"})

    def to_config(self, where: Optional[str] = None, inputs: Optional[Inputs] = None) -> dict:
        """``where``: how a refusal names this model (``models[0]`` inside ``ModelServingArgs``)."""
        where = where or f"ModelArgs(name={_shown(self.name)})"
        typed = super().to_config(where, inputs)
        if self.weights_size is not None:
            _deprecated("ModelArgs(weights_size=...)", "Model(weights=WeightsStorage(size=...))")
            if self.weights is not None:
                raise ValueError(f"{where}: weights_size and weights both given; give weights=WeightsStorage(size=...)")
            typed["weights"] = {"size": self.weights_size}
        return _merged(typed, self.settings, where, "Model")


@dataclass(frozen=True)
class RouterArgs(sections.Router):
    """The request router (``router``): ``Router``, with the earlier positional order (name, image,
    replicas, models) and ``settings`` mapping (deprecated: every setting is a typed field of
    ``Router``)."""

    name: Optional[str] = None
    image: Optional[Input[str]] = None
    replicas: Optional[int] = None
    models: Optional[Sequence[str]] = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    extra_fields: ClassVar[frozenset[str]] = frozenset({"settings"})

    def to_config(self, where: Optional[str] = None, inputs: Optional[Inputs] = None) -> dict:
        where = where or "RouterArgs"
        return _merged(super().to_config(where, inputs), self.settings, where, "Router")


@dataclass(frozen=True)
class ModelServingArgs:
    """Models (and a router) in one namespace of the cluster the program's provider points at.

    ``namespace``: a name, or an Output (``ns.metadata.name``: every object then waits on your
    Namespace); created and owned by your program unless ``create_namespace``.
    ``kubeconfig_content``: the kubeconfig your ``kubernetes.Provider`` is given (content, kept
    secret), for the resources that read the cluster (status, weights gate, checks): without it they
    read ``kubeconfig``/``context`` (a path; unset: the ambient kubeconfig), which must then be your
    provider's cluster. ``platform``: the platform section (``Platform(...)``). ``hf_token``,
    ``ngc_api_key``: the stack secrets (``llm-serving:hfToken``, ``llm-serving:ngcApiKey``), each
    made a Kubernetes Secret for the models that read it. ``render_yaml_to_directory``: your
    provider renders YAML there (``cluster.renderYamlToDirectory``): nothing reads the cluster."""

    namespace: Input[str]
    models: Sequence[sections.Model]
    router: Optional[sections.Router] = None
    create_namespace: bool = False
    kubeconfig: Optional[str] = None
    context: Optional[str] = None
    kubeconfig_content: Optional[Input[str]] = None  # not part of the stack config
    platform: Union[sections.Platform, Mapping[str, Any]] = field(default_factory=dict)
    hf_token: Optional[Input[str]] = None
    ngc_api_key: Optional[Input[str]] = None
    render_yaml_to_directory: Optional[str] = None

    # The stack-file fields these arguments hold themselves (tests/library/test_reachable.py).
    OWN_FIELDS: ClassVar[dict[str, str]] = {
        "platform.namespace": "namespace", "platform.createNamespace": "create_namespace",
        "cluster.kubeconfig": "kubeconfig", "cluster.context": "context",
        "cluster.renderYamlToDirectory": "render_yaml_to_directory", "hfToken": "hf_token",
        "ngcApiKey": "ngc_api_key"}

    def secret_values(self) -> dict[str, Input[str]]:
        """The stack secrets given, by config key (``Platform`` makes their Secrets)."""
        return {key: value for key, value in (("hfToken", self.hf_token), ("ngcApiKey", self.ngc_api_key))
                if value is not None}

    def to_config(self, inputs: Optional[Inputs] = None) -> dict:
        """The stack config these arguments stand for (components/config's input shape); a value
        not known yet (an Output) stands there as a placeholder ``inputs`` records."""
        inputs = inputs if inputs is not None else Inputs()
        if isinstance(self.platform, sections.Platform):
            given = self.platform.to_config("platform", inputs)
        else:
            if self.platform:
                _deprecated("ModelServingArgs(platform={...})", "ModelServingArgs(platform=Platform(...))")
            given = self.platform
        namespace = (inputs.placeholder("name", "namespace", self.namespace) if is_output(self.namespace)
                     else self.namespace)
        platform = _merged({"namespace": namespace, "createNamespace": self.create_namespace,
                            # No network while a program declares: the stack program's Hub
                            # preflight (pinning revisions) runs only when asked for.
                            "preflight": {"enabled": False}},
                           given, "ModelServingArgs.platform", "Platform", overridable=("preflight",))
        if isinstance(self.models, (str, bytes)) or not isinstance(self.models, Sequence):
            raise TypeError(f"ModelServingArgs.models: a list of Model, not {type(self.models).__name__}")
        config: dict = {"platform": platform,
                        "models": [_model_config(m, i, inputs) for i, m in enumerate(self.models)],
                        "cluster": {key: value for key, value in (
                            ("kubeconfig", self.kubeconfig), ("context", self.context),
                            ("renderYamlToDirectory", self.render_yaml_to_directory)) if value is not None}}
        if self.router is not None:
            if not isinstance(self.router, sections.Router):
                raise TypeError(f"ModelServingArgs.router: a Router, not {type(self.router).__name__}")
            config["router"] = self.router.to_config("router", inputs)
        for key in self.secret_values():
            # The config model knows only that a secret is set; its value goes to the Secret.
            config[key] = SECRET_MARKER
        return config


def _model_config(model: Any, index: int, inputs: Inputs) -> dict:
    if not isinstance(model, sections.Model):
        raise TypeError(f"ModelServingArgs.models[{index}]: a Model, not {type(model).__name__}")
    return model.to_config(f"models[{index}]", inputs)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"llm_serving: {old} is deprecated; use {new} (docs/library.md)", DeprecationWarning, stacklevel=4)


# A value a refusal may repeat: a short plain word (a model or engine name). Anything else, and
# anything shaped like a credential, is described, never repeated: these messages end up in
# terminals and CI logs.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else None
    if text is not None and _PLAIN_WORD.fullmatch(text) and credential_shape(text) is None:
        return repr(text)
    return f"<a {type(value).__name__}, not repeated>"


def _merged(typed: dict, settings: Any, where: str, section: str, overridable: tuple[str, ...] = ()) -> dict:
    if not isinstance(settings, Mapping):
        raise TypeError(f"{where}: a {section}, or a mapping of stack-config names to values "
                        f"(docs/config-reference.md), not {type(settings).__name__}")
    if not settings:
        return typed
    if section != "Platform":
        _deprecated(f"{section}Args(settings={{...}})", f"the typed fields of {section}")
    both = sorted(key for key in settings if key in typed and key not in overridable)
    if both:
        raise ValueError(f"{where}: {', '.join(both)} given both as an argument and in settings; give it once")
    given = dict(settings)
    for key in ("args", "allowPatterns", "ignorePatterns"):
        if key in given and given[key] is not None:
            given[key] = text_list(given[key], f"{where}.{key}")
    return {**typed, **plain(given)}
