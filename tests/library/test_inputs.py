"""``pulumi.Input`` arguments (issue 40): the namespace, images and the stack secrets may come from
another resource. The objects take the Output where the value is written (so they depend on that
resource), and the value is validated when known, with a message naming the argument."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pytest

import llm_serving as llm
from tests.support.component_kit import Mocks, record_graph

REVISION = "0123456789abcdef0123456789abcdef01234567"
SERVER_IMAGE = "docker.io/vllm/vllm-openai:v0.11.0"


def chat(**fields) -> llm.Model:
    return llm.Model("chat", llm.HubSource("acme/tiny-llm", revision=REVISION), gpus=1,
                     resources=llm.Resources(cpu="1", memory="24Gi"), **fields)


pytestmark = pytest.mark.usefixtures("kubeconfig")  # tests/library/conftest.py


@pulumi.runtime.test
def test_a_namespace_from_a_namespace_resource_is_written_and_waited_on(graph):
    namespace = k8s.core.v1.Namespace("team-namespace", metadata={"name": "team-a"})
    serving = llm.ModelServing("team-a", llm.ModelServingArgs(namespace=namespace.metadata.name, models=[chat()]))
    server = graph.manifests["chat-server"]
    assert isinstance(server["metadata"]["namespace"], pulumi.Output)

    def check(values):
        written, endpoint, dependencies = values
        assert written == "team-a"
        assert endpoint == {"chat": "http://chat.team-a.svc.cluster.local:8000"}
        # The Output carries the Namespace: the object waits on it without a depends_on.
        assert namespace in dependencies

    deps = server["metadata"]["namespace"].resources()
    return pulumi.Output.all(server["metadata"]["namespace"], serving.endpoints, pulumi.Output.from_input(deps)) \
        .apply(check)


@pulumi.runtime.test
def test_an_image_from_another_resource_reaches_the_server(graph):
    image = pulumi.Output.from_input(SERVER_IMAGE)
    llm.ModelServing("team-a", llm.ModelServingArgs(namespace="team-a", models=[chat(image=image)]))
    spec = graph.manifests["chat-server"]["spec"]
    assert isinstance(spec, pulumi.Output)  # known at deployment
    return spec.apply(lambda s: assert_equal(s["template"]["spec"]["containers"][0]["image"], SERVER_IMAGE))


def assert_equal(a, b):
    assert a == b, (a, b)


@pytest.mark.parametrize(("namespace", "expected"), [
    ("Team_A", "  platform.namespace: "),           # not a DNS label: the config's message, at its field
    (42, "  namespace: resolved to a int, not text"),
])
def test_a_bad_value_is_refused_when_known_naming_the_argument(monkeypatch, namespace, expected):
    pulumi.runtime.set_mocks(Mocks(), preview=False)
    record_graph(monkeypatch)
    failures: list[str] = []

    @pulumi.runtime.test
    def deploy():
        serving = llm.ModelServing("team-a", llm.ModelServingArgs(namespace=pulumi.Output.from_input(namespace),
                                                                  models=[chat()]))
        return serving.endpoints

    with pytest.raises(ValueError) as refused:
        deploy()
    failures.append(str(refused.value))
    assert any(line.startswith(expected) for line in failures[0].splitlines()), failures[0]


@pulumi.runtime.test
def test_what_a_known_value_implies_is_compiled_from_it(graph):
    """The placeholder image names no vLLM line, so the set is first compiled on the platform's
    default line (0.11); a platform image of the 0.32 line gives a CPU model the 0.32 CPU image
    and its environment, compiled again from the real value once it is known."""
    cpu = llm.Model("tiny", llm.HubSource("acme/tiny-llm", revision=REVISION), gpus=0,
                    resources=llm.Resources(cpu="2", memory="8Gi"))
    platform = llm.Platform(vllm_image=pulumi.Output.from_input("docker.io/vllm/vllm-openai:v0.32.0"),
                            shared_memory_size_limit="1Gi")
    llm.ModelServing("team-a", llm.ModelServingArgs(namespace="team-a", models=[cpu], platform=platform))
    spec = graph.manifests["tiny-server"]["spec"]
    return spec.apply(lambda s: assert_equal(s["template"]["spec"]["containers"][0]["image"],
                                             "docker.io/vllm/vllm-openai-cpu:v0.32.0"))


def test_values_that_make_another_set_of_objects_are_refused(monkeypatch):
    """A model's hfTokenSecret named, once known, as the Secret the stack makes from hf_token: the
    set then reads the stack secret and holds its Secret, which the placeholder's set did not."""
    pulumi.runtime.set_mocks(Mocks(), preview=False)
    record_graph(monkeypatch)

    @pulumi.runtime.test
    def deploy():
        reference = llm.SecretKeyRef(name=pulumi.Output.from_input("llm-serving-hf-token"))
        args = llm.ModelServingArgs(namespace="team-a", models=[chat(hf_token_secret=reference)],
                                    hf_token=pulumi.Output.secret("hf_" + "x" * 34))
        return llm.ModelServing("team-a", args).endpoints

    with pytest.raises(ValueError, match=r"models\[0\]\.hf_token_secret\.name: the values known at deployment make "
                                         r"other objects than the ones declared before they were known "
                                         r"\(team-a-platform: llm-serving-hf-token\)"):
        deploy()


