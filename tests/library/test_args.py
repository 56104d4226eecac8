"""The library's typed arguments (llm_serving/args.py) become the stack config's shape, and the
config model refuses a bad one with the stack files' message, at the argument's path."""

from __future__ import annotations

import pytest

import llm_serving as llm
from components.compile import compile_stack
from components.config import load_stack_config

REVISION = "0123456789abcdef0123456789abcdef01234567"
ROUTER_IMAGE = "registry.example.com/llm/request-router:0.16.2"
# The router reaches models only through the pylon in their pods: the library refuses one without.
PYLON = {"pylon": {"image": "registry.example.com/llm/stargate-client:0.16.2"}, "workerAuth": {"mode": "open"}}
CHAT = llm.Model("chat", llm.HubSource("acme/tiny-llm", revision=REVISION), gpus=1,
                  resources=llm.Resources(cpu="1", memory="24Gi"), weights=llm.WeightsStorage(size="1Gi"))


def test_the_arguments_are_the_stack_config_a_stack_file_would_hold():
    """Only what is given is written (the config model fills its defaults), in the stack file's
    names; the typed sections and the earlier settings mappings give the same stack."""
    args = llm.ModelServingArgs(
        namespace="team-a", models=[CHAT, llm.Model(
            "embed", llm.S3Source("weights", prefix="embed/", endpoint="https://s3.example.com",
                                  credentials=llm.S3Credentials(secret="s3"), load="stream"),
            args=["--max-model-len", "2048"], autoscaling=llm.Autoscaling(target_queue_depth=8))],
        router=llm.Router(image=ROUTER_IMAGE, replicas=2, gateway=llm.GatewayConfig(enabled=True),
                          pylon=llm.PylonConfig(image=PYLON["pylon"]["image"]), worker_auth=llm.WorkerAuth(mode="open")))
    assert args.to_config() == {
        "platform": {"namespace": "team-a", "createNamespace": False, "preflight": {"enabled": False}},
        "cluster": {},
        "models": [
            {"name": "chat", "source": {"type": "hf", "repo": "acme/tiny-llm", "revision": REVISION},
             "gpus": 1, "resources": {"cpu": "1", "memory": "24Gi"}, "weights": {"size": "1Gi"}},
            {"name": "embed",
             "source": {"type": "s3", "bucket": "weights", "prefix": "embed/", "endpoint": "https://s3.example.com",
                        "credentials": {"secret": "s3"}, "load": "stream"},
             "args": ["--max-model-len", "2048"], "autoscaling": {"targetQueueDepth": 8}},
        ],
        "router": {"image": ROUTER_IMAGE, "replicas": 2, "gateway": {"enabled": True}, **PYLON},
    }
    stack = llm.stack_config_of(args)
    assert stack == load_stack_config(args.to_config())
    assert [m.name for m in stack.models] == ["chat", "embed"] and stack.platform.namespace == "team-a"
    assert stack.models[1].source.load == "stream"
    with pytest.warns(DeprecationWarning, match="RouterArgs"):
        earlier = llm.stack_config_of(llm.ModelServingArgs(
            namespace="team-a", models=args.models,
            router=llm.RouterArgs(image=ROUTER_IMAGE, replicas=2, settings={"gateway": {"enabled": True}, **PYLON})))
    assert earlier == stack


def test_the_earlier_arguments_still_work_and_say_what_replaces_them():
    with pytest.warns(DeprecationWarning) as warned:
        model = llm.ModelArgs("embed", llm.S3Source("weights", "embed/", None, None, "s3"), weights_size="1Gi",
                              settings={"lora": {"enabled": True}})
        config = model.to_config()
    assert config == {"name": "embed", "source": {"type": "s3", "bucket": "weights", "prefix": "embed/",
                                                  "credentials": {"secret": "s3"}},
                      "weights": {"size": "1Gi"}, "lora": {"enabled": True}}
    assert {str(w.message).split(" is deprecated")[0] for w in warned} == {
        "llm_serving: S3Source(credentials_secret=...)", "llm_serving: ModelArgs(weights_size=...)",
        "llm_serving: ModelArgs(settings={...})"}
    assert "use S3Source(credentials=S3Credentials(secret=...))" in str(warned[0].message)


