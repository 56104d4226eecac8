"""No setting without effect (issue 25 item 3): a key the chosen engine or path ignores is refused
with what to use instead, and so are names in the served-model namespace that resolve to
something else. The walk behind the table is in components/config/effect.py."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from tests.support.builders import model, nim_model

OPERATOR = {"path": "operator", "nim": {"authSecret": "ngc"}}
ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.6.0"}
ADAPTER = {"name": "sql", "repo": "acme/sql-lora"}


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


@pytest.mark.parametrize(("raw", "path", "fragment"), [
    # NIM, either path: adapters would land where NIM never looks
    ({"models": [nim_model(lora={"enabled": True, "adapters": [ADAPTER]})]}, "models.0.lora.enabled", "NIM_PEFT_SOURCE"),
    ({"models": [nim_model(lora={"enabled": True}, **OPERATOR)]}, "models.0.lora.enabled", "engine: vllm"),
    # NIM raw: no parallelism reaches NIM
    ({"models": [nim_model(gpus=2, tensorParallelSize=2)]}, "models.0.tensorParallelSize", "NIM_MODEL_PROFILE"),
    # operator: TP selects nothing with an hf cache or an explicit profile list
    ({"models": [nim_model(gpus=2, tensorParallelSize=2, path="operator",
                           nim={"authSecret": "hf", "cacheSource": "hf", "pullSecret": "ngc"})]},
     "models.0.tensorParallelSize", "hf cache"),
    ({"models": [nim_model(gpus=2, tensorParallelSize=2, path="operator",
                           nim={"authSecret": "ngc", "profiles": ["abc123"]})]},
     "models.0.tensorParallelSize", "nim.profiles"),
    # operator: no drain wait, no file patterns, no HF endpoint for ngc
    ({"models": [nim_model(disruption={"drainSeconds": 60}, **OPERATOR)]}, "models.0.disruption.drainSeconds",
     "no drain wait"),
    ({"models": [nim_model(source={"repo": "acme/x", "allowPatterns": ["*.safetensors"]}, **OPERATOR)]},
     "models.0.source.allowPatterns", "without file patterns"),
    ({"models": [nim_model(source={"repo": "acme/x", "ignorePatterns": []}, **OPERATOR)]},
     "models.0.source.ignorePatterns", "without file patterns"),
    ({"models": [nim_model(hfEndpoint="http://hf-mirror.svc:8080", **OPERATOR)]}, "models.0.hfEndpoint",
     "downloads from NGC"),
    # router: a backend router `auto` does not run
    ({"models": [model()], "router": {**ROUTER, "backendRouter": {"replicas": 3}}},
     "router.backendRouter.replicas", "does not run"),
    ({"models": [model()], "router": {**ROUTER, "backendRouter": {"image": "nvcr.io/nvidia/llm-request-router:0.6.1"}}},
     "router.backendRouter.image", "backendRouter.enabled: true"),
])
def test_a_setting_the_engine_or_path_ignores_is_refused(raw, path, fragment):
    lines = problems_of(raw)
    assert any(line.startswith(f"{path}:") and fragment in line for line in lines), lines


@pytest.mark.parametrize(("raw", "path", "fragment"), [
    ({"models": [model("chat", lora={"enabled": True, "adapters": [{**ADAPTER, "name": "chat"}]})]},
     "models.0.lora.adapters.0.name", "served name of its base model"),
    ({"models": [model("chat", lora={"enabled": True, "adapters": [{**ADAPTER, "name": "code"}]}), model("code")]},
     "models.0.lora.adapters.0.name", "already served by model 'code'"),
    ({"models": [model("chat", lora={"enabled": True, "adapters": [ADAPTER]}),
                 model("code", lora={"enabled": True, "adapters": [ADAPTER]})]},
     "models.1.lora.adapters.0.name", "already served by adapter 0 of model 'chat'"),
])
def test_served_model_names_do_not_collide(raw, path, fragment):
    lines = problems_of(raw)
    assert any(line.startswith(f"{path}:") and fragment in line for line in lines), lines


@pytest.mark.parametrize("raw", [
    {"models": [model(gpus=2, tensorParallelSize=2, lora={"enabled": True, "adapters": [ADAPTER]})]},
    {"models": [nim_model(gpus=2, tensorParallelSize=2, replicas=1, **OPERATOR)]},  # ngc: selects profiles
    {"models": [nim_model(hfEndpoint="http://hf-mirror.svc:8080", path="operator",
                          nim={"authSecret": "hf", "cacheSource": "hf", "pullSecret": "ngc"})]},
    {"models": [model(replicas=1, autoscaling={"enabled": False, "maxReplicas": 3})]},  # a paused switch
    {"models": [model()], "router": {**ROUTER, "backendRouter": {"enabled": False, "replicas": 3}}},
    {"models": [model()], "router": {**ROUTER, "replicas": 2, "backendRouter": {"replicas": 3}}},
    {"models": [model("chat", lora={"enabled": True, "adapters": [ADAPTER]}), model("code")]},
])
def test_settings_that_act_are_accepted(raw):
    assert load_stack_config(raw).models