def test_an_output_where_no_output_is_taken_is_refused_at_construction():
    with pytest.raises(TypeError, match=r"models\[0\]\.name: a plain value, not a Output"):
        llm.stack_config_of(llm.ModelServingArgs(namespace="team-a", models=[
            llm.Model(pulumi.Output.from_input("chat"), llm.HubSource("acme/tiny-llm"))]))


@pulumi.runtime.test
def test_a_stack_secret_from_another_resource_becomes_the_models_secret(monkeypatch):
    pulumi.runtime.set_mocks(Mocks(), preview=False)
    graph = record_graph(monkeypatch)
    token = pulumi.Output.secret("hf_" + "x" * 34)
    llm.ModelServing("team-a", llm.ModelServingArgs(namespace="team-a", models=[chat()], hf_token=token))
    secrets = [name for name in graph.manifests if graph.manifests[name]["kind"] == "Secret"]
    assert secrets, sorted(graph.manifests)
    data = graph.manifests[secrets[0]]["stringData"]
    (value,) = data.values()
    return pulumi.Output.all(value, pulumi.Output.is_secret(value)).apply(
        lambda v: assert_equal(v, ["hf_" + "x" * 34, True]))


@pulumi.runtime.test
def test_a_secret_the_program_creates_is_named_by_its_output_and_waited_on(graph):
    """An S3 `load: stream` model whose keys are a Secret of the program: the server reads the
    Secret by the Output's name, so it is created after the Secret."""
    keys = k8s.core.v1.Secret("s3-keys", metadata={"name": "team-s3-keys", "namespace": "team-a"},
                              string_data={"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key"})
    source = llm.S3Source("models", prefix="tiny-llm/", endpoint="http://minio.storage.svc:9000", load="stream",
                          stream_memory_limit="1Gi", credentials=llm.S3Credentials(secret=keys.metadata.name))
    llm.ModelServing("team-a", llm.ModelServingArgs(namespace="team-a", models=[chat_from(source)]))
    spec = graph.manifests["stream-server"]["spec"]

    def check(values):
        spec, dependencies = values
        env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "team-s3-keys"
        assert keys in dependencies  # created after the Secret

    return pulumi.Output.all(spec, pulumi.Output.from_input(spec.resources())).apply(check)


def chat_from(source) -> llm.Model:
    return llm.Model("stream", source, gpus=1, resources=llm.Resources(cpu="1", memory="4Gi"))


