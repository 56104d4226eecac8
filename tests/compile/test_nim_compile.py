"""NimModel compilers: the operator path's NIMCache / NIMService and the raw path's core objects.

The custom resources are checked field by field, and strictly against the operator's published
API (apps.nvidia.com/v1alpha1, k8s-nim-operator at f63f74d7, see ../shared/nim-crd-notes.md): the
allowed-key sets below are written from those notes, so an invented or removed field fails here.
core/v1 pieces inside them (env, resources, tolerations, probes) are validated with
kubernetes-validate, strictly.
"""

from __future__ import annotations

import re

import jsonschema
import pytest

from components.compile import common, compile_stack, nim
from tests.support.builders import NIM_IMAGE, container, env_of, model, nim_model, pod_manifests, pod_spec, stack
from tests.support.kube_schema import assert_valid_kubernetes
from tests.support.real_crds import NIM_CRDS_ABSENT, NIM_OPERATOR_RELEASES, nim_operator_crds, structural_schema

NGC_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
PULLER_HF = "nvcr.io/nim/nvidia/llm-nim:1.12.0"


def operator_model(name: str = "llama", **fields) -> dict:
    nim_section = {"authSecret": "ngc-api", **fields.pop("nim", {})}
    return model(name, engine="nim", path="operator", image=fields.pop("image", NGC_IMAGE), nim=nim_section, **fields)


def hf_model(name: str = "llama-hf", **fields) -> dict:
    return operator_model(name, nim={"cacheSource": "hf", "authSecret": "hf-token", "pullSecret": "ngc-registry",
                                     "modelPuller": PULLER_HF}, **fields)


def operator_objects(raw: dict, **platform):
    config = stack(raw, **platform)
    return nim.compile_nim_operator(config.models[0], config)


# --- allowed keys, from the notes (a dict: its keys are all that may appear; None: a leaf) -------

CORE = "core"  # a core/v1 value, validated by kubernetes-validate instead
LEAF = None

NGC_MODEL = dict.fromkeys(
    ["profiles", "engine", "precision", "tensorParallelism", "qosProfile", "gpus", "lora", "buildable"], LEAF)
NGC_SOURCE = {"authSecret": LEAF, "modelPuller": LEAF, "pullSecret": LEAF, "modelEndpoint": LEAF, "model": NGC_MODEL}
HF_SOURCE = dict.fromkeys(
    ["endpoint", "namespace", "modelName", "datasetName", "authSecret", "modelPuller", "pullSecret", "revision"], LEAF)
PVC = dict.fromkeys(["create", "name", "storageClass", "size", "volumeAccessMode", "subPath", "annotations"], LEAF)
NIMCACHE_SPEC = {
    "source": {"ngc": NGC_SOURCE, "hf": HF_SOURCE, "dataStore": HF_SOURCE},
    "storage": {"pvc": PVC, "hostPath": LEAF},
    "resources": {"cpu": LEAF, "memory": LEAF},
    "tolerations": CORE, "nodeSelector": CORE, "userID": LEAF, "groupID": LEAF,
    "runtimeClassName": LEAF, "proxy": LEAF, "certConfig": LEAF, "env": CORE, "initContainers": LEAF,
}
PROBE = {"enabled": LEAF, "probe": CORE}
NIMSERVICE_SPEC = {
    "image": dict.fromkeys(["repository", "tag", "pullPolicy", "pullSecrets"], LEAF),
    "command": LEAF, "args": LEAF, "env": CORE, "authSecret": LEAF,
    "storage": {
        "nimCache": {"name": LEAF, "profile": LEAF}, "pvc": PVC, "emptyDir": {"sizeLimit": LEAF},
        "hostPath": LEAF, "sharedMemorySizeLimit": LEAF, "readOnly": LEAF,
    },
    "labels": LEAF, "annotations": LEAF, "nodeSelector": CORE, "tolerations": CORE, "affinity": CORE,
    "resources": CORE, "draResources": LEAF,
    "expose": {
        "service": dict.fromkeys(["type", "name", "port", "grpcPort", "metricsPort", "annotations", "labels"], LEAF),
        "router": LEAF, "ingress": LEAF,
    },
    "livenessProbe": PROBE, "readinessProbe": PROBE, "startupProbe": PROBE,
    "scale": LEAF, "metrics": LEAF, "replicas": LEAF, "userID": LEAF, "groupID": LEAF,
    "runtimeClassName": LEAF, "schedulerName": LEAF, "priorityClassName": LEAF, "proxy": LEAF,
    "multiNode": LEAF, "inferencePlatform": LEAF, "initContainers": LEAF, "sidecarContainers": LEAF,
}
# Removed from the API, which old examples still show (the allowed sets above exclude them too).
REMOVED = {"NIMService": ["type", "nimCache", "scale.minReplicas", "expose.service.openaiPort"],
           "NIMCache": ["gpuSelectors", "resources.gpus"]}
