"""One targeted assert per SPEC §1 fact: each test fails when its fact breaks in the compilers."""

from __future__ import annotations

import re

import pytest

from components.compile import common
from components.compile.plan import model_plan
from components.compile.stack import compile_model
from components.config import values
from tests.support.builders import (
    REPO,
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

SECURE_CONTAINER = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@pytest.fixture(scope="module")
def rich_manifests() -> list[dict]:
    return compile_stack(fixture_stack("rich"))


def lora_model(**fields) -> dict:
    return model("chat", lora={"enabled": True, "maxLoras": 3, "maxLoraRank": 32}, **fields)


# --- identity ---------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, uid, gid", [
    (lora_model(), 2000, 0),
    (nim_model(), 1000, 2000),  # NIM serves no LoRA here (config/engines/nim.py): no init container
], ids=["vllm", "nim"])
def test_engine_identity_on_server_puller_and_init_pods_and_containers(raw, uid, gid):
    objects = compiled(raw)
    for manifest in (objects.deployment, objects.puller_job):
        pod = pod_spec(manifest)["securityContext"]
        assert (pod["runAsUser"], pod["runAsGroup"]) == (uid, gid), manifest["kind"]
        for item in containers(manifest):
            ctx = item["securityContext"]
            assert (ctx["runAsUser"], ctx["runAsGroup"]) == (uid, gid), item["name"]


def test_engine_identities_are_not_shared():
    manifests = compile_stack(stack(model("v"), nim_model("n")))
    uids = {(m["kind"], m["metadata"]["labels"][common.ENGINE_LABEL]): pod_spec(m)["securityContext"]["runAsUser"]
            for m in pod_manifests(manifests)}
    assert uids == {("Job", "vllm"): 2000, ("Deployment", "vllm"): 2000,
                    ("Job", "nim"): 1000, ("Deployment", "nim"): 1000}


def test_platform_uid_overrides_reach_the_pods():
    objects = compiled(model(), vllmUid=2001, vllmGid=5)
    for manifest in (objects.deployment, objects.puller_job):
        assert pod_spec(manifest)["securityContext"]["runAsUser"] == 2001
        assert pod_spec(manifest)["securityContext"]["runAsGroup"] == 5


@pytest.mark.parametrize("raw, gid", [(model(), 0), (nim_model(), 2000)], ids=["vllm", "nim"])
def test_puller_has_fs_group_and_server_does_not(raw, gid):
    objects = compiled(raw)
    assert pod_spec(objects.puller_job)["securityContext"]["fsGroup"] == gid
    assert "fsGroup" not in pod_spec(objects.deployment)["securityContext"]


def test_every_container_is_non_root_unprivileged_and_confined(rich_manifests):
    seen = set()
    for manifest in pod_manifests(rich_manifests):
        pod = pod_spec(manifest)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for item in containers(manifest):
            ctx = item["securityContext"]
            assert {k: ctx.get(k) for k in SECURE_CONTAINER} == SECURE_CONTAINER, item["name"]
            assert ctx.get("privileged") in (None, False)
            assert ctx["runAsUser"] > 0
            seen.add(item["name"])
    assert {"server", "puller", "lora-cache-init"} <= seen


def test_pods_do_not_mount_a_service_account_token(rich_manifests):
    for manifest in pod_manifests(rich_manifests):
        assert pod_spec(manifest)["automountServiceAccountToken"] is False


# --- annotations, not labels ------------------------------------------------------------------

def test_model_source_and_health_path_are_annotations_not_labels():
    config = stack(model(source={"repo": REPO, "revision": "v1.0"}, healthPath="v1/ready"))
    objects = compile_model(config.models[0], config)
    source = f"{REPO}@v1.0"
    deployment = objects.deployment
    for meta in (deployment["metadata"], deployment["spec"]["template"]["metadata"]):
        assert meta["annotations"][common.MODEL_SOURCE_ANNOTATION] == source
        assert meta["annotations"][common.HEALTH_PATH_ANNOTATION] == "/v1/ready"
    for manifest in (objects.weights_pvc, objects.puller_job):
        assert manifest["metadata"]["annotations"][common.MODEL_SOURCE_ANNOTATION] == source
    for manifest in model_plan(config.models[0], config).objects:
        for meta in (manifest["metadata"], manifest.get("spec", {}).get("template", {}).get("metadata", {})):
            for value in meta.get("labels", {}).values():
                assert "/" not in value and value not in (source, REPO, "/v1/ready")
                assert len(value) <= 63 and LABEL_VALUE.match(value), value