def test_a_cpu_model_is_gpus_zero_with_its_kv_cache():
    model = llm.ModelArgs("tiny", llm.HubSource("acme/tiny-llm", revision=REVISION), gpus=0,
                          resources=llm.Resources(cpu="2", memory="8Gi", kv_cache="4Gi"))
    assert model.to_config()["resources"] == {"cpu": "2", "memory": "8Gi", "kvCache": "4Gi"}
    (tiny,) = llm.stack_config_of(llm.ModelServingArgs(namespace="team-a", models=[model],
                                                       platform={"sharedMemorySizeLimit": "1Gi"})).models
    assert tiny.on_cpu and tiny.resources.kv_cache == "4Gi"


def test_a_volume_source_and_an_enum_engine():
    model = llm.ModelArgs("nim", llm.VolumeSource("models", sub_path="llama"), engine=llm.Engine.NIM,
                          image="nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4")
    assert model.to_config()["engine"] == "nim"
    assert model.to_config()["source"] == {"type": "pvc", "claimName": "models", "subPath": "llama"}


def test_the_router_and_gateway_placement_reach_their_pods_through_settings():
    cpu = {"pool": "cpu"}
    args = llm.ModelServingArgs(namespace="team-a", models=[CHAT], router=llm.RouterArgs(
        image=ROUTER_IMAGE, settings={"nodeSelector": cpu, "gateway": {"nodeSelector": {"pool": "edge"}}, **PYLON}))
    pods = {m["metadata"]["name"]: m["spec"]["template"]["spec"] for m in compile_stack(llm.stack_config_of(args))
            if m["kind"] == "Deployment"}
    assert pods["llm-router"]["nodeSelector"] == cpu
    assert pods["llm-router-gateway"]["nodeSelector"] == {"pool": "edge"}
    with pytest.raises(ValueError, match=r"router.tolerations\[0\].key: required with operator 'Equal'"):
        llm.stack_config_of(llm.ModelServingArgs(namespace="team-a", models=[CHAT], router=llm.RouterArgs(
            image=ROUTER_IMAGE, settings={"tolerations": [{"operator": "Equal", "value": "x"}], **PYLON})))


@pytest.mark.parametrize(("models", "expected"), [
    ([llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm"), gpus=-1)], "models[0].gpus: "),
    ([CHAT, CHAT], "models[1].name: "),
    ([llm.ModelArgs("Chat_1", llm.HubSource("acme/tiny-llm"))], "models[0].name: "),
    ([llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm"), settings={"replica": 2})], "models[0].replica: "),
])
def test_a_bad_argument_is_refused_at_its_path_with_the_config_models_fix(models, expected):
    with pytest.raises(ValueError) as refused:
        llm.stack_config_of(llm.ModelServingArgs(namespace="team-a", models=models))
    lines = str(refused.value).splitlines()
    assert "models." not in str(refused.value).replace("models[", ""), "a path left in the stack config's spelling"
    assert lines[0] == "invalid ModelServingArgs:"
    assert any(line.strip().startswith(expected) for line in lines[1:]), str(refused.value)


def test_a_setting_given_twice_or_an_argument_of_the_wrong_type_is_refused():
    with pytest.raises(ValueError, match=r"ModelArgs\(name='chat'\): gpus given both as an argument and in settings"):
        llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm"), gpus=1, settings={"gpus": 2}).to_config()
    with pytest.raises(TypeError, match="source: a HubSource or S3Source or VolumeSource, not dict"):
        llm.ModelArgs("chat", {"repo": "acme/tiny-llm"}).to_config()  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ModelServingArgs.models\[0\]: a Model, not dict"):
        llm.ModelServingArgs(namespace="a", models=[{"name": "chat"}]).to_config()  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"ModelArgs\(name='chat'\).args: a list of strings, one item per word") as one:
        llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm"), args="--enforce-eager").to_config()  # type: ignore[arg-type]
    assert "--enforce-eager" not in str(one.value)  # never repeated: a pasted token would be
    with pytest.raises(TypeError, match="ModelServing takes a ModelServingArgs, not dict"):
        llm.stack_config_of({"namespace": "a"})  # type: ignore[arg-type]