METADATA = {"name", "namespace", "labels", "annotations"}


def unknown_keys(value, allowed, path: str = "spec") -> list[str]:
    if allowed is LEAF or allowed == CORE:
        return []
    assert isinstance(value, dict), f"{path} must be an object"
    found = []
    for key, child in value.items():
        if key not in allowed:
            found.append(f"{path}.{key}")
        else:
            found += unknown_keys(child, allowed[key], f"{path}.{key}")
    return found


def has_path(value: dict, dotted: str) -> bool:
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True


def assert_core_valid(spec: dict, container_keys: dict, pod_keys: tuple = ("tolerations", "nodeSelector", "affinity")):
    """core/v1 values of a CR spec, checked strictly as parts of a Pod."""
    ctr = {"name": "c", "image": "docker.io/library/busybox:1.37.0"}
    for key, target in container_keys.items():
        if key in spec:
            ctr[target] = spec[key]["probe"] if key.endswith("Probe") else spec[key]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"containers": [ctr], **{k: spec[k] for k in pod_keys if k in spec}}}
    assert_valid_kubernetes(pod)


CASES = {
    "ngc": operator_model(),
    "ngc-profiles": operator_model(nim={"profiles": ["all"]}),
    "ngc-tp2-rwx": operator_model(gpus=2, tensorParallelSize=2, replicas=2, weights={"accessMode": "ReadWriteMany"},
                                  args=["--log-level", "debug"], env={"NIM_LOG_LEVEL": "DEBUG"},
                                  sharedMemorySizeLimit="2Gi", nodeSelector={"gpu": "h100"},
                                  tolerations=[{"key": "dedicated", "operator": "Equal", "value": "nim", "effect": "NoSchedule"}]),
    "hf": hf_model(),
    "digest": operator_model(image=f"{NGC_IMAGE}@sha256:{'a' * 64}"),
}


@pytest.mark.parametrize("raw", CASES.values(), ids=CASES.keys())
def test_custom_resources_use_only_the_operators_fields(raw):
    objects = operator_objects(raw, imagePullSecrets=["registry"])
    for manifest, allowed in ((objects.cache, NIMCACHE_SPEC), (objects.service, NIMSERVICE_SPEC)):
        assert manifest["apiVersion"] == "apps.nvidia.com/v1alpha1"
        assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}
        assert set(manifest["metadata"]) <= METADATA
        assert unknown_keys(manifest["spec"], allowed) == [], manifest["kind"]
        assert not [p for p in REMOVED[manifest["kind"]] if has_path(manifest["spec"], p)], manifest["kind"]
    assert_core_valid(objects.cache["spec"], {"env": "env"})
    assert_core_valid(objects.service["spec"], {
        "env": "env", "resources": "resources", "startupProbe": "startupProbe",
        "readinessProbe": "readinessProbe", "livenessProbe": "livenessProbe",
    })


