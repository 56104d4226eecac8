"""What `validate` accepted and the cluster would not serve, round three (issue 38): next
revisions, sleeping models, engine flags, and messages that misled. Each case is refused at its
field with the fix on both ways in: the stack file's config model (what `python -m components
validate` runs) and the library (``llm_serving``), which builds the same config from typed
arguments and names the argument in its own spelling (``models[0]``)."""

from __future__ import annotations

import re

import pytest

import llm_serving as llm
from components.config import ConfigError, load_stack_config
from tests.support.builders import model

RWX = {"accessMode": "ReadWriteMany"}
ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.18.0",
          "pylon": {"image": "nvcr.io/nvidia/stargate-client:0.18.0"}, "workerAuth": {"mode": "open"}}
NEW_SOURCE = {"repo": "Qwen/Qwen2.5-1.5B-Instruct"}
NEXT = {"weight": 10, "source": NEW_SOURCE}
METRICS = {"metrics": {"enabled": True}}


def refusal(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


def library_args(raw: dict) -> llm.ModelServingArgs:
    """The same stack as a program would write it with the library."""
    models = []
    for section in raw["models"]:
        settings = dict(section)
        name, source = settings.pop("name"), settings.pop("source")
        models.append(llm.ModelArgs(name, llm.HubSource(source["repo"], revision=source.get("revision", "main")),
                                    settings=settings))
    platform = dict(raw.get("platform", {}))
    return llm.ModelServingArgs(namespace=platform.pop("namespace", "llm-serving"), models=models,
                                router=llm.RouterArgs(settings=raw["router"]) if "router" in raw else None,
                                platform=platform)


def library_refusal(raw: dict) -> list[str]:
    with pytest.raises(ValueError) as caught:
        llm.stack_config_of(library_args(raw))
    lines = str(caught.value).splitlines()
    assert lines[0] == "invalid ModelServingArgs:"
    return [line.strip() for line in lines[1:]]


def in_library_spelling(path: str) -> str:
    return re.sub(r"\b(models|args)\.(\d+)", r"\1[\2]", path)


# (id, stack, the field the refusal names, a fragment of the fix); each accepted before issue 38.
CASES = [
    # 1: two Deployments and two Services of one name (the router's and the revision's).
    ("router-named-like-a-revision", {"models": [model("chat", weights=RWX, next=NEXT)],
                                      "router": {**ROUTER, "name": "chat-next"}},
     "router.name", "collide with the next revision of model 'chat'"),
    ("gateway-named-like-a-revision", {"models": [model("chat", weights=RWX, next=NEXT)],
                                       "router": {**ROUTER, "gateway": {"name": "chat-next"}}},
     "router.gateway.name", "rename the gateway"),
    # 2: the revision's Deployment mounts the RWO claim from three pods (Multi-Attach).
    ("revision-replicas-on-rwo", {"models": [model("chat", next={**NEXT, "replicas": 3})], "router": ROUTER},
     "models.0.next.replicas", "set weights.accessMode: ReadWriteMany, or next.replicas: 1"),
    # 4: the adapter's name is the id the revision registers with the router.
    ("adapter-named-like-a-revision", {"models": [
        model("chat", weights=RWX, next=NEXT),
        model("code", lora={"enabled": True, "adapters": [{"name": "chat-next", "repo": "acme/sql-lora"}]})],
        "router": ROUTER},
     "models.1.lora.adapters.0.name", "already served by the next revision of model 'chat'"),
    # 5: only tenants with a routing key may call it, and such requests are never held.
    ("sleeping-model-only-scoped-tenants-call", {
        "platform": METRICS,
        "models": [model("chat", weights=RWX, autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 2})],
        "router": {**ROUTER, "gateway": {"hold": {"timeoutSeconds": 60}, "apiKeys": {
            "secretName": "keys", "tenants": [{"name": "a", "routingKey": "team-a"}]}}}},
     "models.0.autoscaling.minReplicas", "add a tenant without routingKey that may call it"),
    ("sleeping-model-no-tenant-may-call", {
        "platform": METRICS,
        "models": [model("chat", weights=RWX, autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 2}),
                   model("code")],
        "router": {**ROUTER, "gateway": {"hold": {"timeoutSeconds": 60}, "apiKeys": {
            "secretName": "keys", "tenants": [{"name": "a", "models": ["code"]}]}}}},
     "models.0.autoscaling.minReplicas", "no tenant of router.gateway.apiKeys may call it"),
    # 6: vLLM starts no API server: probes and Service never answer.
    ("headless", {"models": [model("chat", args=["--headless"])]}, "models.0.args.0",
     "--headless starts vLLM without its API server"),
    ("no-api-server", {"models": [model("chat", args=["--api-server-count", "0"])]}, "models.0.args.0",
     "--api-server-count 0 starts vLLM without an API server"),
    ("headless-revision", {"models": [model("chat", weights=RWX, next={**NEXT, "args": ["--headless"]})],
                           "router": ROUTER}, "models.0.next.args.0", "--headless starts vLLM without"),
    # 7: the image the model runs (the platform's), named again.
    ("revision-of-the-running-image", {"models": [model("chat", weights=RWX, next={
        "weight": 10, "image": "docker.io/vllm/vllm-openai:v0.11.0"})], "router": ROUTER},
     "models.0.next.image", "is the image the model already runs"),
    ("revision-of-the-platforms-image", {"platform": {"vllmImage": "docker.io/vllm/vllm-openai:v0.11.1"},
                                         "models": [model("chat", weights=RWX, next={
                                             "weight": 10, "image": "docker.io/vllm/vllm-openai:v0.11.1"})],
                                         "router": ROUTER},
     "models.0.next.image", "the revision changes nothing"),
    # 8: the fix named is one that works (vllmRelease cannot be set on next; on the model it
    # would break the serving revision).
    ("pinned-line-and-a-revision-of-another", {"models": [model("chat", weights=RWX, vllmRelease="0.11", next={
        "weight": 10, "image": "docker.io/vllm/vllm-openai:v0.32.0"})], "router": ROUTER},
     "models.0.next.image", "remove vllmRelease from the model"),
]


