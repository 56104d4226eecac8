"""Types shared by every config section (models, platform, router): the strict base model,
quantities, images, identities, tolerations, secret references and the health path.

``model.py`` and ``router.py`` both build on this module and neither imports the other's
types, so either can be imported first.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from . import kube, values


def given(value: Any) -> str:
    """What an input was, in the stack file's words (never its content: it may be a secret)."""
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "an empty value"
    return "text" if isinstance(value, str) else type(value).__name__


def _is_bool_field(annotation: Any) -> bool:
    """``bool`` or ``Optional[bool]`` (not a union with other types, such as `auto`)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return len(inner) == 1 and _is_bool_field(inner[0])
    return annotation is bool


def _is_int_field(annotation: Any) -> bool:
    """``int``, ``Optional[int]`` or an Annotated int (``bool`` is its own type, not an int here)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _is_int_field(args[0])
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return len(inner) == 1 and _is_int_field(inner[0])
    return annotation is int


class Strict(BaseModel):
    """Base of every config section: unknown keys refused, values frozen, camelCase keys.

    Integer fields are strict: YAML's `true` is not 1, `"2"` is not 2 and `1.0` is not 1 (lax
    pydantic would take all three), so `gpus: true` is refused instead of read as one GPU. And
    every integer stays in Kubernetes' int32 range, where replica counts, uids and the other
    numbers land (``kube.INT32_MAX``). One rule here covers every integer field of every section,
    including ones added later. A section whose integer never reaches a Kubernetes field (a byte
    count read from an object store) names it in ``not_kubernetes_ints``.
    """

    not_kubernetes_ints: ClassVar[frozenset[str]] = frozenset()

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
        validate_default=True,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _whole_numbers_only(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is None or value is None:
            return value
        if _is_bool_field(field.annotation):
            # Lax pydantic reads 'yes', 'on', '1' and 1 as true: a quoted or numeric flag is refused.
            if not isinstance(value, bool):
                raise ValueError(f"must be true or false without quotes; got {given(value)}")
            return value
        if not _is_int_field(field.annotation):
            return value
        if isinstance(value, bool):
            raise ValueError(f"{str(value).lower()} is a boolean; write a whole number such as 1")
        if isinstance(value, str):
            raise ValueError(f"'{value}' is text; write a whole number without quotes, e.g. 2")
        if isinstance(value, float):
            raise ValueError(f"{kube.short(repr(value))} is not a whole number; write e.g. 2")
        if not isinstance(value, int):
            raise ValueError(f"must be a whole number without quotes, e.g. 2; got {given(value)}")
        problem = None if info.field_name in cls.not_kubernetes_ints else kube.int32_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class Shape:
    """What a field expects, for the type messages (``messages.py``): a marker in ``Annotated``
    metadata for the shapes a plain type cannot say (a duration is a ``str``; a quantity too)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Shape({self.name!r})"


def _quantity_text(value: Any) -> Any:
    """Kubernetes takes `cpu: 16` or `cpu: 0.5` as well as `"16"`: numbers become their text."""
    if isinstance(value, bool):
        raise ValueError(f"{str(value).lower()} is a boolean; write a quantity such as '16Gi' or 4")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value} is not a quantity; write e.g. '16Gi' or 4")
        return repr(value) if not value.is_integer() else str(int(value))
    if not isinstance(value, str):
        raise ValueError(f"must be a quantity: a number with an optional unit, e.g. '16Gi', '500m' or 4; "
                         f"got {given(value)}")
    return value


Quantity = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(values.check_quantity), Shape("quantity")]
PositiveQuantity = Annotated[str, BeforeValidator(_quantity_text), AfterValidator(values.check_positive_quantity),
                             Shape("quantity")]
Image = Annotated[str, AfterValidator(values.check_image)]
HfEndpoint = Annotated[str, AfterValidator(values.check_cluster_reachable_url)]
NonRootUid = Annotated[int, AfterValidator(values.check_non_root_uid)]
Dns1123Label = Annotated[str, AfterValidator(values.check_dns1123_label)]


def check_health_path(path: str) -> str:
    """A probe path: non-empty, no whitespace; the leading `/` is added when missing."""
    path = path.strip()
    if not path or any(ch.isspace() for ch in path):
        raise ValueError("health path must be a non-empty URL path such as '/health'")
    return path if path.startswith("/") else "/" + path


HealthPath = Annotated[str, AfterValidator(check_health_path)]


class Toleration(Strict):
    key: Optional[str] = Field(None, description="Taint key the toleration matches.")
    operator: Literal["Exists", "Equal"] = Field("Exists", description="`Exists` or `Equal`.")
    value: Optional[str] = Field(None, description="Taint value, with `operator: Equal`.")
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        None, description="Taint effect matched; empty matches all effects."
    )

    @model_validator(mode="after")
    def _value_needs_equal(self) -> Toleration:
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("a toleration with operator 'Exists' takes no value; remove value or use operator 'Equal'")
        # The API server's rules (core/validation ValidateTolerations): the key is a label key,
        # an Equal value a label value, and an empty key matches every taint only with Exists.
        problems = []
        if self.key is not None and (problem := kube.qualified_name_problem(self.key)):
            problems.append(values.Problem("key", problem))
        if self.operator == "Equal" and not self.key:
            problems.append(values.Problem("key", "required with operator 'Equal' (only 'Exists' may leave the key "
                             "empty, to tolerate every taint); name the taint key, e.g. nvidia.com/gpu"))
        if self.value is not None and (problem := kube.label_value_problem(self.value)):
            problems.append(values.Problem("value", problem))
        if problems:
            raise values.Problems(problems)
        return self

    def to_k8s(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True)


GPU_TOLERATIONS = (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)


class SecretKeyRef(Strict):
    name: Dns1123Label = Field(description="Name of an existing Kubernetes Secret in the stack's namespace.")
    key: kube.SecretKey = Field("token", description="Key inside the Secret.")


class TlsIssuer(Strict):
    """An existing cert-manager issuer (the router's and the gateway's certificates)."""

    kind: Literal["Issuer", "ClusterIssuer"] = Field("ClusterIssuer", description="cert-manager issuer kind.")
    name: Dns1123Label = Field(description="Name of the existing cert-manager Issuer or ClusterIssuer.")


def tls_source_problems(tls: Any) -> list[values.Problem]:
    """A TLS section (router's, gateway's) takes its identity from one place: ``existingSecret``
    replaces the Certificate, so the Certificate's keys beside it would do nothing."""
    if tls.existing_secret is None:
        return []
    problems = [values.Problem(key, "applies to a cert-manager Certificate, which existingSecret replaces; "
                               "remove it, or remove existingSecret")
                for key, field in (("issuer", "issuer"), ("dnsNames", "dns_names"),
                                   ("allowedDomains", "allowed_domains"), ("secretName", "secret_name"))
                if field in tls.model_fields_set]
    if not tls.enabled:
        problems.append(values.Problem("enabled", "existingSecret is set but TLS is off; set enabled: true, "
                                       "or remove existingSecret"))
    return problems


class TlsSection(Strict):
    """What the router's and the gateway's TLS sections share (their fields are their own): one
    source of identity (``tls_source_problems``), and whether a Certificate is rendered."""

    @model_validator(mode="after")
    def _one_source(self) -> TlsSection:
        problems = tls_source_problems(self)
        if problems:
            raise values.Problems(problems)
        return self

    @property
    def issued(self) -> bool:
        """A cert-manager Certificate is rendered (TLS on, no existing Secret)."""
        return self.enabled and self.existing_secret is None


# Names on a certificate, and the domains they must fall in.
DnsName = Annotated[str, AfterValidator(values.check_dns_name)]
Domain = Annotated[str, AfterValidator(values.check_domain)]


# Stack secrets: the config model knows only that one is set (this marker), never its value.
SECRET_MARKER = "[secret]"


def _pulumi_secret(value: object, info: ValidationInfo) -> object:
    """``{secure: ...}`` (a stack file's encrypted value, or the program's stand-in for one) becomes
    the marker; a plain value is refused without being echoed."""
    key = to_camel(info.field_name or "")
    if value is None or value == SECRET_MARKER:
        return value
    if isinstance(value, dict) and set(value) == {"secure"} and isinstance(value["secure"], str):
        return SECRET_MARKER
    if isinstance(value, str):
        raise ValueError(
            "is stored in plain text in the stack config; remove it (`pulumi config rm "
            f"{key}`), revoke it if the file was ever shared, and set it as a secret: "
            f"`pulumi config set --secret {key} <value>`"
        )
    raise ValueError(f"must be a Pulumi secret string: `pulumi config set --secret {key} <value>`")


StackSecret = Annotated[Literal["[secret]"], BeforeValidator(_pulumi_secret)]
