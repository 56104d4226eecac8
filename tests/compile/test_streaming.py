"""`source.load: stream` compiled (issue 23 item 5): the server reads the store itself — no weights
volume, no puller Job, no gate — with the store's settings and keys in its environment (the keys
from the Secret, never a value), a writable folder for the config files, and vLLM 0.11.0's own
loader and URI scheme (tests/fixtures/vllm_0_11_0.py)."""

from __future__ import annotations

from components import children as roles
from components.compile import compile_stack
from components.compile.plan import model_plan
from components.config import load_stack_config
from components.config.streaming import CONFIG_MOUNT
from tests.fixtures import vllm_0_11_0 as vllm
from tests.support.kube_schema import assert_valid_kubernetes

SOURCE = {"type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/", "region": "eu-west-1",
          "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "keys", "accessKeyIdKey": "id"}}


POLICY = {"enabled": True, "allowFrom": [{"namespaceSelector": {"kubernetes.io/metadata.name": "apps"}}]}


def stack(source=None, **platform):
    return load_stack_config({"platform": platform, "models": [{"name": "m", "source": source or SOURCE}]})


def server(config) -> dict:
    (deployment,) = [m for m in compile_stack(config) if m["kind"] == "Deployment"]
    return deployment


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_no_volume_no_puller_no_gate():
    config = stack(networkPolicy=POLICY)
    kinds = [(m["kind"], m["metadata"]["name"]) for m in compile_stack(config)]
    assert not [k for k in kinds if k[0] in ("PersistentVolumeClaim", "Job")]
    assert ("NetworkPolicy", "m-puller-egress") not in kinds  # no puller to hold in
    plan = model_plan(config.models[0], config)
    assert {c.role for c in plan.children}.isdisjoint({roles.WEIGHTS, roles.PULLER, roles.WEIGHTS_GATE})
    assert plan.status.objects.puller_job == ""  # the status reads no Job
    assert set(plan.outputs["objects"]) == {"deployment", "service"}
    # The server waits on nothing of the weights: the platform and its NetworkPolicy only.
    waits = dict((c.role, w) for c, w in plan.declared(rendering=False))
    assert waits[roles.SERVER] == (roles.NETWORK_POLICY,)


def test_the_server_is_given_the_store_and_vllms_loader():
    container = server(stack())["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[:3] == ["s3://models/llama/", "--load-format", "runai_streamer"]
    assert args[0].startswith(vllm.OBJECT_STORE_SCHEMES) and args[2] in vllm.LOAD_FORMATS
    env = env_of(container)
    assert env["AWS_ENDPOINT_URL"] == env["RUNAI_STREAMER_S3_ENDPOINT"] == "http://minio.storage.svc:9000"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "eu-west-1"
    assert env["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] == "0"
    assert env["RUNAI_STREAMER_MEMORY_LIMIT"] == str(4 << 30)
    assert env["VLLM_ASSETS_CACHE"] == CONFIG_MOUNT
    # The keys come from the Secret (the same one a copy's puller reads), never as a value.
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "keys", "key": "id"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "keys", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"


def test_a_streamed_server_is_not_told_the_hub_is_offline():
    # vLLM 0.11's EngineArgs.__post_init__ (vllm/engine/arg_utils.py l.501-503 of the 0.11.0
    # wheel) replaces the model by get_model_path(model) whenever huggingface_hub reads
    # HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) as true; an s3:// URI is no local path, so it goes
    # to snapshot_download as a repo id and the server dies with HFValidationError
    # (0.32 skips cloud URIs there). A copied model keeps the variable.
    streamed = env_of(server(stack())["spec"]["template"]["spec"]["containers"][0])
    assert not {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} & set(streamed)
    copied = {k: v for k, v in SOURCE.items() if k != "load"}
    assert env_of(server(stack(copied))["spec"]["template"]["spec"]["containers"][0])["HF_HUB_OFFLINE"] == "1"


def test_the_config_files_get_a_writable_folder_and_no_weights_are_mounted():
    pod = server(stack())["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "weights" not in volumes and not any("persistentVolumeClaim" in v for v in volumes.values())
    assert volumes["model-config"] == {"name": "model-config", "emptyDir": {"sizeLimit": "2Gi"}}
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert CONFIG_MOUNT in mounts and "/model-store" not in mounts


def test_aws_without_keys_uses_the_pods_identity():
    source = {"type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/",
              "serviceAccountName": "models-reader"}
    pod = server(stack(source))["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    # AWS S3: no endpoint override, virtual-hosted requests, credentials from the identity (IRSA).
    assert not {"AWS_ENDPOINT_URL", "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "AWS_ACCESS_KEY_ID",
                "AWS_EC2_METADATA_DISABLED"} & set(env)
    # The server reads the bucket, so it runs as the account carrying the identity; no API token.
    assert pod["serviceAccountName"] == "models-reader" and pod["automountServiceAccountToken"] is False


def test_a_copied_source_renders_as_before():
    copied = stack({**SOURCE, "load": "copy"})
    kinds = {m["kind"] for m in compile_stack(copied)}
    assert {"PersistentVolumeClaim", "Job"} <= kinds
    container = server(copied)["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "/model-store" and "--load-format" not in container["args"]
    assert "AWS_ENDPOINT_URL" not in env_of(container)


def test_the_rollout_surges_a_streamed_server():
    # No ReadWriteOnce volume to hand over: a new pod may start beside the old one.
    strategy = server(stack())["spec"]["strategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_manifests_are_valid_kubernetes():
    for manifest in compile_stack(stack(networkPolicy=POLICY)):
        assert_valid_kubernetes(manifest)
