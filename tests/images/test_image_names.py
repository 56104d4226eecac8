"""Every container the local stack renders names an image this machine builds (scripts/images/build.py),
with the image names the local stack is to use (tests/images/conftest.py local_stack)."""

from __future__ import annotations

import pytest

from components.compile.router import names as router_names
from tests.images.conftest import local_stack, pod_spec
from tests.images.imagekit import build

pytestmark = pytest.mark.unit


def rendered_images(objects: list[dict]) -> set[str]:
    images = set()
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet", "Job"):
            spec = pod_spec(obj)
            images |= {c["image"] for c in spec.get("initContainers", []) + spec["containers"]}
    return images


def test_every_container_the_local_stack_renders_has_an_image_built_here():
    built = {name for recipe in build.RECIPES.values() for name in recipe.names}
    assert not rendered_images(local_stack()) - built
    # Two router replicas with TLS: the backend router (the router's image) and its TLS init (busybox).
    with_backend = local_stack(router={"replicas": 2, "tls": {"enabled": True, "existingSecret": "router-tls"}})
    backend = next(o for o in with_backend if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("backend-router"))
    assert [c["command"] for c in pod_spec(backend)["containers"]] == [[router_names.BACKEND_COMMAND]]
    assert not rendered_images(with_backend) - built, sorted(rendered_images(with_backend) - built)


def test_each_image_name_is_fully_qualified_and_unique():
    names = [name for recipe in build.RECIPES.values() for name in recipe.names]
    assert len(names) == len(set(names))
    for name in names:
        build.oci.check_name(name)