# --- probes -----------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, path", [
    (model(healthPath="v1/ready"), "/v1/ready"),
    (model(), "/health"),
    (nim_model(), "/v1/health/ready"),
])
def test_all_probes_use_the_normalised_health_path(raw, path):
    server = container(compiled(raw).deployment, "server")
    port_names = {p["name"] for p in server["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"]["path"] == path, probe
        assert server[probe]["httpGet"]["port"] in port_names


@pytest.mark.parametrize("timeout", [60, 1800, 3600, 1805])
def test_startup_probe_budget_covers_startup_timeout(timeout):
    probe = container(compiled(model(), startupTimeoutSeconds=timeout).deployment, "server")["startupProbe"]
    budget = probe["periodSeconds"] * probe["failureThreshold"] + probe.get("initialDelaySeconds", 0)
    assert timeout <= budget < timeout + probe["periodSeconds"]


# --- volumes and resources --------------------------------------------------------------------

@pytest.mark.parametrize("raw, platform, limit", [
    (model(), {}, "16Gi"),
    (model(), {"sharedMemorySizeLimit": "2Gi"}, "2Gi"),
    (model(gpus=2, tensorParallelSize=2, sharedMemorySizeLimit="8Gi"), {}, "8Gi"),
])
def test_dev_shm_is_a_memory_empty_dir_with_size_limit(raw, platform, limit):
    deployment = compiled(raw, **platform).deployment
    (dshm,) = [v for v in pod_spec(deployment)["volumes"] if "emptyDir" in v and v["emptyDir"].get("medium") == "Memory"]
    assert dshm["emptyDir"]["sizeLimit"] == limit
    mounts = {m["mountPath"]: m["name"] for m in container(deployment, "server")["volumeMounts"]}
    assert mounts["/dev/shm"] == dshm["name"]


def test_gpu_limits_match_gpus():
    resources = container(compiled(model(gpus=4, tensorParallelSize=4)).deployment, "server")["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == "4"
    assert resources["requests"].get("nvidia.com/gpu", "4") == "4"  # extended resources: request == limit


def test_memory_request_equals_limit():
    resources = container(compiled(model(resources={"memory": "40Gi"})).deployment, "server")["resources"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "40Gi"


# --- LoRA -------------------------------------------------------------------------------------

def test_lora_init_container_is_qualified_busybox_and_server_gets_lora_flags():
    deployment = compiled(lora_model()).deployment
    (init,) = pod_spec(deployment)["initContainers"]
    assert init["image"].startswith("docker.io/library/busybox:")
    args = container(deployment, "server")["args"]
    assert "--enable-lora" in args
    assert args[args.index("--max-loras") + 1] == "3"
    assert args[args.index("--max-lora-rank") + 1] == "32"
    server_mounts = {m["name"] for m in container(deployment, "server")["volumeMounts"]}
    # The adapter cache the init container prepares is the server's; /tmp is the init's own.
    assert {m["name"] for m in init["volumeMounts"]} - {"tmp"} <= server_mounts


def test_no_lora_means_no_init_container_and_no_flags():
    deployment = compiled(model()).deployment
    assert "initContainers" not in pod_spec(deployment)
    assert "--enable-lora" not in container(deployment, "server")["args"]


# --- puller -----------------------------------------------------------------------------------

def test_puller_runs_hf_download_into_the_model_store():
    job = compiled(model(source={"repo": REPO, "revision": "v2"})).puller_job
    puller = container(job, "puller")
    assert puller["command"] == ["hf"]
    assert puller["args"][:6] == ["download", REPO, "--revision", "v2", "--local-dir", "/model-store"]
    assert {"name": "weights", "mountPath": "/model-store"} in puller["volumeMounts"]
    assert pod_spec(job)["restartPolicy"] == "Never"


def test_puller_downloads_in_an_init_container_then_verifies_in_the_same_image():
    job = compiled(model(source={"repo": REPO, "revision": "a" * 40})).puller_job
    pod = pod_spec(job)
    (puller,), (verify,) = pod["initContainers"], pod["containers"]
    assert puller["name"] == "puller" and verify["name"] == "verify"
    # Nothing else pulled onto the node: the puller's image (python3 ships beside `hf`).
    assert verify["image"] == puller["image"]
    assert verify["command"][:3] == ["python3", "-S", "-c"] and verify["args"][0] == "/model-store"
    # The script, a line per argument (one YAML scalar each: libyaml and PyYAML write the same bytes).
    assert "\n".join(verify["args"][1:]).startswith("CORRUPTED, INCOMPLETE = 44, 43\nimport hashlib")
    # Read-write: a file that differs is removed so the Job's next attempt fetches it again.
    assert verify["volumeMounts"] == [{"name": "weights", "mountPath": "/model-store"},
                                      {"name": "tmp", "mountPath": "/tmp"}]
    assert {v["name"] for v in pod["volumes"]} == {"weights", "tmp"}
    assert verify["securityContext"] == {**puller["securityContext"], "readOnlyRootFilesystem": True}
    assert {k: verify["securityContext"][k] for k in SECURE_CONTAINER} == SECURE_CONTAINER
    # Both last lines reach the gate: an init container's log is not the pod's default one.
    assert puller["terminationMessagePolicy"] == verify["terminationMessagePolicy"] == "FallbackToLogsOnError"
    env = env_of(verify)
    assert env["HF_HOME"]["value"] == env_of(puller)["HF_HOME"]["value"] == "/model-store/.hf-home"
    assert env["HF_ENDPOINT"] == env_of(puller)["HF_ENDPOINT"]
    assert env["LLM_SERVING_COMMIT"]["value"] == "a" * 40
    assert "HF_TOKEN" not in env_of(compiled(model(hfTokenSecret={"name": "t"})).puller_job["spec"]["template"]["spec"]
                                    ["containers"][0])
    assert verify["resources"]["limits"]["memory"] == "1Gi"


def test_puller_verify_checks_the_commit_only_when_the_revision_is_one():
    job = compiled(model(source={"repo": REPO, "revision": "main"})).puller_job
    assert "LLM_SERVING_COMMIT" not in env_of(container(job, "verify"))


def test_puller_hf_endpoint_defaults_to_the_hub():
    env = env_of(container(compiled(model()).puller_job, "puller"))
    assert env["HF_ENDPOINT"]["value"] == "https://huggingface.co"
    assert "HF_TOKEN" not in env


@pytest.mark.parametrize("raw, platform, endpoint", [
    (model(), {"hfEndpoint": "http://hf-mirror.mirrors.svc:8080"}, "http://hf-mirror.mirrors.svc:8080"),
    (model(hfEndpoint="https://mirror.example.com/"), {"hfEndpoint": "http://hf-mirror.mirrors.svc:8080"},
     "https://mirror.example.com"),
])
def test_puller_hf_endpoint_follows_config(raw, platform, endpoint):
    env = env_of(container(compiled(raw, **platform).puller_job, "puller"))
    assert env["HF_ENDPOINT"]["value"] == endpoint


def test_puller_hf_token_comes_from_the_secret():
    env = env_of(container(compiled(model(hfTokenSecret={"name": "hf-token", "key": "hf"})).puller_job, "puller"))
    assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "hf"}}}