@pytest.mark.parametrize("release", NIM_OPERATOR_RELEASES)
@pytest.mark.parametrize("raw", CASES.values(), ids=CASES.keys())
def test_custom_resources_validate_against_the_operators_own_crds(raw, release):
    """The operator's generated CRDs (vendored in ../shared; its module is not served), at the
    newest tag and at main: undeclared fields, types, enums, bounds and required keys."""
    files = nim_operator_crds(release)
    if files is None:
        pytest.skip(NIM_CRDS_ABSENT)
    objects = operator_objects(raw, imagePullSecrets=["registry"])
    for manifest, crd in zip((objects.cache, objects.service), files, strict=True):
        jsonschema.validate(manifest, structural_schema(crd, nim.VERSION))
    broken = {**objects.service, "spec": {**objects.service["spec"], "replica": 2}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, structural_schema(files[1], nim.VERSION))


@pytest.mark.parametrize("raw", CASES.values(), ids=CASES.keys())
def test_required_fields_and_wire_types(raw):
    objects = operator_objects(raw)
    cache, service = objects.cache["spec"], objects.service["spec"]
    # NIMCache: source and storage required; exactly one source.
    assert {"source", "storage"} <= set(cache)
    (kind,) = cache["source"]
    source = cache["source"][kind]
    assert source["authSecret"] and source["modelPuller"]
    if kind == "hf":
        assert re.match(r"^https?://.*$", source["endpoint"])
        assert source["namespace"] and source["pullSecret"]
        assert ("modelName" in source) != ("datasetName" in source)
    else:
        model_selector = source.get("model", {})
        assert not ("model" in source and "modelEndpoint" in source)
        if "profiles" in model_selector:
            assert set(model_selector) == {"profiles"}, "profiles exclude every other selector"
        if "tensorParallelism" in model_selector:
            assert isinstance(model_selector["tensorParallelism"], str)
    pvc = cache["storage"]["pvc"]
    assert pvc["create"] is True and pvc["volumeAccessMode"] in ("ReadWriteOnce", "ReadWriteMany")
    for quantity in (pvc["size"], cache["resources"]["cpu"], cache["resources"]["memory"],
                     service["storage"]["sharedMemorySizeLimit"]):
        assert isinstance(quantity, str)
    # NIMService: image repository and tag, authSecret (required in v3.1.2), exactly one storage kind.
    assert service["image"]["repository"] and service["image"]["tag"]
    assert service["authSecret"]
    assert [k for k in ("nimCache", "pvc", "emptyDir", "hostPath") if k in service["storage"]] == ["nimCache"]
    assert isinstance(service["expose"]["service"]["port"], int)
    for key in ("userID", "groupID", "replicas"):
        assert type(service[key]) is int and type(cache.get(key, 0)) is int
    assert "scale" not in service, "replicas must be absent when scale.enabled; we set replicas"


def test_nim_cache_fields():
    objects = operator_objects(operator_model(weights={"size": "80Gi", "storageClassName": "nfs"},
                                              nim={"pullSecret": "ngc-registry",
                                                   "cacheResources": {"cpu": "2", "memory": "8Gi"}}),
                               gpuNodeSelector={"nvidia.com/gpu.present": "true"})
    cache = objects.cache
    assert cache["kind"] == "NIMCache"
    assert cache["metadata"]["name"] == objects.names.cache
    assert cache["metadata"]["namespace"] == "llm-serving"
    assert cache["metadata"]["annotations"] == {common.MODEL_SOURCE_ANNOTATION: f"ngc:{NGC_IMAGE}"}
    assert cache["metadata"]["labels"]["app.kubernetes.io/component"] == "nim-cache"
    assert cache["spec"] == {
        "source": {"ngc": {
            "modelPuller": NGC_IMAGE, "authSecret": "ngc-api", "pullSecret": "ngc-registry",
            "model": {"tensorParallelism": "1"},
        }},
        "storage": {"pvc": {"create": True, "size": "80Gi", "storageClass": "nfs", "volumeAccessMode": "ReadWriteOnce"}},
        "resources": {"cpu": "2", "memory": "8Gi"},
        "userID": 1000, "groupID": 2000,
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }


def test_nim_cache_defaults_and_profiles():
    spec = operator_objects(operator_model(nim={"profiles": ["abc123"]})).cache["spec"]
    assert spec["source"]["ngc"]["model"] == {"profiles": ["abc123"]}
    assert "pullSecret" not in spec["source"]["ngc"], "optional for ngc: emitted only when set"
    assert spec["resources"] == {"cpu": "1", "memory": "4Gi"}
    assert "storageClass" not in spec["storage"]["pvc"], "unset: the cluster default"
    assert "nodeSelector" not in spec, "unset: the operator's NVIDIA-PCI default"


