"""Image references: fully qualified, pinned to a tag or digest, never `:latest`.

Short names ("busybox") fail on runtimes that enforce qualified names; a moving or missing tag
lets two nodes run different code under one spec. Containers of every pod-bearing kind are
checked, and the images the NIM operator runs (NIMService spec.image and init/sidecar
containers, NIMCache source modelPuller and init containers).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from .base import resource_rule
from .kube import (
    NIM_KINDS,
    POD_KINDS,
    UNKNOWN,
    Finding,
    K8sObject,
    as_list,
    get,
    pod_containers,
    unchecked,
    violation,
)

KINDS = POD_KINDS | NIM_KINDS


@dataclass(frozen=True)
class ImageRef:
    registry: Optional[str]   # None when the first path component is not a registry host
    tag: Optional[str]
    digest: Optional[str]


def parse_image(ref: str) -> ImageRef:
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = name[colon + 1:] if colon > slash else None
    repository = name[:colon] if colon > slash else name
    first, sep, _ = repository.partition("/")
    # A registry host is the first component when it has a dot or a port, or is localhost
    # (the same test container runtimes use to tell "docker.io/x" from "x/y").
    registry = first if sep and ("." in first or ":" in first or first == "localhost") else None
    return ImageRef(registry, tag or None, digest or None)


def images(obj: K8sObject) -> Iterator[tuple[str, Any]]:
    """(where, reference) for every image the object runs; the reference may be UNKNOWN."""
    if obj.kind in POD_KINDS:
        refs, _, unknown_paths = pod_containers(obj)
        for path in unknown_paths:
            yield path, UNKNOWN
        for ref in refs:
            image = get(ref.container, "image")
            if image is not None:
                yield f"{ref.path}.image", image
        return
    spec = get(obj.props, "spec")
    if spec is UNKNOWN:
        yield "spec", UNKNOWN
        return
    if obj.kind == "NIMService":
        yield "spec.image", _nim_image(get(spec, "image"))
    else:
        for source in ("ngc", "hf", "dataStore"):
            puller = get(spec, "source", source, "modelPuller")
            if puller is not None:
                yield f"spec.source.{source}.modelPuller", puller
    for key in ("initContainers", "sidecarContainers"):
        items = as_list(get(spec, key))
        if items is UNKNOWN:
            yield f"spec.{key}", UNKNOWN
            continue
        for index, item in enumerate(items):
            yield f"spec.{key}[{index}].image", _nim_image(get(item, "image"))


def _nim_image(image: Any) -> Any:
    """The operator runs `repository:tag` from an {repository, tag} object."""
    if image is UNKNOWN or not isinstance(image, dict):
        return image if image is UNKNOWN else None
    repository, tag = get(image, "repository"), get(image, "tag")
    if repository is UNKNOWN or tag is UNKNOWN:
        return UNKNOWN
    if not isinstance(repository, str):
        return None
    return f"{repository}:{tag}" if tag not in (None, "") else repository


def _checked(obj: K8sObject) -> Iterator[tuple[str, Optional[str], Optional[ImageRef], Optional[Finding]]]:
    for where, image in images(obj):
        if image is UNKNOWN:
            yield where, None, None, unchecked(f"{obj.display}: {where}")
        elif isinstance(image, str):
            yield where, image, parse_image(image), None
        elif image is not None:
            yield where, None, None, violation(f"{obj.display}: {where} is not an image reference")


@resource_rule(
    "llm-serving-image-fully-qualified",
    "Images name their registry (`docker.io/library/busybox`, not `busybox`): short names fail on "
    "runtimes that enforce fully qualified names.",
    KINDS,
    fix="Prefix the registry host, e.g. `docker.io/vllm/vllm-openai:v0.11.0` or `nvcr.io/nim/...`.",
    severity="medium", url="https://kubernetes.io/docs/concepts/containers/images/",
)
def fully_qualified(obj: K8sObject, config: dict) -> Iterator[Finding]:
    for where, image, ref, problem in _checked(obj):
        if problem is not None:
            yield problem
        elif ref is not None and ref.registry is None:
            yield violation(f"{obj.display}: {where} '{image}' does not name its registry; "
                            f"write e.g. 'docker.io/{image if '/' in image else 'library/' + image}'")


@resource_rule(
    "llm-serving-image-no-latest",
    "No image uses the moving `:latest` tag.",
    KINDS,
    fix="Pin a released tag (e.g. `:v0.11.0`) or a digest (`@sha256:...`).",
    severity="medium", url="https://kubernetes.io/docs/concepts/containers/images/",
)
def no_latest(obj: K8sObject, config: dict) -> Iterator[Finding]:
    for where, image, ref, problem in _checked(obj):
        if problem is not None:
            yield problem
        elif ref is not None and ref.tag == "latest":
            yield violation(f"{obj.display}: {where} '{image}' uses ':latest'; pin a released tag or a digest")


@resource_rule(
    "llm-serving-image-pinned",
    "Every image carries a tag or a digest (a tag-less reference means `:latest`).",
    KINDS,
    fix="Append a released tag (`:v0.11.0`); to pin it for good, add the digest you read from your "
    "registry for that tag (`crane digest <image>:<tag>`, then `<image>:<tag>@sha256:<digest>`). "
    "Never write a digest you did not read: an invented one fails every pull.",
    severity="medium", url="https://kubernetes.io/docs/concepts/containers/images/",
)
def pinned(obj: K8sObject, config: dict) -> Iterator[Finding]:
    for where, image, ref, problem in _checked(obj):
        if problem is not None:
            yield problem
        elif ref is not None and ref.tag is None and ref.digest is None:
            yield violation(f"{obj.display}: {where} '{image}' has no tag or digest; pin a released "
                            "tag, or tag@sha256:<digest> with the digest read from the registry "
                            "(`crane digest <image>:<tag>`), never an invented one")
