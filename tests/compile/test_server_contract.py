"""Issue 15, what the real vLLM / NIM containers and a real scheduler need from the rendered pods:
service links off, read-only roots on the helper containers, the puller placed where the server
will run, LoRA adapters the server can resolve by name. One guard per test."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from components.compile import common, server
from components.compile.engines.vllm import LORA_ADAPTERS_DIR
from tests.support.builders import (
    compile_stack,
    compiled,
    container,
    containers,
    env_of,
    fixture_stack,
    model,
    nim_model,
    pod_manifests,
    pod_spec,
    stack,
)

ADAPTER = {"name": "sql", "repo": "acme/sql-lora", "revision": "0123456789abcdef0123456789abcdef01234567"}


def lora(*adapters: dict, **fields) -> dict:
    return {"enabled": True, "adapters": list(adapters), **fields}


# --- 1. service links -------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["minimal", "rich"])
def test_every_model_pod_template_disables_service_links(case):
    """A Service named like an engine variable prefix (a model called `vllm`) would otherwise
    inject VLLM_PORT=tcp://... into every pod, and vLLM refuses to start."""
    manifests = pod_manifests(compile_stack(fixture_stack(case)))
    assert {m["kind"] for m in manifests} == {"Deployment", "Job"}  # these fixtures have no router
    for manifest in manifests:
        assert pod_spec(manifest).get("enableServiceLinks") is False, manifest["metadata"]["name"]


def test_a_model_named_vllm_gets_no_service_link_variables():
    objects = compiled(model("vllm"))
    for manifest in (objects.deployment, objects.puller_job):
        assert pod_spec(manifest)["enableServiceLinks"] is False


# --- 8. read-only roots -----------------------------------------------------------------------

@pytest.mark.parametrize("raw", [model(), model(lora=lora()), model(lora=lora(ADAPTER)), nim_model()],
                         ids=["puller", "lora-mkdir", "lora-adapters", "nim"])
def test_puller_and_init_containers_have_read_only_roots_and_a_writable_tmp(raw):
    objects = compiled(raw)
    helpers = [(objects.puller_job, c) for c in containers(objects.puller_job)]
    helpers += [(objects.deployment, c) for c in pod_spec(objects.deployment).get("initContainers", [])]
    assert helpers
    for manifest, item in helpers:
        assert item["securityContext"]["readOnlyRootFilesystem"] is True, item["name"]
        mounts = {m["mountPath"]: m["name"] for m in item["volumeMounts"]}
        assert common.TMP_MOUNT in mounts, item["name"]
        volume = next(v for v in pod_spec(manifest)["volumes"] if v["name"] == mounts[common.TMP_MOUNT])
        assert volume["emptyDir"]["sizeLimit"]


def test_puller_home_and_hf_home_are_writable_mounts():
    puller = container(compiled(model()).puller_job, "puller")
    env = env_of(puller)
    mounts = [m["mountPath"] for m in puller["volumeMounts"]]
    for name in ("HOME", "HF_HOME"):
        assert any(env[name]["value"].startswith(path) for path in mounts), name


# --- 6. puller placement ----------------------------------------------------------------------

def test_puller_gets_the_servers_selector_and_tolerations():
    raw = model(nodeSelector={"pool": "a100"}, tolerations=[{"key": "dedicated", "operator": "Equal",
                                                             "value": "llm", "effect": "NoSchedule"}])
    objects = compiled(raw)
    puller, srv = pod_spec(objects.puller_job), pod_spec(objects.deployment)
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert puller.get(key) == srv.get(key), key
    assert puller["nodeSelector"] == {"pool": "a100"}