def test_server_never_sees_the_hf_token():
    deployment = compiled(model(hfTokenSecret={"name": "hf-token"})).deployment
    assert "HF_TOKEN" not in env_of(container(deployment, "server"))


# --- rollout and identity of objects ----------------------------------------------------------

def test_read_write_once_never_surges():
    strategy = compiled(model()).deployment["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxSurge"] == 0


def test_read_write_many_can_surge():
    raw = model(replicas=2, weights={"accessMode": "ReadWriteMany"})
    assert compiled(raw).deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


NON_SOURCE_CHANGES = [
    {"image": "docker.io/vllm/vllm-openai:v0.32.0"},  # another release line
    {"args": ["--max-model-len", "4096"]},
    {"resources": {"cpu": "8", "memory": "64Gi"}},
    {"replicas": 3},
    {"gpus": 2, "tensorParallelSize": 2},
    {"env": {"VLLM_LOGGING_LEVEL": "DEBUG"}},
    {"healthPath": "/ping"},
]
NON_SOURCE_IDS = ["image", "args", "resources", "replicas", "gpus", "env", "health-path"]


def chat(**change) -> dict:
    """The model every before/after comparison starts from (ReadWriteMany, so replicas may change)."""
    return model("chat", **{"weights": {"accessMode": "ReadWriteMany"}, **change})


def test_selector_is_a_small_subset_of_the_pod_labels():
    deployment = compiled(model()).deployment
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert 1 <= len(selector) <= 3
    assert common.ENGINE_LABEL not in selector and common.SOURCE_HASH_LABEL not in selector


@pytest.mark.parametrize("change", NON_SOURCE_CHANGES, ids=NON_SOURCE_IDS)
def test_selector_does_not_change_with_image_args_or_replicas(change):
    before = compiled(chat())
    after = compiled(chat(**change))
    assert after.deployment["spec"]["selector"] == before.deployment["spec"]["selector"]
    assert after.service["spec"]["selector"] == before.service["spec"]["selector"]


def test_selector_does_not_change_with_source():
    before = compiled(chat())
    after = compiled(chat(source={"repo": "o/other", "revision": "v9"}))
    assert after.deployment["spec"]["selector"] == before.deployment["spec"]["selector"]