def test_nim_cache_hf_source():
    objects = operator_objects(hf_model(source={"repo": "meta-llama/Llama-3.2-1B-Instruct", "revision": "v1.0"},
                                        hfEndpoint="http://hf-mirror.mirrors.svc:8080"))
    assert objects.cache["spec"]["source"] == {"hf": {
        "endpoint": "http://hf-mirror.mirrors.svc:8080", "namespace": "meta-llama",
        "modelName": "Llama-3.2-1B-Instruct", "revision": "v1.0", "authSecret": "hf-token",
        "modelPuller": PULLER_HF, "pullSecret": "ngc-registry",
    }}
    assert objects.cache["metadata"]["annotations"][common.MODEL_SOURCE_ANNOTATION] == \
        "meta-llama/Llama-3.2-1B-Instruct@v1.0"


def test_nim_service_fields():
    objects = operator_objects(operator_model(
        gpus=2, tensorParallelSize=2, replicas=2, weights={"accessMode": "ReadWriteMany"},
        resources={"cpu": "8", "memory": "48Gi"}, sharedMemorySizeLimit="8Gi", args=["--foo"],
        env={"NIM_LOG_LEVEL": "DEBUG"}, nim={"pullSecret": "ngc-registry"},
    ), imagePullSecrets=["registry", "ngc-registry"], startupTimeoutSeconds=1200)
    service = objects.service
    assert service["kind"] == "NIMService"
    assert service["metadata"]["name"] == "llama" == objects.names.service
    assert service["metadata"]["annotations"] == {
        common.MODEL_SOURCE_ANNOTATION: f"ngc:{NGC_IMAGE}", common.HEALTH_PATH_ANNOTATION: "/v1/health/ready"}
    spec = service["spec"]
    assert spec["image"] == {"repository": "nvcr.io/nim/meta/llama-3.1-8b-instruct", "tag": "1.8.4",
                             "pullPolicy": "IfNotPresent", "pullSecrets": ["registry", "ngc-registry"]}
    assert spec["authSecret"] == "ngc-api"
    assert spec["storage"] == {"nimCache": {"name": objects.names.cache}, "sharedMemorySizeLimit": "8Gi"}
    assert spec["replicas"] == 2
    assert spec["resources"] == {
        "requests": {"cpu": "8", "memory": "48Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "48Gi", "nvidia.com/gpu": "2"},
    }
    assert spec["expose"] == {"service": {"type": "ClusterIP", "port": 8000}}
    assert spec["env"] == [{"name": "NIM_SERVED_MODEL_NAME", "value": "llama"},
                           {"name": "NIM_LOG_LEVEL", "value": "DEBUG"}]
    assert spec["args"] == ["--foo"]
    assert (spec["userID"], spec["groupID"]) == (1000, 2000)
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "nodeSelector" not in spec
    assert spec["labels"] == {"app.kubernetes.io/component": "server", common.MODEL_LABEL: "llama",
                              common.ENGINE_LABEL: "nim"}
    for key in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert spec[key]["enabled"] is True
        assert spec[key]["probe"]["httpGet"] == {"path": "/v1/health/ready", "port": "api"}
    assert spec["startupProbe"]["probe"]["failureThreshold"] * spec["startupProbe"]["probe"]["periodSeconds"] >= 1200


def test_nim_service_without_pull_secrets_or_args():
    spec = operator_objects(operator_model()).service["spec"]
    assert "pullSecrets" not in spec["image"] and "args" not in spec


def test_custom_health_path_reaches_the_operator_probes():
    spec = operator_objects(operator_model(healthPath="v1/health/live")).service["spec"]
    assert {spec[k]["probe"]["httpGet"]["path"] for k in ("startupProbe", "readinessProbe", "livenessProbe")} == {"/v1/health/live"}


@pytest.mark.parametrize("ref, expected", [
    ("nvcr.io/nim/meta/llama:1.8.4", ("nvcr.io/nim/meta/llama", "1.8.4")),
    ("registry.local:5000/nim/llama:2", ("registry.local:5000/nim/llama", "2")),
    (f"nvcr.io/nim/llama:1.0@sha256:{'b' * 64}", ("nvcr.io/nim/llama", f"1.0@sha256:{'b' * 64}")),
])
def test_split_image(ref, expected):
    assert nim.split_image(ref) == expected
    assert ":".join(nim.split_image(ref)) == ref, "the operator runs repository:tag"


def test_split_image_needs_a_tag():
    with pytest.raises(ValueError, match="no tag"):
        nim.split_image(f"nvcr.io/nim/llama@sha256:{'b' * 64}")


def test_cache_name_follows_its_immutable_spec():
    base = operator_objects(operator_model()).names.cache
    assert base == operator_objects(operator_model(replicas=0, args=["--x"])).names.cache, \
        "service-only changes keep the cache"
    for changed in (operator_model(image="nvcr.io/nim/meta/llama-3.1-8b-instruct:1.9.0"),
                    operator_model(weights={"size": "90Gi"}), operator_model(nim={"profiles": ["p"]})):
        assert operator_objects(changed).names.cache != base
    assert re.fullmatch(r"llama-cache-[0-9a-f]{6}", base)


def test_derived_names_fit_labels():
    name = "a" * 45
    names = operator_objects(operator_model(name)).names
    assert len(names.cache + "-pvc") <= 63 and len(names.cache + "-job") <= 63


def test_operator_identity_override():
    spec = operator_objects(operator_model(securityContext={"runAsUser": 1001, "allowNonDefaultIdentity": True}))
    assert (spec.cache["spec"]["userID"], spec.cache["spec"]["groupID"]) == (1001, 2000)
    assert (spec.service["spec"]["userID"], spec.service["spec"]["groupID"]) == (1001, 2000)


def test_platform_nim_identity_reaches_the_custom_resources():
    objects = operator_objects(operator_model(), nimUid=1500, nimGid=1600)
    assert (objects.service["spec"]["userID"], objects.cache["spec"]["groupID"]) == (1500, 1600)


def test_endpoint_is_the_operators_service():
    config = stack(operator_model())
    assert nim.endpoint_url(config.models[0], config.platform) == "http://llama.llm-serving.svc.cluster.local:8000"


def test_compile_nim_operator_refuses_raw_models():
    config = stack(nim_model())
    with pytest.raises(ValueError, match="not a NIM model on the operator path"):
        nim.compile_nim_operator(config.models[0], config)


# --- the stack: both paths side by side --------------------------------------------------------

def test_compile_stack_emits_custom_resources_for_operator_models_only():
    manifests = compile_stack(stack(model("v"), nim_model("raw"), operator_model("op")))
    by_model = {}
    for manifest in manifests:
        owner = manifest["metadata"].get("labels", {}).get(common.MODEL_LABEL)
        if owner:
            by_model.setdefault(owner, []).append(manifest["kind"])
    assert by_model == {
        "v": ["PersistentVolumeClaim", "Job", "Deployment", "Service"],
        "raw": ["PersistentVolumeClaim", "Job", "Deployment", "Service"],
        "op": ["NIMCache", "NIMService"],  # cache first: the service waits for it
    }


def test_vllm_only_stack_has_no_custom_resources():
    kinds = {m["apiVersion"] for m in compile_stack(stack(model("a"), nim_model("b")))}
    assert not any(v.startswith(nim.GROUP) for v in kinds)


# --- raw path --------------------------------------------------------------------------------

def raw_objects(raw: dict, **platform):
    return [m for m in compile_stack(stack(raw, **platform)) if m["kind"] not in ("Namespace", "ServiceAccount")]


def test_raw_path_core_objects_are_strictly_valid():
    objects = raw_objects(nim_model(path="raw", nim={"authSecret": "ngc-api"}, args=["--x"], replicas=2,
                                    weights={"accessMode": "ReadWriteMany"}), imagePullSecrets=["ngc-registry"])
    assert [m["kind"] for m in objects] == ["PersistentVolumeClaim", "Job", "Deployment", "Service",
                                            "PodDisruptionBudget"]  # two replicas
    for manifest in objects:
        assert_valid_kubernetes(manifest)


def test_raw_path_nim_image_env_health_and_identity():
    objects = raw_objects(nim_model(nim={"authSecret": "ngc-api"}))
    deployment = next(m for m in objects if m["kind"] == "Deployment")
    server = container(deployment, "server")
    assert server["image"] == NIM_IMAGE
    env = env_of(server)
    assert env["NIM_MODEL_NAME"]["value"] == "/model-store"  # the weights, a local model path
    assert env["NGC_API_KEY"] == {"name": "NGC_API_KEY",
                                  "valueFrom": {"secretKeyRef": {"name": "ngc-api", "key": "NGC_API_KEY"}}}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"]["path"] == "/v1/health/ready"
    for manifest in pod_manifests(objects):
        context = pod_spec(manifest)["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"]) == (1000, 2000), manifest["kind"]


