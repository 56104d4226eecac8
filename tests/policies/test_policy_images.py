"""Image rules: fully qualified, no :latest, a tag or digest; pods and NIM operator objects."""

from __future__ import annotations

import pytest

from policies.rules import images
from policies.rules.images import parse_image
from tests.support.policy_helpers import Case, check_case, compliant, container, put, run

DIGEST = "sha256:" + "a" * 64


def _image(model, name, ref):
    def mutate(world):
        manifest = world.server(model) if name != "puller" else world.puller(model)
        container(manifest, name)["image"] = ref
    return mutate


FAIL_CASES = [
    Case(images.fully_qualified, "docker hub short path", _image("qwen", "server", "vllm/vllm-openai:v0.11.0"),
         "'vllm/vllm-openai:v0.11.0' does not name its registry; write e.g. 'docker.io/vllm/vllm-openai:v0.11.0'"),
    Case(images.fully_qualified, "bare busybox in the LoRA init container",
         _image("llama", "lora-cache-init", "busybox:1.37.0"), "'docker.io/library/busybox:1.37.0'"),
    Case(images.fully_qualified, "NIMService repository without registry",
         lambda w: put(w.one("NIMService"), "spec.image.repository", "nim/meta/llama"),
         "spec.image 'nim/meta/llama:1.8.4' does not name its registry"),
    Case(images.no_latest, "server on :latest", _image("qwen", "server", "docker.io/vllm/vllm-openai:latest"),
         "uses ':latest'"),
    Case(images.no_latest, "NIMService tag latest",
         lambda w: put(w.one("NIMService"), "spec.image.tag", "latest"), "uses ':latest'"),
    Case(images.pinned, "tag-less puller", _image("qwen", "puller", "docker.io/vllm/vllm-openai"),
         "'docker.io/vllm/vllm-openai' has no tag or digest"),
    Case(images.pinned, "registry port is not a tag", _image("qwen", "server", "localhost:5000/vllm"),
         "'localhost:5000/vllm' has no tag or digest"),
    Case(images.pinned, "NIMCache modelPuller without tag",
         lambda w: put(w.one("NIMCache"), "spec.source.ngc.modelPuller", "nvcr.io/nim/meta/llama"),
         "spec.source.ngc.modelPuller 'nvcr.io/nim/meta/llama' has no tag or digest"),
]


@pytest.mark.parametrize("case", FAIL_CASES, ids=lambda c: f"{c.rule.name}:{c.id}")
def test_fails_on_one_mutation(case):
    check_case(case)


@pytest.mark.parametrize("rule", [images.fully_qualified, images.no_latest, images.pinned], ids=lambda r: r.name)
def test_compiled_stack_passes(rule):
    assert run(rule, compliant()) == []


@pytest.mark.parametrize("ref, registry, tag, digest", [
    ("docker.io/vllm/vllm-openai:v0.11.0", "docker.io", "v0.11.0", None),
    ("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3", "nvcr.io", "1.3.3", None),
    ("localhost:5000/vllm:1", "localhost:5000", "1", None),
    ("localhost/vllm", "localhost", None, None),
    (f"ghcr.io/org/img@{DIGEST}", "ghcr.io", None, DIGEST),
    (f"ghcr.io/org/img:v1@{DIGEST}", "ghcr.io", "v1", DIGEST),
    ("vllm/vllm-openai:v0.11.0", None, "v0.11.0", None),
    ("busybox", None, None, None),
])
def test_parse_image(ref, registry, tag, digest):
    parsed = parse_image(ref)
    assert (parsed.registry, parsed.tag, parsed.digest) == (registry, tag, digest)


def test_digest_only_is_pinned():
    world = compliant()
    container(world.server("qwen"), "server")["image"] = f"docker.io/vllm/vllm-openai@{DIGEST}"
    for rule in (images.fully_qualified, images.no_latest, images.pinned):
        assert run(rule, world) == []
