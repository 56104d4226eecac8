"""The config model refuses what would crash, leak or over-privilege, at the field to change.

Bad cases are a table: raw `llm-serving:*` section values, the expected `field.path` and a
fragment of the message. Structured inputs (quantities, images, names) get property tests.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from components.config import ConfigError, StackConfig, load_stack_config, values
from tests.support.builders import NIM_IMAGE, model, nim_model

# (id, raw config, field path, message fragment)
BAD = [
    ("engine-generic", {"models": [model(engine="generic")]},
     "models.0.engine", "'generic' is not supported on Kubernetes"),
    ("engine-unknown", {"models": [model(engine="tgi")]},
     "models.0.engine", "'tgi' is unknown"),
    ("name-uppercase", {"models": [model("Llama")]}, "models.0.name", "not a valid name"),
    ("name-leading-digit", {"models": [model("8b-chat")]}, "models.0.name", "not a valid name"),
    ("name-trailing-dash", {"models": [model("chat-")]}, "models.0.name", "not a valid name"),
    ("name-underscore", {"models": [model("llama_8b")]}, "models.0.name", "not a valid name"),
    ("name-46-chars", {"models": [model("a" * 46)]}, "models.0.name", "at most 45"),
    ("name-duplicate", {"models": [model("chat"), model("other"), model("chat")]},
     "models.2.name", "declared twice"),
    ("tp-not-dividing", {"models": [model(gpus=3, tensorParallelSize=2)]},
     "models.0.tensorParallelSize", "does not divide"),
    ("tp-larger-than-gpus", {"models": [model(gpus=1, tensorParallelSize=2)]},
     "models.0.tensorParallelSize", "does not divide"),
    ("shm-below-1Gi-with-tp", {"models": [model(gpus=2, tensorParallelSize=2, sharedMemorySizeLimit="512Mi")]},
     "models.0.sharedMemorySizeLimit", "at least 1Gi"),
    ("platform-shm-below-1Gi-with-tp",
     {"platform": {"sharedMemorySizeLimit": "64Mi"}, "models": [model(gpus=2, tensorParallelSize=2)]},
     "platform.sharedMemorySizeLimit", "at least 1Gi"),
    ("shm-above-memory", {"models": [model(sharedMemorySizeLimit="64Gi", resources={"memory": "32Gi"})]},
     "models.0.sharedMemorySizeLimit", "exceeds the container's memory"),
    ("replicas-rwo", {"models": [model(replicas=2)]}, "models.0.replicas", "ReadWriteOnce"),
    ("replicas-rwo-explicit", {"models": [model(replicas=3, weights={"accessMode": "ReadWriteOnce"})]},
     "models.0.replicas", "ReadWriteMany"),
    ("vllm-uid-0", {"platform": {"vllmUid": 0}}, "platform.vllmUid", "no pod runs as root"),
    ("nim-uid-0", {"platform": {"nimUid": 0}}, "platform.nimUid", "no pod runs as root"),
    ("vllm-uid-negative", {"platform": {"vllmUid": -1}}, "platform.vllmUid", "not allowed"),
    ("gid-negative", {"platform": {"nimGid": -1}}, "platform.nimGid", "greater than or equal to 0"),
    ("image-short-name", {"platform": {"busyboxImage": "busybox:1.37.0"}},
     "platform.busyboxImage", "not fully qualified"),
    ("image-no-registry", {"platform": {"vllmImage": "vllm/vllm-openai:v0.11.0"}},
     "platform.vllmImage", "not fully qualified"),
    ("image-latest", {"platform": {"pullerImage": "docker.io/vllm/vllm-openai:latest"}},
     "platform.pullerImage", "':latest'"),
    ("image-no-tag", {"platform": {"vllmImage": "docker.io/vllm/vllm-openai"}},
     "platform.vllmImage", "has no tag"),
    ("model-image-short", {"models": [model(image="vllm-openai:v0.11.0")]},
     "models.0.image", "not fully qualified"),
    ("quantity-unparsable", {"models": [model(resources={"memory": "32 GB"})]},
     "models.0.resources.memory", "not a Kubernetes quantity"),
    ("quantity-unparsable-shm", {"platform": {"sharedMemorySizeLimit": "lots"}},
     "platform.sharedMemorySizeLimit", "not a Kubernetes quantity"),
    ("quantity-zero", {"models": [model(weights={"size": "0"})]},
     "models.0.weights.size", "greater than zero"),
    ("quantity-negative", {"models": [model(lora={"cacheSizeLimit": "-1Gi"})]},
     "models.0.lora.cacheSizeLimit", "greater than zero"),
    ("revision-bad", {"models": [model(source={"repo": "o/n", "revision": "a..b"})]},
     "models.0.source.revision", "not a branch, tag or 40-hex commit"),
    ("revision-space", {"models": [model(source={"repo": "o/n", "revision": "my branch"})]},
     "models.0.source.revision", "not a branch"),
    ("revision-abbreviated", {"models": [model(source={"repo": "o/n", "revision": "abc1234"})]},
     "models.0.source.revision", "abbreviated commit"),
    ("revision-39-hex", {"models": [model(source={"repo": "o/n", "revision": "a" * 39})]},
     "models.0.source.revision", "abbreviated commit"),
    ("repo-without-owner", {"models": [model(source={"repo": "llama"})]},
     "models.0.source.repo", "owner/name"),
    ("hf-localhost", {"platform": {"hfEndpoint": "http://localhost:8080"}},
     "platform.hfEndpoint", "loopback"),
    ("hf-127", {"platform": {"hfEndpoint": "http://127.0.0.1:8080"}}, "platform.hfEndpoint", "loopback"),
    ("hf-ipv6-loopback", {"platform": {"hfEndpoint": "http://[::1]:8080"}}, "platform.hfEndpoint", "loopback"),
    ("hf-unspecified", {"platform": {"hfEndpoint": "http://0.0.0.0:8080"}}, "platform.hfEndpoint", "loopback"),
    ("hf-mapped-loopback", {"platform": {"hfEndpoint": "http://[::ffff:127.0.0.1]:8080"}}, "platform.hfEndpoint", "loopback"),
    ("toleration-exists-with-value",
     {"platform": {"gpuTolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}},
     "platform.gpuTolerations.0", "takes no value"),
    ("hf-sub-localhost", {"platform": {"hfEndpoint": "http://hf.localhost"}}, "platform.hfEndpoint", "loopback"),
    ("hf-model-localhost", {"models": [model(hfEndpoint="https://localhost")]},
     "models.0.hfEndpoint", "loopback"),
    ("hf-not-http", {"platform": {"hfEndpoint": "ftp://mirror.example.com"}},
     "platform.hfEndpoint", "not an http(s) URL"),
    ("unknown-top-level", {"modles": []}, "modles", "unknown field"),
    ("unknown-platform-key", {"platform": {"vllmImg": "docker.io/x/y:1"}},
     "platform.vllmImg", "unknown field"),
    ("unknown-nested-key", {"models": [model(weights={"sizee": "10Gi"})]},
     "models.0.weights.sizee", "unknown field"),
    ("missing-source", {"models": [{"name": "chat"}]}, "models.0.source", "required"),
    ("missing-repo", {"models": [{"name": "chat", "source": {"revision": "main"}}]},
     "models.0.source.repo", "required"),
    ("missing-name", {"models": [{"source": {"repo": "o/n"}}]}, "models.0.name", "required"),
    ("gpus-string", {"models": [model(gpus="two")]}, "models.0.gpus", "whole number"),
    ("gpus-negative", {"models": [model(gpus=-1)]}, "models.0.gpus", "greater than or equal to 0"),
    ("models-not-a-list", {"models": {"name": "chat"}}, "models", "must be a list"),
    ("access-mode-unknown", {"models": [model(weights={"accessMode": "ReadOnlyMany"})]},
     "models.0.weights.accessMode", "'ReadWriteOnce' or 'ReadWriteMany'"),
    ("nim-without-image", {"models": [model(engine="nim")]}, "models.0.image", "NIM images are per model"),
    ("namespace-uppercase", {"platform": {"namespace": "Inference"}}, "platform.namespace", "DNS-1123"),
    ("token-secret-name", {"models": [model(hfTokenSecret={"name": "HF_TOKEN"})]},
     "models.0.hfTokenSecret.name", "DNS-1123"),
    ("startup-too-short", {"platform": {"startupTimeoutSeconds": 10}},
     "platform.startupTimeoutSeconds", "greater than or equal to 60"),
    ("health-path-blank", {"models": [model(healthPath="  ")]}, "models.0.healthPath", "non-empty URL path"),
    ("health-path-space", {"models": [model(healthPath="/he alth")]}, "models.0.healthPath", "non-empty URL path"),
    ("toleration-operator", {"platform": {"gpuTolerations": [{"key": "k", "operator": "In"}]}},
     "platform.gpuTolerations.0.operator", "'Exists' or 'Equal'"),
]


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config(raw)
    return caught.value.problems


@pytest.mark.parametrize("raw, path, fragment", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_config_is_reported_at_its_field(raw, path, fragment):
    problems = problems_of(raw)
    at_path = [p for p in problems if p.startswith(f"{path}: ")]
    assert at_path, f"no problem reported at {path!r}; got {problems}"
    assert any(fragment in p for p in at_path), f"{fragment!r} not in {at_path}"


def test_every_problem_is_reported_at_once():
    problems = problems_of({
        "platform": {"vllmUid": 0},
        "models": [model("Bad"), model(gpus="two"), {"name": "nosource"}],
    })
    assert [p.split(":")[0] for p in problems] == [
        "platform.vllmUid", "models.0.name", "models.1.gpus", "models.2.source",
    ]


def test_cross_field_problems_are_each_on_their_own_line():
    problems = problems_of({"models": [model(gpus=3, tensorParallelSize=2, replicas=2)]})
    assert sorted(p.split(":")[0] for p in problems) == ["models.0.replicas", "models.0.tensorParallelSize"]


def test_error_message_lists_problems():
    with pytest.raises(ConfigError) as caught:
        load_stack_config({"models": [model(engine="generic")]})
    assert "models.0.engine: engine 'generic'" in str(caught.value)


def test_problems_are_named_and_a_bare_tuple_is_refused():
    """A check returns Problem(path, message); a (path, message) tuple from an old spelling fails
    where it is raised, not as a garbled line in the formatter."""
    problem = values.Problem("replicas", "set 1")
    assert problem.under("models.0") == values.Problem("models.0.replicas", "set 1")
    assert str(values.Problems([problem])) == "replicas: set 1"
    with pytest.raises(TypeError, match=r"Problem\(path, message\)"):
        values.Problems([("replicas", "set 1")])


# --- what is accepted ------------------------------------------------------------------------

def load(*models: dict, **platform) -> StackConfig:
    return load_stack_config({"models": list(models), **({"platform": platform} if platform else {})})


@pytest.mark.parametrize("given_path, expected", [
    ("health", "/health"), ("/health", "/health"), ("v1/models", "/v1/models"), ("  ready  ", "/ready"),
])
def test_health_path_is_normalised_to_leading_slash(given_path, expected):
    assert load(model(healthPath=given_path)).models[0].health_path == expected


@pytest.mark.parametrize("raw, expected", [
    (model(), "/health"),
    (model(engine="vllm"), "/health"),
    (nim_model(), "/v1/health/ready"),
])
def test_health_path_default_depends_on_engine(raw, expected):
    assert load(raw).models[0].health_path == expected


def test_empty_config_has_documented_defaults():
    config = load_stack_config({})
    platform = config.platform
    assert config.models == ()
    assert (platform.vllm_uid, platform.vllm_gid) == (2000, 0)
    assert (platform.nim_uid, platform.nim_gid) == (1000, 2000)
    assert platform.busybox_image.startswith("docker.io/library/busybox:")
    assert platform.hf_endpoint == "https://huggingface.co"
    assert platform.namespace == "llm-serving"


def test_model_defaults():
    chat = load(model("chat")).models[0]
    assert chat.engine == "vllm"
    assert chat.source.revision == "main"
    assert (chat.gpus, chat.tensor_parallel_size, chat.replicas) == (1, 1, 1)
    assert chat.weights.access_mode == "ReadWriteOnce"
    assert chat.lora.enabled is False


def test_camel_case_and_snake_case_are_both_accepted():
    camel = {
        "platform": {"vllmUid": 2001, "sharedMemorySizeLimit": "8Gi", "hfEndpoint": "https://hf.example.com"},
        "models": [model(tensorParallelSize=2, gpus=2, weights={"accessMode": "ReadWriteMany"}, replicas=2,
                         healthPath="/ping", hfTokenSecret={"name": "hf"}, lora={"maxLoras": 2})],
    }
    snake = {
        "platform": {"vllm_uid": 2001, "shared_memory_size_limit": "8Gi", "hf_endpoint": "https://hf.example.com"},
        "models": [model(tensor_parallel_size=2, gpus=2, weights={"access_mode": "ReadWriteMany"}, replicas=2,
                         health_path="/ping", hf_token_secret={"name": "hf"}, lora={"max_loras": 2})],
    }
    assert load_stack_config(camel) == load_stack_config(snake)
    assert load_stack_config(camel).models[0].tensor_parallel_size == 2


def test_hf_endpoint_mirror_is_accepted_without_trailing_slash():
    config = load(model(hfEndpoint="http://hf-mirror.mirrors.svc:8080/"))
    assert config.models[0].hf_endpoint == "http://hf-mirror.mirrors.svc:8080"


def test_full_commit_and_tag_revisions_are_accepted():
    config = load(model("a", source={"repo": "o/n", "revision": "0" * 40}),
                  model("b", source={"repo": "o/n", "revision": "v1.0"}),
                  model("c", source={"repo": "o/n", "revision": "refs/pr/12"}))
    assert [m.source.revision for m in config.models] == ["0" * 40, "v1.0", "refs/pr/12"]


def test_nim_model_with_image_is_accepted():
    assert load(nim_model()).models[0].image == NIM_IMAGE


def test_config_is_frozen():
    config = load(model())
    with pytest.raises(ValidationError, match="frozen"):
        config.models[0].gpus = 8


# --- property tests on structured values ------------------------------------------------------

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(BINARY)))
def test_binary_quantities_parse_to_their_value(number, suffix):
    assume(number * BINARY[suffix] < 2**63)  # Kubernetes caps quantities at 2^63-1; larger are refused
    assert values.parse_quantity(f"{number}{suffix}") == number * BINARY[suffix]
    assert values.check_quantity(f"{number}{suffix}") == f"{number}{suffix}"


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(DECIMAL)))
def test_decimal_quantities_parse_to_their_value(number, suffix):
    assume(number * DECIMAL[suffix] < 2**63)
    assert values.parse_quantity(f"{number}{suffix}") == number * DECIMAL[suffix]


@given(st.integers(min_value=0, max_value=10**4), st.integers(min_value=0, max_value=12))
def test_exponent_quantities_parse_to_their_value(number, exponent):
    assert values.parse_quantity(f"{number}e{exponent}") == number * 10**exponent


@given(st.integers(min_value=1, max_value=1023), st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi"]))
def test_binary_quantities_order_like_their_values(number, suffix):
    bigger = {"Ki": "Mi", "Mi": "Gi", "Gi": "Ti", "Ti": "Pi", "Pi": "Ei"}[suffix]
    assert values.parse_quantity(f"{number}{suffix}") < values.parse_quantity(f"1{bigger}")


@given(st.text(alphabet="abcxyz GB!%", min_size=1, max_size=6).filter(lambda s: not s.strip().isdigit()))
def test_garbage_is_not_a_quantity(text):
    with pytest.raises(ValueError):
        values.parse_quantity(text)


_COMPONENT = r"[a-z0-9]+(?:[._-][a-z0-9]+){0,2}"
REGISTRY = st.from_regex(r"[a-z0-9]{1,10}(?:-[a-z0-9]{1,5})?\.[a-z]{2,6}(?::[0-9]{2,5})?", fullmatch=True)
REPOSITORY = st.lists(st.from_regex(_COMPONENT, fullmatch=True), min_size=1, max_size=3).map("/".join)
TAG = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True).filter(lambda t: t != "latest")
DIGEST = st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True)


@given(REGISTRY, REPOSITORY, TAG)
def test_check_image_accepts_any_qualified_pinned_image(registry, repository, tag):
    image = f"{registry}/{repository}:{tag}"
    assert values.check_image(image) == image


@given(REGISTRY, REPOSITORY, DIGEST)
def test_check_image_accepts_digests(registry, repository, digest):
    image = f"{registry}/{repository}@{digest}"
    assert values.check_image(image) == image


@given(REPOSITORY, TAG)
def test_check_image_rejects_images_without_a_registry(repository, tag):
    # Without a '.'-or-port registry the first path part is a Docker Hub namespace: a short name.
    first, *rest = repository.split("/")
    assume(not rest or ("." not in first and first != "localhost"))
    with pytest.raises(ValueError, match="not fully qualified"):
        values.check_image(f"{repository}:{tag}")


@given(REGISTRY, REPOSITORY)
def test_check_image_rejects_unpinned_images(registry, repository):
    with pytest.raises(ValueError, match="no tag"):
        values.check_image(f"{registry}/{repository}")
    with pytest.raises(ValueError, match="latest"):
        values.check_image(f"{registry}/{repository}:latest")


MODEL_NAME = st.from_regex(r"[a-z](?:[-a-z0-9]{0,43}[a-z0-9])?", fullmatch=True)


@given(MODEL_NAME)
def test_dns1035_names_up_to_45_chars_are_model_names(name):
    assert values.check_model_name(name) == name
    assert load(model(name)).models[0].name == name


@given(MODEL_NAME, st.integers(min_value=0, max_value=44), st.sampled_from("ABZ_.:"))
def test_names_with_a_foreign_character_are_rejected(name, position, char):
    position = min(position, len(name))
    with pytest.raises(ValueError):
        values.check_model_name(name[:position] + char + name[position:])


@given(st.from_regex(r"[a-z][a-z0-9]{45,60}", fullmatch=True))
def test_names_longer_than_45_are_rejected(name):
    with pytest.raises(ValueError, match="at most 45"):
        values.check_model_name(name)


@given(st.from_regex(r"[0-9][-a-z0-9]{0,20}", fullmatch=True))
def test_names_starting_with_a_digit_are_rejected(name):
    with pytest.raises(ValueError):
        values.check_model_name(name)


@settings(max_examples=50)
@given(st.from_regex(r"/?[A-Za-z0-9._~/-]{1,30}", fullmatch=True))
def test_health_path_always_gets_exactly_the_missing_leading_slash(path):
    normalised = load(model(healthPath=path)).models[0].health_path
    assert normalised == (path if path.startswith("/") else "/" + path)
