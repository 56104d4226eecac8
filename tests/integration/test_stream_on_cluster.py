"""A streamed s3 model on the simulated cluster under the real engine (issue 23 item 5): it
deploys to READY with no weights volume, no puller Job and no gate, beside a copied one; the
server gets the store's URI, vLLM's streaming loader and the keys from the Secret.

On KWOK no container runs: this proves the objects, their wiring and the status on the real
engine and API server; the streamer itself runs against a real S3 server in tests/streamer.
"""

from __future__ import annotations

import pytest

from testkit.harness import small_model, stack_config

pytestmark = pytest.mark.integration

STORE = {"bucket": "models", "prefix": "tiny-llm/", "endpoint": "http://minio.storage.svc:9000",
         "credentials": {"secret": "s3-keys"}}


@pytest.fixture(scope="module")
def deployed(make_project, kube):
    def config(namespace: str) -> dict:
        streamed = small_model("streamed", source={"type": "s3", "load": "stream", "streamMemoryLimit": "1Gi", **STORE})
        del streamed["weights"]  # no volume to size
        return stack_config(namespace, [
            streamed, small_model("copied", source={"type": "s3", **STORE})], createNamespace=False)

    project = make_project(config)
    core = kube.CoreV1Api()
    core.create_namespace({"metadata": {"name": project.namespace}})
    core.create_namespaced_secret(project.namespace, {
        "metadata": {"name": "s3-keys"},
        "stringData": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}})
    project.up()
    yield project
    core.delete_namespace(project.namespace)


def test_both_serve(deployed):
    models = deployed.outputs()["models"]
    for name in ("streamed", "copied"):
        assert models[name]["status"]["state"] == "READY", models[name]


def test_the_streamed_model_has_no_volume_no_puller(deployed, kube):
    objects = deployed.outputs()["models"]["streamed"]["objects"]
    assert set(objects) == {"deployment", "service"}
    selector = "llm-serving.dev/model=streamed"
    assert kube.BatchV1Api().list_namespaced_job(deployed.namespace, label_selector=selector).items == []
    claims = kube.CoreV1Api().list_namespaced_persistent_volume_claim(deployed.namespace, label_selector=selector)
    assert claims.items == []
    # The copied model beside it keeps its volume and its Job.
    copied = deployed.outputs()["models"]["copied"]["objects"]
    assert kube.BatchV1Api().read_namespaced_job(copied["puller"], deployed.namespace).status.completion_time


def test_the_server_reads_the_store(deployed, kube):
    objects = deployed.outputs()["models"]["streamed"]["objects"]
    pod = kube.AppsV1Api().read_namespaced_deployment(objects["deployment"], deployed.namespace).spec.template.spec
    server = pod.containers[0]
    assert server.args[:3] == ["s3://models/tiny-llm/", "--load-format", "runai_streamer"]
    env = {e.name: e for e in server.env}
    assert env["AWS_ENDPOINT_URL"].value == "http://minio.storage.svc:9000"
    assert env["AWS_SECRET_ACCESS_KEY"].value is None
    assert env["AWS_SECRET_ACCESS_KEY"].value_from.secret_key_ref.name == "s3-keys"
    assert {v.name for v in pod.volumes} == {"dshm", "model-config"}
    assert not any(v.persistent_volume_claim for v in pod.volumes)
