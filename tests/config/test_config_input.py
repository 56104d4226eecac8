"""Input that cannot hurt (issue 15 items 9, 11, 12, 13) and the config module layout (issue 14
item 5): no traceback for absurd values, strict integers, namespaces the stack does not own,
the teardown identity's account, messages that say the fix, and no import cycle."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest
from pydantic import BaseModel

from components.compile.secrets import stack_secrets, unused_stack_secrets
from components.config import ConfigError, StackConfig, load_stack_config, read_stack_file, values
from components.config import model as model_section
from components.config import router as router_section
from components.config import types as config_types
from components.config.loader import load_program_config
from components.config.stack import configured, used
from components.config.stack_secrets import HF_TOKEN_SECRET, NGC_API_KEY_SECRET, STACK_SECRETS
from components.config.types import StackSecret, _is_int_field
from components.preflight.decide import Check, HubFile, RepoState, decide
from components.preflight.stack import check_for
from tests.support.builders import ROOT, model, nim_model


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


# --- issue 14 item 5: one types module, no cycle -----------------------------------------------

@pytest.mark.parametrize("first", ["components.config.router", "components.config.types",
                                   "components.config.platform", "components.config.model",
                                   "components.config.stack", "components.config.loader"])
def test_each_config_module_imports_first_in_a_fresh_process(first):
    result = subprocess.run([sys.executable, "-c", f"import {first}"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_router_and_model_share_the_base_types():
    assert router_section.Strict is model_section.Strict is config_types.Strict
    assert router_section.Image is config_types.Image and router_section.PositiveQuantity is config_types.PositiveQuantity


def test_every_stack_secret_is_a_stack_config_field():
    typed = {name for name, field in StackConfig.model_fields.items()
             if StackSecret in typing.get_args(field.annotation)}
    assert typed == {spec.field for spec in STACK_SECRETS}
    assert {StackConfig.model_fields[spec.field].alias for spec in STACK_SECRETS} == {
        spec.config_key for spec in STACK_SECRETS}


def test_every_stack_secret_says_which_models_read_it():
    # model.py's readers: without one, a stack secret would never fill a model's setting.
    assert set(model_section.SECRET_READERS) == {spec.config_key for spec in STACK_SECRETS}


SECRET = {"secure": "v1:c2VjcmV0"}


def test_stack_secret_defaults_are_resolved_after_validation_in_either_spelling():
    raw = [model("open"), nim_model("nim-raw"), nim_model("op", path="operator"),
           model("own", hfTokenSecret={"name": "team", "key": "hf"})]
    for spelling in ({"hfToken": SECRET, "ngcApiKey": SECRET}, {"hf_token": SECRET, "ngc_api_key": SECRET}):
        stack = load_stack_config({"models": raw, **spelling})
        by_name = {m.name: m for m in stack.models}
        assert by_name["open"].hf_token_secret == HF_TOKEN_SECRET
        assert by_name["nim-raw"].nim_settings.auth_secret == NGC_API_KEY_SECRET.name
        assert by_name["op"].hf_token_secret is None  # the operator reads nim.authSecret
        assert by_name["op"].nim_settings.auth_secret == NGC_API_KEY_SECRET.name
        assert by_name["own"].hf_token_secret.name == "team"


def test_without_stack_secrets_models_read_none():
    (m,) = load_stack_config({"models": [model()]}).models
    assert m.hf_token_secret is None


# --- item 11: no traceback, strict integers ---------------------------------------------------

def _int_fields(model_cls: type[BaseModel], prefix: str = "") -> list[tuple[type[BaseModel], str]]:
    found = []
    for name, field in model_cls.model_fields.items():
        if _is_int_field(field.annotation):
            found.append((model_cls, name))
        for arg in (field.annotation, *typing.get_args(field.annotation)):
            for inner in (arg, *typing.get_args(arg)):
                if isinstance(inner, type) and issubclass(inner, BaseModel) and inner is not model_cls:
                    found.extend(_int_fields(inner))
    return found


INT_FIELDS = sorted({(cls.__name__, name): (cls, name) for cls, name in _int_fields(StackConfig)}.values(),
                    key=lambda pair: (pair[0].__name__, pair[1]))


def test_the_config_has_integer_fields_to_check():
    names = {f"{cls.__name__}.{name}" for cls, name in INT_FIELDS}
    assert {"ModelConfig.gpus", "ModelConfig.replicas", "RouterConfig.replicas", "PlatformConfig.vllm_uid"} <= names


@pytest.mark.parametrize("cls, name", INT_FIELDS, ids=[f"{c.__name__}.{n}" for c, n in INT_FIELDS])
@pytest.mark.parametrize("bad", [True, False, "2", 2.0])
def test_every_integer_field_is_strict(cls, name, bad):
    with pytest.raises(ValueError) as raised:
        cls.__pydantic_validator__.validate_assignment(cls.model_construct(), name, bad)
    assert "whole number" in str(raised.value)


def test_yaml_integers_are_still_integers():
    (m,) = load_stack_config({"models": [model(gpus=2, tensorParallelSize=2, replicas=0)]}).models
    assert (m.gpus, m.tensor_parallel_size, m.replicas) == (2, 2, 0)


@pytest.mark.parametrize("raw, fragment", [
    ({"models": [model(gpus=True)]}, "models.0.gpus: true is a boolean"),
    ({"models": [model(replicas="2")]}, "models.0.replicas: '2' is text"),
    ({"models": [model(replicas=1.5)]}, "models.0.replicas: 1.5 is not a whole number"),
    ({"platform": {"pendingTimeoutSeconds": False}}, "platform.pendingTimeoutSeconds: false is a boolean"),
])
def test_strict_integer_messages(raw, fragment):
    assert any(line.startswith(fragment) for line in problems_of(raw)), problems_of(raw)


@pytest.mark.parametrize("text", ["1e1000000", "1e-1000000", "8Ei", "9" * 5000, "1e31", "99999999999999999999"])
def test_absurd_quantities_are_refused_not_crashed_on(text):
    with pytest.raises(ValueError, match="too large|out of range|not a Kubernetes quantity"):
        values.parse_quantity(text)
    (line,) = problems_of({"models": [model(weights={"size": text})]})
    assert line.startswith("models.0.weights.size: '") and len(line) < 200


def test_the_largest_quantity_kubernetes_keeps_is_accepted():
    assert values.parse_quantity("7Ei") == 7 * 2**60
    assert values.parse_quantity(str(2**63 - 1)) == 2**63 - 1


@pytest.mark.parametrize("given, expected", [(16, "16"), (0.5, "0.5"), (2.0, "2"), ("500m", "500m")])
def test_numbers_are_valid_quantities(given, expected):
    (m,) = load_stack_config({"models": [model(resources={"cpu": given})]}).models
    assert m.resources.cpu == expected


@pytest.mark.parametrize("given", [True, float("inf"), float("nan"), [1]])
def test_non_quantities_are_refused_with_the_fix(given):
    (line,) = problems_of({"models": [model(resources={"cpu": given})]})
    assert line.startswith("models.0.resources.cpu: ") and "'16Gi'" in line


# --- item 9: the teardown identity is never the serving account ---------------------------------

def test_teardown_identity_cannot_share_the_serving_account():
    (line,) = problems_of({"platform": {"serviceAccountName": "shared", "teardownIdentity": {
        "enabled": True, "serviceAccountName": "shared"}}})
    assert line.startswith("platform.teardownIdentity.serviceAccountName: 'shared' is also "
                           "platform.serviceAccountName") and "delete rights" in line


def test_a_disabled_teardown_identity_may_keep_any_name():
    stack = load_stack_config({"platform": {"serviceAccountName": "shared", "teardownIdentity": {
        "serviceAccountName": "shared"}}})
    assert stack.platform.teardown_identity.enabled is False


# --- item 12: namespaces the stack does not own -------------------------------------------------

@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease"])
@pytest.mark.parametrize("create", [True, False])
def test_system_namespaces_are_refused(namespace, create):
    (line,) = problems_of({"platform": {"namespace": namespace, "createNamespace": create}})
    assert line.startswith(f"platform.namespace: '{namespace}' belongs to Kubernetes itself")


def test_default_namespace_only_without_creating_it():
    (line,) = problems_of({"platform": {"namespace": "default"}})
    assert line.startswith("platform.namespace: 'default'") and "createNamespace: false" in line
    assert load_stack_config({"platform": {"namespace": "default", "createNamespace": False}}).platform.namespace == "default"


# --- item 13: messages say what to do -----------------------------------------------------------

RAW_PYDANTIC = ("Input should be", "instance of", "Extra inputs are not permitted", "Field required",
                "Value error,", "unable to interpret")


@pytest.mark.parametrize("raw", [
    {"models": "llama"}, {"models": [model(name=12)]}, {"models": [model(source="o/n")]},
    {"platform": ["x"]}, {"models": [model(lora={"enabled": "yes please"})]},
    {"models": [model(weights={"accessMode": "ReadOnlyMany"})]}, {"models": [model(env={"A": 1})]},
    {"models": [model(args="--x")]}, {"models": [{"name": "x"}]}, {"models": [model(gpus=-1)]},
    {"models": [model(gpu=2)]}, {"router": {"image": 3}}, {"platform": {"preflight": {"headroomPercent": 101}}},
    {"models": [nim_model(nim="x")]},
])
def test_no_raw_validator_message_reaches_the_user(raw):
    for line in problems_of(raw):
        assert not any(fragment in line for fragment in RAW_PYDANTIC), line
        assert ": " in line and line.split(": ", 1)[1]


@pytest.mark.parametrize("raw, line", [
    ({"models": "llama"}, "models: must be a list: one `- item` per line"),
    ({"models": [model(source="o/n")]}, "models.0.source: must be a mapping: `key: value` lines"),
    ({"models": [model(name=12)]}, "models.0.name: must be text"),
    ({"models": [model(weights={"accessMode": "x"})]}, "models.0.weights.accessMode: use one of 'ReadWriteOnce' or 'ReadWriteMany'"),
    ({"models": [model(gpus=-1)]}, "models.0.gpus: must be greater than or equal to 0"),
])
def test_type_messages_name_the_fix(raw, line):
    assert any(p.startswith(line) for p in problems_of(raw)), problems_of(raw)


@pytest.mark.parametrize("raw, line", [
    ({"models": [model(gpu=2)]}, "models.0.gpu: unknown field; did you mean `gpus`?"),
    ({"models": [model(tensorParalelSize=2)]}, "models.0.tensorParalelSize: unknown field; did you mean `tensorParallelSize`?"),
    ({"models": [model(lora={"maxlora": 2})]}, "models.0.lora.maxlora: unknown field; did you mean `maxLoras`?"),
    ({"platform": {"namespce": "x"}}, "platform.namespce: unknown field; did you mean `namespace`?"),
    ({"platform": {"gpuTolerations": [{"efect": "NoSchedule"}]}}, "platform.gpuTolerations.0.efect: unknown field; did you mean `effect`?"),
    ({"router": {"image": "nvcr.io/x/y:1", "replica": 2}}, "router.replica: unknown field; did you mean `replicas`?"),
    ({"models": [model(zzz=1)]}, "models.0.zzz: unknown field; remove it (valid keys here: name, engine, source"),
])
def test_unknown_keys_suggest_the_closest(raw, line):
    assert any(p.startswith(line) for p in problems_of(raw)), problems_of(raw)


def test_unknown_section_suggests_the_closest(tmp_path):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  llm-serving:modles: []\n  llm-serving:zzzzzz: 1\n")
    with pytest.raises(ConfigError) as raised:
        read_stack_file(path)
    assert raised.value.problems[0] == "llm-serving:modles: unknown stack config key; did you mean `llm-serving:models`?"
    assert raised.value.problems[1].startswith("llm-serving:zzzzzz: unknown stack config key; use one of llm-serving:cluster")


def test_shared_memory_problem_names_the_key_the_user_set():
    (inherited,) = problems_of({"platform": {"sharedMemorySizeLimit": "64Mi"},
                                "models": [model(gpus=2, tensorParallelSize=2)]})
    assert inherited.startswith("platform.sharedMemorySizeLimit: 64Mi") and "models.0.sharedMemorySizeLimit" in inherited
    (own,) = problems_of({"models": [model(gpus=2, tensorParallelSize=2, sharedMemorySizeLimit="64Mi")]})
    assert own.startswith("models.0.sharedMemorySizeLimit: 64Mi")


def _too_small(**check) -> str:
    state = RepoState("0" * 40, (HubFile("model.safetensors", 60 * 2**30),))
    (error,) = decide(Check(repo="o/n", revision="main", endpoint="https://hf", **check), state).errors
    assert error.field == "weights.size"
    return error.message


def test_size_check_says_when_the_size_is_the_default_not_the_users():
    assert _too_small(volume_size="50Gi", volume_size_default=True).startswith(
        "the default weights.size (50Gi, 50.0 GiB; the model does not set it) is too small")
    assert _too_small(volume_size="40Gi").startswith("40Gi (40.0 GiB) is too small")


def test_preflight_check_knows_whether_the_model_set_its_size():
    stack = load_stack_config({"models": [model("a"), model("b", weights={"size": "80Gi"}),
                                          model("c", weights={"accessMode": "ReadWriteMany"})]})
    defaults = [check_for(m, stack, env={}).volume_size_default for m in stack.models]
    assert defaults == [True, False, True]


# --- the program's one loader -------------------------------------------------------------------

def test_the_program_loader_reports_unknown_keys_and_invalid_values_together():
    import json

    import pulumi


    token = "hf_PlainProgramToken0123456789"
    pulumi.runtime.set_all_config({
        "llm-serving:modles": "[]",
        "llm-serving:models": json.dumps([model(gpu=1)]),
        "llm-serving:hfToken": token,
        "kubernetes:context": "elsewhere",
    }, [])
    try:
        with pytest.raises(ConfigError) as raised:
            load_program_config()
    finally:
        pulumi.runtime.set_all_config({}, [])
    problems = raised.value.problems
    assert problems[0] == "llm-serving:modles: unknown stack config key; did you mean `llm-serving:models`?"
    assert any(p.startswith("models.0.gpu: unknown field; did you mean `gpus`?") for p in problems)
    assert any(p.startswith("hfToken: is stored in plain text") for p in problems)
    assert token not in str(raised.value)


def test_the_program_loader_reads_sections_and_secret_presence():
    import json

    import pulumi


    pulumi.runtime.set_all_config({"llm-serving:models": json.dumps([model("chat")]),
                                   "llm-serving:hfToken": "hf_x"}, ["llm-serving:hfToken"])
    try:
        stack = load_program_config()
    finally:
        pulumi.runtime.set_all_config({}, [])
    assert stack.hf_token == "[secret]" and "hf_x" not in stack.model_dump_json()
    assert stack.models[0].hf_token_secret == HF_TOKEN_SECRET


def test_the_registry_knows_which_secrets_a_stack_uses_as_the_compiler_does():
    for models in ([model("open")], [model("own", hfTokenSecret={"name": "team"})], [nim_model("n")],
                   [model("open"), nim_model("n")], [nim_model("op", path="operator", nim={"authSecret": "own"})]):
        stack = load_stack_config({"models": models, "hfToken": SECRET, "ngcApiKey": SECRET})
        assert {spec.config_key for spec in used(stack)} == {s.config_key for s in stack_secrets(stack)}
        assert {spec.config_key for spec in configured(stack)} - {spec.config_key for spec in used(stack)} == set(
            unused_stack_secrets(stack))
