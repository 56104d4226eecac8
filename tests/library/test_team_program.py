"""The example team program (examples/team-program), run under mocks: the unit twin of
tests/integration/test_team_program_on_cluster.py. Its S3 `load: stream` model is declared with no
weights volume and no puller, its server streams from the store with the keys of the program's own
Secret (named by that Secret's Output, so it waits for it), and every object is in the program's
Namespace, named by the Namespace's Output."""

from __future__ import annotations

import runpy

import pulumi
import pytest

from testkit.harness import REPO
from tests.support.component_kit import Mocks, record_graph

PROGRAM = REPO / "examples" / "team-program" / "__main__.py"


@pytest.fixture
def graph(kubeconfig, monkeypatch):
    pulumi.runtime.set_mocks(Mocks(), project="team-serving", stack="unit", preview=False)
    for key, value in (("namespace", "team-unit"), ("s3AccessKeyId", "id"), ("s3SecretAccessKey", "key")):
        pulumi.runtime.set_config(f"team-serving:{key}", value)
    yield record_graph(monkeypatch)
    pulumi.runtime.config.CONFIG.set({k: v for k, v in pulumi.runtime.config.CONFIG.get().items()
                                      if not k.startswith("team-serving:")})


@pulumi.runtime.test
def test_the_example_streams_an_s3_model_from_its_own_secret_in_its_own_namespace(graph):
    runpy.run_path(str(PROGRAM), run_name="__main__")
    stream = {name for name in graph.manifests if name.startswith("stream-")}
    assert {graph.manifests[n]["kind"] for n in stream} == {"Deployment", "Service"}, sorted(stream)
    assert {"chat-server", "summarize-server", "llm-router-workload"} <= set(graph.manifests)
    server = graph.manifests["stream-server"]
    assert isinstance(server["spec"], pulumi.Output) and isinstance(server["metadata"], pulumi.Output)

    def check(values):
        spec, metadata, dependencies = values
        container = spec["template"]["spec"]["containers"][0]
        assert container["args"][:3] == ["s3://models/tiny-llm/", "--load-format", "runai_streamer"]
        env = {e["name"]: e for e in container["env"]}
        assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage.svc:9000"
        assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "team-s3-keys"
        assert metadata["namespace"] == "team-unit"
        # The server waits on the program's Namespace and Secret: their Outputs name them.
        assert {"team-namespace", "team-s3-keys"} <= {getattr(r, "_name", None) for r in dependencies}

    return pulumi.Output.all(server["spec"], server["metadata"],
                             pulumi.Output.from_input(server["spec"].resources())).apply(check)