@pytest.mark.parametrize(("raw", "path", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_at_its_field_with_the_fix_from_a_stack_file(raw, path, fix):
    found = refusal(raw)
    assert any(line.startswith(f"{path}: ") and fix in line for line in found), found


@pytest.mark.parametrize(("raw", "path", "fix"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_at_its_argument_with_the_fix_from_the_library(raw, path, fix):
    found = library_refusal(raw)
    assert any(line.startswith(f"{in_library_spelling(path)}: ") and fix in line for line in found), found


def test_what_each_refusal_guards_still_passes_when_it_is_right():
    """The neighbours of the cases above stay valid: a revision with its own source on three pods
    of ReadWriteMany weights, a revision of another line's image, a revision of the pinned line, a
    sleeping model an unscoped tenant may call, one API server."""
    accepted = [load_stack_config(raw) for raw in (
        {"models": [model("chat", weights=RWX, next={**NEXT, "replicas": 3})], "router": ROUTER},
        {"models": [model("chat", weights=RWX, next={"weight": 10, "image": "docker.io/vllm/vllm-openai:v0.32.0"})],
         "router": ROUTER},
        {"models": [model("chat", weights=RWX, vllmRelease="0.11", next={
            "weight": 10, "image": "docker.io/vllm/vllm-openai:v0.11.1"})], "router": ROUTER},
        {"platform": METRICS, "models": [
            model("chat", weights=RWX, autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 2})],
         "router": {**ROUTER, "gateway": {"hold": {"timeoutSeconds": 60}, "apiKeys": {
             "secretName": "keys", "tenants": [{"name": "a", "routingKey": "team-a"}, {"name": "b"}]}}}},
        {"models": [model("chat", args=["--api-server-count", "1"])]},
    )]
    assert [stack.models[0].name for stack in accepted] == ["chat"] * 5
    assert accepted[0].models[0].next.replicas == 3


def test_a_tenants_bad_limit_is_its_only_line():
    """Not also "tenants: Tuple should have at least 1 item after validation, not 0": the list
    is not empty in the file, its only item was refused."""
    found = refusal({"models": [model("chat")], "router": {**ROUTER, "gateway": {"apiKeys": {
        "secretName": "keys", "tenants": [{"name": "a", "rateLimit": {"tokensPerMinute": -1}}]}}}})
    assert found == ["router.gateway.apiKeys.tenants.0.rateLimit.tokensPerMinute: must be greater than or equal to 1"]
    empty = refusal({"models": [model("chat")], "router": {**ROUTER, "gateway": {"apiKeys": {
        "secretName": "keys", "tenants": []}}}})
    assert empty == ["router.gateway.apiKeys.tenants: must list at least 1 item; add one"]


@pytest.mark.parametrize("selector", ["namespaceSelector", "podSelector"])
def test_a_kubernetes_selectors_match_labels_is_told_to_drop_the_line_not_to_quote_it(selector):
    found = refusal({"models": [model("chat")], "router": ROUTER, "platform": {"networkPolicy": {
        "enabled": True, "allowFrom": [{selector: {"matchLabels": {"team": "a"}}}]}}})
    assert len(found) == 1 and "quote" not in found[0], found
    assert found[0].startswith(f"platform.networkPolicy.allowFrom.0.{selector}.matchLabels: {selector} is the "
                               "label map itself"), found
    assert "remove the `matchLabels:` line" in found[0]


def test_a_revision_of_the_running_image_with_new_args_is_a_change():
    """"No change" only when nothing differs: the running image with new args is a revision."""
    config = load_stack_config({"models": [model("chat", weights=RWX, next={
        "weight": 10, "image": "docker.io/vllm/vllm-openai:v0.11.0", "args": ["--enforce-eager"]})], "router": ROUTER})
    assert config.models[0].next.args == ("--enforce-eager",)