def test_read_write_once_puller_without_selector_is_held_to_gpu_nodes():
    """No selector: the server's GPU request keeps it on GPU nodes, the puller's nothing; a
    topology-bound volume would be bound where the puller ran. The affinity keeps it on GPU nodes."""
    puller = pod_spec(compiled(model()).puller_job)
    terms = puller["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {expression["key"] for term in terms for expression in term["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys
    assert "nodeSelector" not in puller


def test_gpu_affinity_matches_the_simulated_gpu_nodes_and_not_the_cpu_node():
    terms = common.gpu_node_affinity()["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]

    def selects(labels: dict) -> bool:
        def ok(expression):
            if expression["operator"] == "Exists":
                return expression["key"] in labels
            return labels.get(expression["key"]) in expression["values"]
        return any(all(ok(e) for e in term["matchExpressions"]) for term in terms)

    assert selects({"nvidia.com/gpu.present": "true"})              # GPU operator / GFD
    assert selects({"feature.node.kubernetes.io/pci-10de.present": "true"})  # NFD
    assert not selects({"node-role.kubernetes.io/cpu-worker": ""})


@pytest.mark.parametrize("raw, platform", [
    (model(), {"gpuNodeSelector": {"nvidia.com/gpu.present": "true"}}),
    (model(nodeSelector={"pool": "gpu"}), {}),
    (model(weights={"accessMode": "ReadWriteMany"}), {}),
], ids=["platform-selector", "model-selector", "read-write-many"])
def test_configured_selector_or_shared_volume_needs_no_extra_affinity(raw, platform):
    assert "affinity" not in pod_spec(compiled(raw, **platform).puller_job)


# --- 4. LoRA adapters -------------------------------------------------------------------------

def test_lora_server_finds_adapters_by_name_through_the_filesystem_resolver():
    deployment = compiled(model(lora=lora(ADAPTER))).deployment
    env = {k: v["value"] for k, v in env_of(container(deployment, "server")).items()}
    assert env["VLLM_PLUGINS"] == "lora_filesystem_resolver"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    resolver_dir = env["VLLM_LORA_RESOLVER_CACHE_DIR"]
    server_mounts = {m["mountPath"]: m for m in container(deployment, "server")["volumeMounts"]}
    init = container(deployment, "lora-cache-init")
    init_mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
    (cache_path,) = [p for p in server_mounts if resolver_dir.startswith(p + "/")]
    assert init_mounts[cache_path]["name"] == server_mounts[cache_path]["name"]
    # The init container downloads each adapter to <resolver dir>/<name>, at the pinned revision.
    assert init["command"][-3:] == [ADAPTER["name"], ADAPTER["repo"], ADAPTER["revision"]]
    assert env_of(init)["ADAPTERS_DIR"]["value"] == resolver_dir


def test_adapters_init_container_reaches_the_hub_with_the_models_token_and_endpoint():
    deployment = compiled(model(lora=lora(ADAPTER), hfTokenSecret={"name": "hf-token"},
                                hfEndpoint="http://hf-mirror.mirrors.svc:8080")).deployment
    env = env_of(container(deployment, "lora-cache-init"))
    assert env["HF_ENDPOINT"]["value"] == "http://hf-mirror.mirrors.svc:8080"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert "HF_TOKEN" not in env_of(container(deployment, "server"))


def test_adapter_change_rolls_the_server_and_never_re_pulls_the_base_weights():
    before = compiled(model("chat", lora=lora(ADAPTER)))
    after = compiled(model("chat", lora=lora({**ADAPTER, "revision": "v2"}, {"name": "b", "repo": "acme/b"})))
    assert after.weights_pvc == before.weights_pvc
    assert after.puller_job == before.puller_job
    assert container(after.deployment, "lora-cache-init") != container(before.deployment, "lora-cache-init")


def test_adapter_script_rebases_the_adapter_on_the_served_weights(tmp_path):
    """The resolver compares base_model_name_or_path with the server's model path: the copy the
    init container leaves behind must name the weights mount (run the real snippet)."""
    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.1-8B", "r": 16}))
    subprocess.run([sys.executable, "-c", server.REBASE_ADAPTER_PY, str(config), common.WEIGHTS_MOUNT], check=True)
    rebased = json.loads(config.read_text())
    assert rebased == {"peft_type": "LORA", "base_model_name_or_path": common.WEIGHTS_MOUNT, "r": 16}
    # ... and the server is started on exactly that path (vLLM's model_config.model).
    args = compiled(model(lora=lora(ADAPTER))).deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == common.WEIGHTS_MOUNT


def test_lora_without_adapters_keeps_the_busybox_mkdir():
    init = container(compiled(model(lora=lora())).deployment, "lora-cache-init")
    assert init["image"].startswith("docker.io/library/busybox:")
    assert LORA_ADAPTERS_DIR in init["command"][-1]


def test_adapters_render_in_a_whole_stack():
    manifests = compile_stack(stack(model(lora=lora(ADAPTER))))
    assert any(c["name"] == "lora-cache-init" for m in pod_manifests(manifests) for c in containers(m))
