"""models[].next (components/config/revisions.py): what a valid next revision is, and each refusal
at the field to change, with the fix."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from components.config.model import changes, revision_model
from components.config.revisions import NEXT_NAME_MAX
from tests.support.builders import REPO, model, nim_model

ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.16.2",
          "pylon": {"image": "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0"}, "workerAuth": {"mode": "open"}}
NEW_SOURCE = {"repo": "Qwen/Qwen2.5-1.5B-Instruct"}
NEXT = {"weight": 10, "source": NEW_SOURCE}


def stack(*models: dict, router: dict | None = None):
    return load_stack_config({"models": list(models), "router": {**ROUTER, **(router or {})}})


def problems(*models: dict, router: dict | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        stack(*models, router=router)
    return caught.value.problems


def test_a_next_revision_is_the_model_with_its_changes_under_its_own_name():
    config = stack(model("tiny", next={**NEXT, "image": "docker.io/vllm/vllm-openai:v0.32.0", "args": ["--enforce-eager"],
                                       "replicas": 2}, weights={"accessMode": "ReadWriteMany"}))
    serving = config.models[0]
    assert changes(serving) == ["source", "image", "args"]
    revision = revision_model(serving)
    assert (revision.name, revision.served_name, revision.is_next_revision) == ("tiny-next", "tiny", True)
    assert revision.source.repo == NEW_SOURCE["repo"] and revision.image == "docker.io/vllm/vllm-openai:v0.32.0"
    assert revision.args == ("--enforce-eager",) and revision.replicas == 2 and revision.next is None
    assert (serving.served_name, serving.is_next_revision) == ("tiny", False)


def test_what_the_revision_leaves_unset_is_the_models():
    config = stack(model("tiny", args=["--max-num-seqs=8"], weights={"accessMode": "ReadWriteMany"},
                         next={"weight": 0, "image": "docker.io/vllm/vllm-openai:v0.32.0"}))
    revision = revision_model(config.models[0])
    assert revision.source == config.models[0].source and revision.args == ("--max-num-seqs=8",)


BAD = [
    ("nothing-new", [model("tiny", next={"weight": 10})], None, "models.0.next",
     "declares the revision already serving"),
    ("same-source", [model("tiny", next={"weight": 10, "source": {"repo": REPO}})], None, "models.0.next",
     "declares the revision already serving"),
    ("weight-over-100", [model("tiny", next={**NEXT, "weight": 101})], None, "models.0.next.weight", "less than or equal to 100"),
    ("no-weight", [model("tiny", next={"source": NEW_SOURCE})], None, "models.0.next.weight", "required; add it"),
    ("nim", [nim_model("n", next=NEXT)], None, "models.0.next", "for vLLM models only"),
    ("multinode", [model("tiny", gpus=8, tensorParallelSize=8, weights={"accessMode": "ReadWriteMany"},
                         multiNode={"nodes": 2}, next=NEXT)], None, "models.0.next", "(ruled out here by multiNode)"),
    ("lora", [model("tiny", lora={"enabled": True}, next=NEXT)], None, "models.0.next", "without LoRA adapters only"),
    ("sleeps", [model("tiny", weights={"accessMode": "ReadWriteMany"},
                      autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 2}, next=NEXT)],
     {"gateway": {"hold": {"timeoutSeconds": 60}}}, "models.0.next", "set minReplicas: 1 or remove next"),
    ("long-name", [model("m" * (NEXT_NAME_MAX + 1), next=NEXT)], None, "models.0.next",
     f"model names of at most {NEXT_NAME_MAX} characters"),
    ("managed-arg", [model("tiny", next={**NEXT, "args": ["--port=9000"]})], None, "models.0.next.args.0",
     "--port is managed by this program"),
    ("unknown-arg", [model("tiny", next={**NEXT, "args": ["--no-such-flag"]})], None, "models.0.next.args.0",
     "vLLM 0.11 has no such option"),
    ("unknown-line", [model("tiny", next={**NEXT, "image": "docker.io/vllm/vllm-openai:v0.99.0"})], None,
     "models.0.next.image", "no release line this program renders"),
    ("not-fronted", [model("tiny", next=NEXT), model("other")], {"models": ["other"]}, "models.0.next",
     "no gateway fronts it; add 'tiny' to router.models; or remove next"),
    ("gateway-off", [model("tiny", next=NEXT)], {"gateway": {"enabled": False}}, "models.0.next",
     "router.gateway is disabled; enable it; or remove next"),
    ("gateway-leaves-it-out", [model("tiny", next=NEXT), model("other")], {"gateway": {"models": ["other"]}},
     "models.0.next", "router.gateway.models leaves it out; add it there; or remove next"),
    ("same-source-one-node", [model("tiny", next={"weight": 10, "args": ["--enforce-eager"]})], None, "models.0.next",
     "set weights.accessMode: ReadWriteMany, or give the revision a source of its own"),
    ("streams-apart", [model("tiny", source={"type": "s3", "bucket": "weights", "load": "stream"}, resources={"memory": "32Gi"},
                             next={"weight": 10, "source": {"type": "s3", "bucket": "weights", "prefix": "v2/"}})],
     None, "models.0.next.source", "give both the same load"),
    ("name-taken", [model("tiny", next=NEXT), model("tiny-next")], None, "models.0.next",
     "named 'tiny-next', which is model 1's name; rename that model, or remove next"),
]


@pytest.mark.parametrize("models, router, path, fix", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_a_next_revision_that_cannot_be_served_is_refused_at_its_field_with_the_fix(models, router, path, fix):
    found = problems(*models, router=router)
    assert any(p.startswith(f"{path}: ") and fix in p for p in found), found


def test_without_a_router_the_refusal_says_to_add_one():
    with pytest.raises(ConfigError) as caught:
        load_stack_config({"models": [model("tiny", next=NEXT)]})
    assert caught.value.problems == ["models.0.next: the gateway gives the next revision of model 'tiny' its share of "
                                     "the traffic, and no gateway fronts it; add llm-serving:router with its gateway; "
                                     "or remove next"]