def test_raw_path_nim_cache_is_writable_and_not_the_read_only_weights():
    """NIM writes into NIM_CACHE_PATH: it must be a writable mount of its own, never the
    read-only weights volume (and never a copy of the weights)."""
    deployment = next(m for m in raw_objects(nim_model()) if m["kind"] == "Deployment")
    server = container(deployment, "server")
    cache_path = env_of(server)["NIM_CACHE_PATH"]["value"]
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    assert cache_path in mounts, "NIM_CACHE_PATH is not a mount: the root filesystem would take it"
    mount = mounts[cache_path]
    assert not mount.get("readOnly")
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    assert "emptyDir" in volumes[mount["name"]] and volumes[mount["name"]]["emptyDir"]["sizeLimit"]
    weights_mount = next(m for m in server["volumeMounts"] if m["name"] == "weights")
    assert weights_mount["readOnly"] is True
    assert not cache_path.startswith(weights_mount["mountPath"])


def test_raw_path_without_auth_secret_sets_no_ngc_key():
    deployment = next(m for m in raw_objects(nim_model()) if m["kind"] == "Deployment")
    assert "NGC_API_KEY" not in env_of(container(deployment, "server"))


def test_raw_identity_override_reaches_every_pod_and_container():
    objects = raw_objects(nim_model(securityContext={"runAsUser": 1001, "runAsGroup": 1001,
                                                     "allowNonDefaultIdentity": True}))
    for manifest in pod_manifests(objects):
        spec = pod_spec(manifest)
        assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (1001, 1001)
        for item in [*spec.get("initContainers", []), *spec["containers"]]:
            assert (item["securityContext"]["runAsUser"], item["securityContext"]["runAsGroup"]) == (1001, 1001)


def test_identity_override_is_per_model():
    manifests = compile_stack(stack(
        nim_model("a", securityContext={"runAsUser": 1001, "allowNonDefaultIdentity": True}), nim_model("b"), model("v")))
    uids = {m["metadata"]["labels"][common.MODEL_LABEL]: pod_spec(m)["securityContext"]["runAsUser"]
            for m in manifests if m["kind"] == "Deployment"}
    assert uids == {"a": 1001, "b": 1000, "v": 2000}


def test_structural_check_catches_invented_and_removed_fields():
    """Guards the guard: the allowed-key walk must flag fields the operator does not have."""
    objects = operator_objects(operator_model())
    service = {**objects.service["spec"], "nimCache": {"name": "x"},
               "expose": {"service": {"port": 8000, "openaiPort": 9000}}}
    cache = {**objects.cache["spec"], "resources": {"cpu": "1", "gpus": 1}, "gpuSelectors": {}}
    assert sorted(unknown_keys(service, NIMSERVICE_SPEC)) == ["spec.expose.service.openaiPort", "spec.nimCache"]
    assert sorted(unknown_keys(cache, NIMCACHE_SPEC)) == ["spec.gpuSelectors", "spec.resources.gpus"]
