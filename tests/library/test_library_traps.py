"""What a program written from docs/library.md alone met (issue 38): a token repeated in a
TypeError, messages without the argument's path, a router that routes to nothing, the docs' 8Gi
model refused, `platform.preflight` accepted and ignored, and a missing kubeconfig found half-way
through `up`. Each is refused (or works) at construction, before any resource, with the
library's own fix."""

from __future__ import annotations

import pulumi
import pytest

import llm_serving as llm
from components.config.secret_values import credential_shape
from tests.support.component_kit import Mocks
from tests.support.config_strategies import CREDENTIALS

REVISION = "0123456789abcdef0123456789abcdef01234567"
HF_TOKEN = CREDENTIALS[0]
ROUTER = llm.RouterArgs(image="registry.example.com/llm/request-router:0.16.2", settings={
    "pylon": {"image": "registry.example.com/llm/stargate-client:0.16.2"}, "workerAuth": {"mode": "open"}})


def chat(**fields) -> llm.ModelArgs:
    return llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm", revision=fields.pop("revision", REVISION)),
                         resources=llm.Resources(cpu="1", memory="24Gi"), **fields)


def serving_args(*models: llm.ModelArgs, **fields) -> llm.ModelServingArgs:
    return llm.ModelServingArgs(namespace="team-a", models=list(models or [chat()]), **fields)


@pytest.fixture
def registered():
    names: list[str] = []

    class Recording(Mocks):
        def new_resource(self, args):
            names.append(args.name)
            return super().new_resource(args)

    pulumi.runtime.set_mocks(Recording(), preview=False)
    return names


def test_a_command_line_given_as_one_string_is_refused_without_repeating_it():
    args = serving_args(chat(args=f"--max-num-seqs 8 --hf-token {HF_TOKEN}"))
    with pytest.raises(TypeError) as refused:
        llm.stack_config_of(args)
    message = str(refused.value)
    assert message.startswith("models[0].args: a list of strings, one item per word"), message
    assert HF_TOKEN not in message and credential_shape(message) is None and "--max-num-seqs" not in message


def test_a_name_shaped_like_a_credential_is_not_repeated_in_a_library_message():
    with pytest.raises(ValueError) as refused:
        llm.ModelArgs(HF_TOKEN, llm.HubSource("acme/tiny-llm"), gpus=1, settings={"gpus": 2}).to_config()
    assert HF_TOKEN not in str(refused.value) and "gpus given both" in str(refused.value)


def test_an_unknown_engine_is_refused_at_its_argument():
    with pytest.raises(ValueError) as refused:
        llm.stack_config_of(serving_args(chat(engine="sglang")))
    assert "  models[0].engine: engine 'sglang' is unknown; use 'vllm' or 'nim'" in str(refused.value).splitlines()


def test_a_router_without_a_pylon_is_refused_with_the_settings_that_make_it_route():
    with pytest.raises(ValueError) as refused:
        llm.stack_config_of(serving_args(router=llm.RouterArgs(image="registry.example.com/llm/request-router:0.16.2")))
    line = str(refused.value).splitlines()[1].strip()
    assert line.startswith("router.pylon: the router reaches models only through the pylon sidecar"), line
    assert "pylon=PylonConfig(image=" in line and "worker_auth=WorkerAuth(" in line
    assert llm.stack_config_of(serving_args(router=ROUTER)).router.pylon is not None


def test_the_docs_8gi_model_gets_shared_memory_it_can_hold():
    """platform.sharedMemorySizeLimit's default (16Gi) refused every model under 16Gi; left unset,
    it is half a smaller model's memory. Set explicitly, it is checked as before."""
    small = llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm", revision=REVISION),
                          resources=llm.Resources(cpu="2", memory="8Gi"))
    stack = llm.stack_config_of(serving_args(small))
    assert stack.shm_limit(stack.models[0]) == "4Gi"
    with pytest.raises(ValueError, match="platform.sharedMemorySizeLimit: 16Gi exceeds the container's memory"):
        llm.stack_config_of(serving_args(small, platform={"sharedMemorySizeLimit": "16Gi"}))
    big = llm.stack_config_of(serving_args(chat()))
    assert big.shm_limit(big.models[0]) == "16Gi"  # a model of 16Gi or more: as it always was


def test_preflight_asked_for_in_platform_runs(kubeconfig, registered, monkeypatch):
    from components import program

    ran = []

    def preflight(stack, stack_token=None):
        ran.append((stack.platform.preflight.enabled, stack_token))
        return stack, {}

    monkeypatch.setattr(program, "preflight", preflight)
    llm.ModelServing("team-a", serving_args(platform={"preflight": {"enabled": True}}))
    assert ran == [(True, None)]
    ran.clear()
    # The stack secret as the library takes it: the preflight asks the Hub with it, as the stack
    # program's does with llm-serving:hfToken.
    llm.ModelServing("team-c", serving_args(platform=llm.Platform(preflight=llm.Preflight(enabled=True)),
                                            hf_token=HF_TOKEN))
    assert ran == [(True, HF_TOKEN)]
    ran.clear()
    llm.ModelServing("team-b", serving_args())
    assert ran == []  # off by default: no network while a program declares


def test_a_preflight_that_fails_registers_nothing(kubeconfig, registered, monkeypatch):
    from components import program

    def preflight(stack, stack_token=None):
        raise pulumi.RunError("models.0.source.revision: no such revision")

    monkeypatch.setattr(program, "preflight", preflight)
    with pytest.raises(pulumi.RunError, match="no such revision"):
        llm.ModelServing("team-a", serving_args(platform={"preflight": {"enabled": True}}))
    assert registered == []


def test_without_preflight_a_branch_revision_and_an_unlisted_s3_source_are_warned_about(kubeconfig, registered, monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warned.append(message))
    llm.ModelServing("team-a", serving_args(chat(revision="main")))
    assert len(warned) == 1 and warned[0].startswith("models[0].source.revision 'main' is not a commit"), warned
    warned.clear()
    llm.ModelServing("team-b", serving_args(chat()))
    assert warned == []
    s3 = llm.ModelArgs("embed", llm.S3Source("weights", prefix="bge/", credentials_secret="s3-reader"),
                       resources=llm.Resources(cpu="1", memory="24Gi"))
    llm.ModelServing("team-c", serving_args(s3))
    assert len(warned) == 1 and warned[0].startswith("models[0].source: the objects are copied without the "
                                                     "preflight's listing"), warned


def test_without_a_kubeconfig_anywhere_construction_refuses_with_the_librarys_fix(tmp_path, registered,
                                                                                   monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ValueError) as refused:
        llm.ModelServing("team-a", serving_args())
    message = str(refused.value)
    assert "kubeconfig_content: unset, so the resources that read the cluster" in message
    assert "pass the kubeconfig your kubernetes.Provider is given as kubeconfig_content" in message
    # Not the stack program's fixes, which a library user has no use for.
    assert "scripts/env.sh" not in message and "llm-serving:cluster" not in message
    assert registered == []
    with pytest.raises(ValueError, match="kubeconfig: '/no/such/file' is no file"):
        llm.ModelServing("team-a", serving_args(kubeconfig="/no/such/file"))
    assert llm.ModelServing("team-a", serving_args(kubeconfig_content="apiVersion: v1\n")).servers  # content: no file needed