def test_service_selects_the_server_pods():
    objects = compiled(model())
    assert objects.service["spec"]["selector"] == objects.deployment["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("source", [
    {"repo": "o/other"},
    {"repo": REPO, "revision": "v1.0"},
    {"repo": REPO, "revision": "0123456789abcdef0123456789abcdef01234567"},
], ids=["repo", "revision-tag", "revision-commit"])
def test_weights_and_puller_names_change_with_the_source(source):
    before = compiled(chat())
    after = compiled(chat(source=source))
    assert after.weights_pvc["metadata"]["name"] != before.weights_pvc["metadata"]["name"]
    assert after.puller_job["metadata"]["name"] != before.puller_job["metadata"]["name"]
    claim = pod_spec(after.deployment)["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert claim == after.weights_pvc["metadata"]["name"]
    assert after.deployment["metadata"]["name"] == before.deployment["metadata"]["name"]


@pytest.mark.parametrize("change", NON_SOURCE_CHANGES, ids=NON_SOURCE_IDS)
def test_weights_and_puller_are_untouched_by_non_source_changes(change):
    before = compiled(chat())
    after = compiled(chat(**change))
    assert after.weights_pvc == before.weights_pvc
    assert after.puller_job == before.puller_job


@pytest.mark.parametrize("change", NON_SOURCE_CHANGES, ids=NON_SOURCE_IDS)
def test_deployment_is_patched_in_place(change):
    before = compiled(chat())
    after = compiled(chat(**change))
    assert after.deployment["metadata"]["name"] == before.deployment["metadata"]["name"]
    assert after.service["metadata"]["name"] == before.service["metadata"]["name"]
    assert after.deployment != before.deployment


def test_derived_names_fit_63_characters():
    objects = compiled(model("a" * values.MODEL_NAME_MAX))
    for name in (objects.names.server, objects.names.weights, objects.puller_job["metadata"]["name"], objects.names.gate):
        assert len(name) <= 63


def test_all_images_are_fully_qualified_and_pinned(rich_manifests):
    images = [c["image"] for m in pod_manifests(rich_manifests) for c in containers(m)]
    assert len(images) == 7  # 2 servers, 2 pullers and their verify steps, 1 LoRA init
    for image in images:
        assert values.check_image(image) == image
        registry = image.split("/")[0]
        assert "." in registry or ":" in registry
        assert not image.endswith(":latest")


def test_weights_pvc_has_no_owner_references(rich_manifests):
    for manifest in rich_manifests:
        if manifest["kind"] == "PersistentVolumeClaim":
            assert "ownerReferences" not in manifest["metadata"]
            assert "ownerReferences" not in manifest["metadata"].get("annotations", {})


def test_weights_pvc_follows_storage_config():
    pvc = compiled(model(weights={"size": "80Gi", "accessMode": "ReadWriteMany"}), storageClassName="fast").weights_pvc
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "80Gi"
    assert pvc["spec"]["storageClassName"] == "fast"


def test_server_mounts_weights_read_only():
    deployment = compiled(model()).deployment
    mount = {m["name"]: m for m in container(deployment, "server")["volumeMounts"]}["weights"]
    assert mount["mountPath"] == "/model-store" and mount["readOnly"] is True


def test_every_object_lands_in_the_stack_namespace(rich_manifests):
    for manifest in rich_manifests:
        if manifest["kind"] != "Namespace":
            assert manifest["metadata"]["namespace"] == "inference"



def test_the_puller_job_is_deleted_in_the_background_and_not_awaited():
    # The gate does the waiting (skipAwait); a foreground delete would keep the old Job standing,
    # marked for deletion, until the garbage collector has taken its pods.
    job = compiled(model()).puller_job
    assert job["metadata"]["annotations"]["pulumi.com/deletionPropagationPolicy"] == "background"
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


def test_a_new_puller_template_is_a_new_job_name():
    # Its replacement never meets the old Job still being deleted (common.puller_name).
    before = compiled(model()).puller_job
    after = compiled(model(), puller_image="registry.example.com/other/puller:1.0").puller_job
    assert after["spec"]["template"] != before["spec"]["template"]
    assert after["metadata"]["name"] != before["metadata"]["name"]
    assert after["metadata"]["name"].startswith(f"{before['metadata']['labels']['app.kubernetes.io/name']}-pull-")


def test_the_pull_deadline_changes_the_job_in_place():
    # activeDeadlineSeconds is mutable: no new Job, no new pull.
    before = compiled(model()).puller_job
    after = compiled(model(), pull_timeout_seconds=before["spec"]["activeDeadlineSeconds"] + 60).puller_job
    assert after["spec"]["activeDeadlineSeconds"] != before["spec"]["activeDeadlineSeconds"]
    assert after["metadata"]["name"] == before["metadata"]["name"]
    assert after["spec"]["template"] == before["spec"]["template"]
