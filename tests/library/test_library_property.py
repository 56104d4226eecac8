"""No library refusal repeats a credential (issue 38 item 3), TypeErrors included: hypothesis
builds ``ModelServingArgs`` with credential-shaped strings in any argument a program may fill
(names, images, sources, command lines given as lists or as one string, settings, the router's
and the platform's), next to valid ones and wrong types. Whatever ``stack_config_of`` says about
them holds none of the credentials and no credential's shape, and names the argument; what it
accepts holds no credential in a plain field."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import llm_serving as llm
from components.config.secret_values import credential_shape
from tests.support.config_strategies import CREDENTIALS, PYLON_IMAGE, ROUTER_IMAGE

EXAMPLES = int(os.environ.get("LLM_SERVING_LIBRARY_PROPERTY_EXAMPLES", "80"))
REVISION = "0123456789abcdef0123456789abcdef01234567"
# A refusal names what to change: `models[0].args: ...` (TypeError) or, under
# "invalid ModelServingArgs:", one `<argument path>: ...` line per problem.
NAMED = ("models[", "ModelArgs(", "HubSource", "S3Source", "VolumeSource", "RouterArgs", "router", "platform",
         "ModelServingArgs", "kubeconfig", "cluster", "namespace")

credential = st.sampled_from(CREDENTIALS)


def text(*plain: str) -> st.SearchStrategy:
    return st.one_of(st.sampled_from(plain), credential)


def words() -> st.SearchStrategy:
    return st.lists(text("--enforce-eager", "--max-model-len", "4096").map(str) | credential.map(lambda c: f"--api-key={c}"),
                    max_size=3)


def command_line() -> st.SearchStrategy:
    """A list of words, or the trap: the command line as one string."""
    return st.one_of(st.none(), words(), words().map(" ".join), st.just(3))


sources = st.one_of(
    st.builds(llm.HubSource, text("acme/tiny-llm"), text(REVISION, "main"),
              st.one_of(st.none(), st.lists(text("*.safetensors"), min_size=1, max_size=2), text("*.json"))),
    st.builds(llm.S3Source, text("weights"), text("llama/"), st.one_of(st.none(), text("https://s3.example.com")),
              st.none(), st.one_of(st.none(), text("s3-creds"))),
    st.builds(llm.VolumeSource, text("models"), st.one_of(st.none(), text("llama"))),
    st.just({"repo": "acme/tiny-llm"}),
)
model_settings = st.just("lora") | st.fixed_dictionaries({}, optional={
    "env": st.dictionaries(text("MY_SETTING", "TZ"), text("UTC"), max_size=2),
    "nodeSelector": st.dictionaries(text("pool"), text("a100"), max_size=1),
    "gpus": st.just(2),  # also a typed argument: given both ways
    "hfTokenSecret": st.fixed_dictionaries({"name": text("hf-token")}),
})
models = st.builds(
    llm.ModelArgs, text("chat", "code"), sources,
    engine=st.one_of(st.just(llm.Engine.VLLM), text("nim", "sglang")),
    image=st.one_of(st.none(), text("docker.io/vllm/vllm-openai:v0.11.0")),
    gpus=st.one_of(st.none(), st.integers(-1, 2)),
    args=command_line(),
    resources=st.one_of(st.none(), st.builds(llm.Resources, text("1"), text("24Gi"))),
    settings=model_settings,
)
# The typed sections (issue 40): credentials in their fields, and a section of the wrong kind.
typed_sources = st.one_of(
    st.builds(llm.S3Source, text("weights"), text("llama/"), load=st.sampled_from(["copy", "stream"]),
              credentials=st.one_of(st.none(), st.builds(llm.S3Credentials, secret=text("s3-creds")))),
    st.builds(llm.HubSource, text("acme/tiny-llm"), revision=text(REVISION)),
    st.just(llm.Lora(enabled=True)),
)
typed_models = st.builds(
    llm.Model, text("chat", "code"), typed_sources,
    image=st.one_of(st.none(), text("docker.io/vllm/vllm-openai:v0.11.0")),
    args=command_line(),
    env=st.one_of(st.none(), st.dictionaries(text("MY_SETTING"), text("UTC"), max_size=2)),
    hf_token_secret=st.one_of(st.none(), st.builds(llm.SecretKeyRef, name=text("hf-token"))),
    lora=st.one_of(st.none(), st.builds(llm.Lora, adapters=st.lists(
        st.builds(llm.LoraAdapter, name=text("sql"), repo=text("acme/sql-lora")), max_size=1))),
    resources=st.one_of(st.none(), st.builds(llm.Resources, text("1"), text("24Gi"))),
)
routers = st.one_of(st.none(), st.builds(
    llm.RouterArgs, st.one_of(st.none(), text("llm-router")), text(ROUTER_IMAGE), st.none(),
    st.one_of(st.none(), st.lists(text("chat"), max_size=1), text("chat")),
    st.fixed_dictionaries({"pylon": st.fixed_dictionaries({"image": text(PYLON_IMAGE)}),
                           "workerAuth": st.just({"mode": "open"})},
                          optional={"env": st.dictionaries(text("LOG"), text("debug"), max_size=1),
                                    "args": st.lists(text("--log-level=debug"), max_size=1)})))
servings = st.builds(
    llm.ModelServingArgs, text("team-a"), st.lists(models | typed_models, min_size=1, max_size=2) | st.just("chat"),
    routers,
    platform=st.fixed_dictionaries({}, optional={
        "gpuNodeSelector": st.dictionaries(text("pool"), text("a100"), max_size=1),
        "imagePullSecrets": st.lists(text("regcred"), max_size=1),
        "hfEndpoint": text("https://huggingface.co")}))


@seed(2025)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(servings)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the earlier arguments are drawn too
def test_no_library_refusal_repeats_a_credential(args):
    try:
        llm.stack_config_of(args)
    except (TypeError, ValueError) as refused:
        message = str(refused)
        for value in CREDENTIALS:
            assert value not in message, f"a {type(refused).__name__} repeated a credential: {message[:200]}"
        assert credential_shape(message) is None, f"a refusal holds {credential_shape(message).kind}"
        lines = message.splitlines()
        named = lines[1:] if lines[0] == "invalid ModelServingArgs:" else lines[:1]
        assert named and all(line.strip().startswith(NAMED) for line in named), message[:300]
        return
    plain = json.dumps(args.to_config(), default=str)
    assert not any(value in plain for value in CREDENTIALS), "a credential accepted in a plain field"
