"""NimModel, operator path: ``NIMCache`` and ``NIMService`` for the k8s-nim-operator.

Pure, like every compiler: typed config in, custom resources (plain dicts, wire shape) out.
Field names are the operator's published ``apps.nvidia.com/v1alpha1`` API
(see ``tests/compile/test_nim_compile.py`` for the allowed-key sets these are checked against).

Serving waits for the weights twice over: the NIMService names the cache
(``storage.nimCache.name``), so the operator keeps it NotReady until the cache is Ready, and the
component declares the NIMService after the NIMCache.

The NIMCache spec is immutable (the operator's webhook rejects any change, and
``source.ngc.modelPuller`` is immutable even without it). Its name therefore carries a digest of
its spec: any cache change is a new NIMCache (a fresh download), the NIMService is patched to
point at it, and the old one is deleted afterwards, never patched in place.

A multi-node model (``multiNode``) sets the NIMService's ``spec.multiNode``; the operator then
renders a LeaderWorkerSet ``<name>-lws`` in place of the Deployment (k8s-nim-operator v3.1.2,
``GetLWSName``, ``manifests/lws.yaml``). ``spec.multiNode`` is immutable (the operator's webhook),
so a change of it is refused at preview (``components/compile/plan.py``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Optional

from contract import labels

from ..config.model import ModelConfig
from ..config.multinode import NIM_JSONL_LOGGING, RAY_PORT
from ..config.platform import PlatformConfig
from ..config.stack import StackConfig
from . import common, disruption, engines, metrics, network, server, weights

# The operator's API names live in ``contract.labels`` (the status provider reads them too).
GROUP, VERSION, CRD_NAMES = labels.NIM_GROUP, labels.NIM_VERSION, labels.NIM_CRD_NAMES
API_VERSION = f"{GROUP}/{VERSION}"

CACHE_COMPONENT = "nim-cache"
SERVICE_COMPONENT = labels.SERVER_COMPONENT
# The operator names the container port `api`; its Service port and ours are the same number.
API_PORT_NAME = "api"
DEFAULT_CACHE_CPU, DEFAULT_CACHE_MEMORY = "1", "4Gi"
# multiNode, mpi launcher: the seconds the leader waits for the group's MPI cluster. The CRD's
# default (and the operator's DefaultMPITimeout), written out so the stored object equals ours.
MPI_START_TIMEOUT = 300

_IMAGE = re.compile(r"^(?P<repository>.+?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


@dataclass(frozen=True)
class NimNames:
    service: str
    cache: str


@dataclass(frozen=True)
class NimManifests:
    """The operator-path objects of one model, in declaration order (cache, then service)."""

    model: ModelConfig
    names: NimNames
    cache: dict
    service: dict
    network_policy: Optional[dict] = None  # platform.networkPolicy; before the pods it guards
    pod_disruption_budget: Optional[dict] = None  # models that may run several server pods


def split_image(ref: str) -> tuple[str, str]:
    """``registry/repo:tag[@digest]`` -> (repository, tag). The operator runs ``repository:tag``,
    so a digest rides on the tag (``tag@sha256:...`` keeps the reference valid and pinned)."""
    # The tag separator is the last ':' after the last '/' (a registry may carry a port).
    head, _, last = ref.rpartition("/")
    match = _IMAGE.match(last)
    if not match or not match.group("tag"):
        raise ValueError(f"image '{ref}' has no tag; the NIM operator needs repository:tag")
    repository = f"{head}/{match.group('repository')}" if head else match.group("repository")
    tag = match.group("tag") + (f"@{match.group('digest')}" if match.group("digest") else "")
    return repository, tag


def cache_source(model: ModelConfig, platform: PlatformConfig) -> dict:
    nim = model.nim_settings
    puller = nim.model_puller or engines.server_image(model, platform)
    if (nim.cache_source or "ngc") == "hf":
        namespace, _, name = model.source.repo.partition("/")
        return {"hf": {
            "endpoint": weights.hf_endpoint(model, platform),
            "namespace": namespace,
            "modelName": name,
            "revision": model.source.revision,
            "authSecret": nim.auth_secret,
            "modelPuller": puller,
            "pullSecret": nim.pull_secret,
        }}
    ngc: dict = {"modelPuller": puller, "authSecret": nim.auth_secret}
    if nim.pull_secret:
        ngc["pullSecret"] = nim.pull_secret
    if nim.profiles:
        # An explicit profile list excludes every other selector (operator webhook).
        ngc["model"] = {"profiles": list(nim.profiles)}
    else:
        # Cache the profiles the server can run: same tensor-parallel degree. A string (CRD type).
        ngc["model"] = {"tensorParallelism": str(model.tensor_parallel_size)}
    return {"ngc": ngc}


def cache_source_ref(model: ModelConfig, platform: PlatformConfig) -> str:
    """What the cache holds, for the model-source annotation (an ngc cache is the image's)."""
    source = cache_source(model, platform)
    if "hf" in source:
        return model.source.ref
    return f"ngc:{source['ngc']['modelPuller']}"


def _digest(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:6]


def cache_spec(model: ModelConfig, stack: StackConfig) -> dict:
    platform = stack.platform
    nim = model.nim_settings
    ident = engines.model_identity(model, platform)
    pvc: dict = {
        "create": True,
        "size": model.weights.size,
        # No operator default: it copies this into the PVC unchanged, so always set it.
        "volumeAccessMode": model.weights.access_mode,
    }
    storage_class = model.weights.storage_class_name or platform.storage_class_name
    if storage_class:
        pvc["storageClass"] = storage_class
    resources = nim.cache_resources
    spec: dict = {
        "source": cache_source(model, platform),
        "storage": {"pvc": pvc},
        # Used as requests and limits of the caching container.
        "resources": {
            "cpu": resources.cpu if resources else DEFAULT_CACHE_CPU,
            "memory": resources.memory if resources else DEFAULT_CACHE_MEMORY,
        },
        "userID": ident.uid,
        "groupID": ident.gid,
        # Same GPU node pool as the server (unset, the operator picks NFD's NVIDIA-PCI label).
        **common.scheduling(model, platform),
    }
    return spec


def names(model: ModelConfig, stack: StackConfig) -> NimNames:
    # <= 45 + 7 + 6 = 58 characters, so the operator's "<name>-pvc" / "<name>-job" fit a label.
    return NimNames(service=model.name, cache=f"{model.name}-cache-{_digest(cache_spec(model, stack))}")


def compile_nim_cache(model: ModelConfig, stack: StackConfig) -> dict:
    platform = stack.platform
    meta = common.metadata(
        names(model, stack).cache, platform.namespace, model, CACHE_COMPONENT,
        **{common.MODEL_SOURCE_ANNOTATION: cache_source_ref(model, platform)},
    )
    return {"apiVersion": API_VERSION, "kind": "NIMCache", "metadata": meta, "spec": cache_spec(model, stack)}


def service_probes(model: ModelConfig, platform: PlatformConfig) -> dict:
    """The raw path's probes (health path, startup budget) on the operator's `api` port.

    Each is ``{enabled, probe}``: an unset probe would be the operator's default, whose startup
    budget is fixed; ours follows platform.startupTimeoutSeconds like the raw path's.
    """
    result = {}
    for key, probe in server.probes(model, platform).items():
        probe = copy.deepcopy(probe)
        probe["httpGet"]["port"] = API_PORT_NAME
        result[key] = {"enabled": True, "probe": probe}
    return result


def service_env(model: ModelConfig) -> list[dict]:
    # The operator sets NIM_CACHE_PATH, ports and logging; a user entry replaces a default.
    env = [{"name": "NIM_SERVED_MODEL_NAME", "value": model.name}]
    if model.multi_node is not None and model.multi_node.ray:
        # NIM for LLMs (2.x docs, multi-node known limitations): no JSON log formatter on Ray
        # workers; the operator's default is 1 (GetStandardEnv), and NIMService env wins over it.
        env.append({"name": NIM_JSONL_LOGGING, "value": "0"})
    return env + [{"name": k, "value": v} for k, v in sorted(model.env.items())]


def lws_name(model: ModelConfig) -> str:
    """The operator's LeaderWorkerSet of a multi-node NIMService, named after it (GetLWSName); also
    the `app` label of its leader pods, and the name the LWS controller labels every group pod with."""
    return f"{model.name}{labels.NIM_LWS_SUFFIX}"


def multinode_spec(model: ModelConfig) -> dict:
    """NIMService ``spec.multiNode`` as the operator's CRD declares it (k8s-nim-operator v3.1.2).

    What the operator does with it (``internal/controller/platform/standalone/nimservice.go`` and
    ``api/apps/v1alpha1/nimservice_types.go`` at v3.1.2):
    - the LeaderWorkerSet's ``size`` is ``parallelism.pipeline`` (``GetLWSSize``), so pipeline =
      ``nodes``; its ``replicas`` is the NIMService's, one group per replica;
    - ``parallelism.tensor`` becomes ``GPUS_PER_NODE`` and ``NIM_TENSOR_PARALLEL_SIZE``; leader and
      worker containers both get ``spec.resources``, so tensor = ``gpus`` (config refuses others);
    - it is multi-node only when pipeline > 1 (``IsMultiNode``), which ``nodes >= 2`` guarantees;
    - ``ray`` runs ``nim-serve-ray --head --port <rayPort>`` on the leader and
      ``nim-serve-ray --head-address $(LWS_LEADER_ADDRESS):<rayPort>`` on workers (a `ray status`
      startup probe on workers); otherwise MPI: the operator creates the ConfigMaps
      ``<name>-mpi-config``/``<name>-mpi-start-script`` and the Secret ``<name>-ssh-pk``;
    - ``mpi`` and ``ray`` are mutually exclusive (CRD rule): exactly one is written;
    - ``computeDomain`` (an NVIDIA DRA ComputeDomain for multi-node NVLink) is not offered: this
      program configures no DRA driver or claims.
    """
    multi = model.multi_node
    assert multi is not None
    launcher = {"ray": {"rayPort": RAY_PORT}} if multi.ray else {"mpi": {"mpiStartTimeout": MPI_START_TIMEOUT}}
    return {
        "backendType": "lws",  # the CRD's only value (and default), written so the stored object equals ours
        "parallelism": {"tensor": model.tensor_parallel_size, "pipeline": multi.nodes},
        **launcher,
    }


def pull_secrets(model: ModelConfig, platform: PlatformConfig) -> list[str]:
    secrets = list(platform.image_pull_secrets)
    if model.nim_settings.pull_secret:
        secrets.append(model.nim_settings.pull_secret)
    return list(dict.fromkeys(secrets))


def compile_nim_service(model: ModelConfig, stack: StackConfig) -> dict:
    platform = stack.platform
    nim_names = names(model, stack)
    ident = engines.model_identity(model, platform)
    repository, tag = split_image(engines.server_image(model, platform))
    image: dict = {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}
    secrets = pull_secrets(model, platform)
    if secrets:
        image["pullSecrets"] = secrets
    gpus = str(model.gpus)
    spec: dict = {
        "image": image,
        "authSecret": model.nim_settings.auth_secret,
        "storage": {
            "nimCache": {"name": nim_names.cache},
            "sharedMemorySizeLimit": stack.shm_limit(model),
        },
        "replicas": model.replicas,
        "resources": {
            "requests": {"cpu": model.resources.cpu, "memory": model.resources.memory, "nvidia.com/gpu": gpus},
            "limits": {"memory": model.resources.memory, "nvidia.com/gpu": gpus},
        },
        # Always emit the port: its CRD default applies only when expose.service exists, and
        # operator code paths dereference it unchecked.
        "expose": {"service": {"type": "ClusterIP", "port": common.SERVER_PORT}},
        "env": service_env(model),
        "userID": ident.uid,
        "groupID": ident.gid,
        # Merged onto the objects the operator renders, so they are found as this model's.
        "labels": {
            labels.COMPONENT_LABEL: SERVICE_COMPONENT,
            common.MODEL_LABEL: model.name,
            common.ENGINE_LABEL: model.engine,
        },
        **service_probes(model, platform),
        **common.scheduling(model, platform),
    }
    if model.multi_node is None:
        # Several replicas: prefer one pod per node (the spread of the raw path, as affinity). The
        # operator's LeaderWorkerSet template has no affinity (v3.1.2), so multi-node leaves it out.
        spec.update(disruption.preferred_anti_affinity(model, model.disruption_policy(platform.disruption),
                                                       network.server_pods(model)))
    else:
        spec["multiNode"] = multinode_spec(model)
    if model.args:
        spec["args"] = list(model.args)
    scraping = metrics.nim_service_metrics(stack)  # platform.metrics: the operator's ServiceMonitor
    if scraping is not None:
        spec["metrics"] = scraping
    meta = common.metadata(
        nim_names.service, platform.namespace, model, SERVICE_COMPONENT,
        **{common.MODEL_SOURCE_ANNOTATION: cache_source_ref(model, platform),
           common.HEALTH_PATH_ANNOTATION: model.health_path},
    )
    return {"apiVersion": API_VERSION, "kind": "NIMService", "metadata": meta, "spec": spec}


def multinode_digest(service: dict) -> str:
    """A NIMService's ``spec.multiNode`` as canonical JSON ("" without it): what the operator-path
    check records, to refuse a change of it (immutable) at preview."""
    multi = service["spec"].get("multiNode")
    return "" if multi is None else json.dumps(multi, sort_keys=True, separators=(", ", ": "))


def compile_nim_operator(model: ModelConfig, stack: StackConfig) -> NimManifests:
    if not model.on_operator:
        raise ValueError(f"model '{model.name}' is not a NIM model on the operator path")
    return NimManifests(
        model=model,
        names=names(model, stack),
        cache=compile_nim_cache(model, stack),
        service=compile_nim_service(model, stack),
        network_policy=network.compile_model_network_policy(model, stack),
        pod_disruption_budget=compile_pod_disruption_budget(model, stack),
    )


def compile_pod_disruption_budget(model: ModelConfig, stack: StackConfig) -> Optional[dict]:
    """The budget of the operator's server pods: an object of our own beside the NIMService, which
    has no budget field (k8s-nim-operator up to v3.1.2). It selects the labels the NIMService
    merges onto its pods (``spec.labels``), as the model's NetworkPolicy does. The drain wait and
    grace period are not rendered on this path: NIMService has no ``lifecycle`` or
    ``terminationGracePeriodSeconds`` to carry them (the spread goes in as ``affinity``)."""
    # Multi-node: over every pod of every group (a worker evicted takes its group down).
    return disruption.pod_disruption_budget(
        model, common.metadata(names(model, stack).service, stack.platform.namespace, model, SERVICE_COMPONENT),
        network.model_pods(model))


def endpoint_url(model: ModelConfig, platform: PlatformConfig) -> str:
    # The operator names the Service after the NIMService (= the model) on expose.service.port:
    # the same in-cluster URL as the raw path.
    return server.endpoint_url(model, platform)
