"""NIM config: engine/path combinations, the credentials each path needs, uid/gid per engine.

Each bad config names the field to change and what to do (one line per problem).
"""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from tests.support.builders import model, nim_model

OPERATOR = {"path": "operator", "nim": {"authSecret": "ngc-api"}}


def problems(*models: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config({"models": list(models)})
    return caught.value.problems


def load(*models: dict):
    return load_stack_config({"models": list(models)})


BAD = [
    ("path-on-vllm", model(path="raw"), "models.0.path", "NIM models only"),
    ("path-unknown", nim_model(path="helm"), "models.0.path", "'operator' or 'raw'"),
    ("nim-on-vllm", model(nim={"authSecret": "x"}), "models.0.nim", "engine 'nim' only"),
    ("operator-without-ngc-key", nim_model(path="operator"), "models.0.nim.authSecret", "NGC_API_KEY"),
    ("operator-hf-without-token", nim_model(path="operator", nim={"cacheSource": "hf", "pullSecret": "p"}),
     "models.0.nim.authSecret", "HF_TOKEN"),
    ("operator-hf-without-pull-secret", nim_model(path="operator", nim={"cacheSource": "hf", "authSecret": "t"}),
     "models.0.nim.pullSecret", "pull Secret"),
    ("operator-hf-with-profiles",
     nim_model(path="operator", nim={"cacheSource": "hf", "authSecret": "t", "pullSecret": "p", "profiles": ["x"]}),
     "models.0.nim.profiles", "hf cache"),
    ("operator-all-not-alone", nim_model(path="operator", nim={"authSecret": "k", "profiles": ["all", "x"]}),
     "models.0.nim.profiles", "only entry"),
    ("operator-digest-only", nim_model(path="operator", nim={"authSecret": "k"}) | {
        "image": "nvcr.io/nim/meta/llama@sha256:" + "a" * 64}, "models.0.image", "add a tag"),
    ("operator-lora", nim_model(lora={"enabled": True}, **OPERATOR), "models.0.lora.enabled", "path: raw"),
    ("operator-hf-token-secret", nim_model(hfTokenSecret={"name": "hf"}, **OPERATOR),
     "models.0.hfTokenSecret", "nim.authSecret"),
    ("raw-with-operator-settings", nim_model(nim={"cacheSource": "ngc"}), "models.0.nim.cacheSource", "path: operator"),
    ("raw-with-profiles", nim_model(nim={"profiles": ["all"]}), "models.0.nim.profiles", "path: operator"),
    ("raw-with-pull-secret", nim_model(nim={"pullSecret": "ngc"}), "models.0.nim.pullSecret", "platform.imagePullSecrets"),
    ("nim-with-vllm-uid", nim_model(securityContext={"runAsUser": 2000}),
     "models.0.securityContext.runAsUser", "vLLM's uid"),
    ("nim-with-vllm-gid", nim_model(securityContext={"runAsGroup": 0}),
     "models.0.securityContext.runAsGroup", "vLLM's gid"),
    ("vllm-with-nim-uid", model(securityContext={"runAsUser": 1000}),
     "models.0.securityContext.runAsUser", "NIM's uid"),
    ("nim-with-other-uid", nim_model(securityContext={"runAsUser": 4242}),
     "models.0.securityContext.runAsUser", "allowNonDefaultIdentity"),
    ("root-override", nim_model(securityContext={"runAsUser": 0, "allowNonDefaultIdentity": True}),
     "models.0.securityContext.runAsUser", "no pod runs as root"),
    ("allow-with-nothing", nim_model(securityContext={"allowNonDefaultIdentity": True}),
     "models.0.securityContext.allowNonDefaultIdentity", "nothing to allow"),
    ("nim-unknown-key", nim_model(nim={"ngcKey": "x"}), "models.0.nim.ngcKey", "unknown field"),
    ("auth-secret-not-a-name", nim_model(nim={"authSecret": "NGC Key"}), "models.0.nim.authSecret", "DNS-1123"),
]


@pytest.mark.parametrize("raw, path, text", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_nim_config_names_the_field(raw, path, text):
    found = problems(raw)
    assert any(line.startswith(f"{path}:") and text in line for line in found), found


def test_operator_problems_are_reported_together():
    found = problems(nim_model(path="operator", lora={"enabled": True}, hfTokenSecret={"name": "hf"}))
    assert {line.split(":")[0] for line in found} == {
        "models.0.nim.authSecret", "models.0.lora.enabled", "models.0.hfTokenSecret"}


def test_nim_defaults_to_the_raw_path():
    (config,) = load(nim_model()).models
    assert config.path == "raw" and not config.on_operator
    assert config.nim is None and config.nim_settings.auth_secret is None


def test_vllm_has_no_path():
    (config,) = load(model()).models
    assert config.path is None and not config.on_operator


GOOD = [
    ("operator-ngc", nim_model(**OPERATOR)),
    ("operator-ngc-profiles", nim_model(path="operator", nim={"authSecret": "k", "profiles": ["all"]})),
    ("operator-hf", nim_model(path="operator", nim={"cacheSource": "hf", "authSecret": "t", "pullSecret": "p"})),
    ("operator-digest-with-tag", nim_model(path="operator", nim={"authSecret": "k"}) | {
        "image": "nvcr.io/nim/meta/llama:1.0@sha256:" + "a" * 64}),
    ("raw-with-ngc-key", nim_model(path="raw", nim={"authSecret": "ngc-api"})),
    ("nim-own-identity-spelled-out", nim_model(securityContext={"runAsUser": 1000, "runAsGroup": 2000})),
    ("vllm-own-identity-spelled-out", model(securityContext={"runAsUser": 2000, "runAsGroup": 0})),
    ("nim-explicit-vllm-uid", nim_model(securityContext={"runAsUser": 2000, "runAsGroup": 0,
                                                         "allowNonDefaultIdentity": True})),
]


@pytest.mark.parametrize("raw", [c[1] for c in GOOD], ids=[c[0] for c in GOOD])
def test_good_nim_config_is_accepted(raw):
    assert load(raw).models[0].name


def test_snake_case_spelling_is_accepted():
    (config,) = load(nim_model(path="operator", nim={"auth_secret": "k", "cache_source": "ngc"})).models
    assert config.nim_settings.auth_secret == "k"