@pulumi.runtime.test
def test_a_copied_s3_model_with_the_programs_secret_pulls_under_the_real_values_names(graph):
    """The puller Job's name hashes its source, Secret name included: the Job and the gate that
    waits for it take the name the real Secret's name gives, not the placeholder's."""
    from components.compile.plan import model_plan

    keys = k8s.core.v1.Secret("s3-keys", metadata={"name": "team-s3-keys", "namespace": "team-a"})
    source = llm.S3Source("models", prefix="tiny-llm/", endpoint="http://minio.storage.svc:9000",
                          credentials=llm.S3Credentials(secret=keys.metadata.name))
    llm.ModelServing("team-a", llm.ModelServingArgs(namespace="team-a", models=[chat_from(source)]))
    plain = llm.stack_config_of(llm.ModelServingArgs(namespace="team-a", models=[
        chat_from(llm.S3Source("models", prefix="tiny-llm/", endpoint="http://minio.storage.svc:9000",
                               credentials=llm.S3Credentials(secret="team-s3-keys")))]))
    expected = {c.role: c for c in model_plan(plain.models[0], plain).children}
    job = next(name for name, m in graph.manifests.items() if m["kind"] == "Job")
    gate = next(name for name in graph.props if "gate" in name)

    def check(values):
        metadata, gate_job = values
        assert metadata["name"] == expected["puller"].manifest["metadata"]["name"]
        assert gate_job == expected["weights-gate"].props.to_dict()["puller_job"]

    return pulumi.Output.all(graph.manifests[job]["metadata"], graph.props[gate]["puller_job"]).apply(check)


@pulumi.runtime.test
def test_what_the_preflight_pinned_is_deployed_when_other_values_come_later(graph, monkeypatch):
    """With the preflight on and the namespace an Output, the set is planned again once the
    namespace is known: from the stack the preflight returned (its revision pinned to a commit),
    not from the arguments as given (a branch each pod would resolve when it starts)."""
    from components import program

    def preflight(stack, stack_token=None):
        model = stack.models[0]
        pinned = model.model_copy(update={"source": model.source.model_copy(update={"revision": REVISION})})
        return stack.model_copy(update={"models": (pinned,)}), {"chat": {"commit": REVISION}}

    monkeypatch.setattr(program, "preflight", preflight)
    branch = llm.Model("chat", llm.HubSource("acme/tiny-llm", revision="main"), gpus=1,
                       resources=llm.Resources(cpu="1", memory="24Gi"))
    llm.ModelServing("team-a", llm.ModelServingArgs(
        namespace=pulumi.Output.from_input("team-a"), models=[branch],
        platform=llm.Platform(preflight=llm.Preflight(enabled=True))))
    job = next(m for m in graph.manifests.values() if m["kind"] == "Job")

    def check(spec):
        (puller,) = [c for c in spec["template"]["spec"]["initContainers"] if c["name"] == "puller"]
        args = puller["args"]
        assert args[args.index("--revision") + 1] == REVISION, args

    return job["spec"].apply(check)


@pulumi.runtime.test
def test_an_s3_listing_and_a_secret_known_later_both_reach_the_puller(graph, monkeypatch):
    """The preflight's listing (which the verify step checks the copy against) and the Secret's
    real name together: the Job is the one a plain program with both would declare."""
    from components import program
    from components.compile.plan import model_plan
    from components.config.sources import S3Object

    listing = (S3Object(key="config.json", size=2, etag="0" * 32),)

    def preflight(stack, stack_token=None):
        model = stack.models[0]
        listed = model.model_copy(update={"source": model.source.model_copy(update={"manifest": listing})})
        return stack.model_copy(update={"models": (listed,)}), {}

    monkeypatch.setattr(program, "preflight", preflight)

    def source(secret):
        return llm.S3Source("models", prefix="tiny-llm/", endpoint="http://minio.storage.svc:9000",
                            credentials=llm.S3Credentials(secret=secret))

    keys = k8s.core.v1.Secret("s3-keys", metadata={"name": "team-s3-keys", "namespace": "team-a"})
    on = llm.Platform(preflight=llm.Preflight(enabled=True))
    llm.ModelServing("team-a", llm.ModelServingArgs(namespace="team-a", models=[chat_from(source(keys.metadata.name))],
                                                    platform=on))
    plain, _ = preflight(llm.stack_config_of(llm.ModelServingArgs(
        namespace="team-a", models=[chat_from(source("team-s3-keys"))], platform=on)))
    expected = {c.role: c for c in model_plan(plain.models[0], plain).children}["puller"].manifest
    job = next(m for m in graph.manifests.values() if m["kind"] == "Job")

    def check(values):
        metadata, spec = values
        assert metadata["name"] == expected["metadata"]["name"]
        assert spec == expected["spec"]

    return pulumi.Output.all(job["metadata"], job["spec"]).apply(check)
