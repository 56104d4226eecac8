"""The `models` section: one model server each (weights source, engine, resources, serving).

Stack files use camelCase keys (Pulumi's convention); error paths are reported in the same
spelling so that a message points at the line the user has to change. The model's sections
(``sources.py``, ``autoscaling.py``, ``multinode.py``, ``revisions.py``, ``lora.py``, ...) are types
that check their own keys; every check that reads several of a model's settings is here, at the
end (and the flags and env it owns, ``managed.py``); checks that need another section (the
platform, the router, the other models) belong to the stack (``stack.py``). Where engines differ,
the checks ask the model's engine (``engines/``, one module per engine) instead of its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from . import cpu, kube, managed, stack_secrets, values
from .autoscaling import Autoscaling
from .disruption import DisruptionConfig, DisruptionOverride, DisruptionPolicy, resolve
from .engines import ENGINES, check_name, engine_of
from .kube import INT32_MAX
from .lora import Lora
from .multinode import MultiNode
from .revisions import NEXT_NAME_MAX, NEXT_SUFFIX, NextRevision
from .sources import WeightSource
from .types import (
    Dns1123Label,
    HealthPath,
    HfEndpoint,
    Image,
    NonRootUid,
    PositiveQuantity,
    SecretKeyRef,
    Strict,
    Toleration,
)
from .values import Problem
from .vllm_release import VllmRelease


class WeightsStorage(Strict):
    size: PositiveQuantity = Field("50Gi", description="Size of the weights volume.")
    storage_class_name: Optional[kube.DnsSubdomain] = Field(
        None, description="StorageClass; unset uses `platform.storageClassName`."
    )
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = Field(
        "ReadWriteOnce",
        description="`ReadWriteOnce` attaches to one node at a time: one replica only. "
        "Several replicas need `ReadWriteMany`.",
    )


class Resources(Strict):
    cpu: PositiveQuantity = Field("4", description="CPU request of the server container. A CPU model "
                                  "(`gpus: 0`): a whole number, also its CPU limit and its engine threads.")
    memory: PositiveQuantity = Field(
        "32Gi", description="Memory request and limit of the server container (kept equal, so "
        "the node never overcommits the memory a model needs)."
    )
    kv_cache: Optional[PositiveQuantity] = Field(
        None, description="CPU models (`gpus: 0`) only: the KV cache, whole GiB (`VLLM_CPU_KVCACHE_SPACE`), "
        "at most `memory` − 3Gi. Unset: ⌊(memory − 3Gi) / 2⌋ (docs/02-models-and-weights.md, \"CPU models\").",
    )


class NimCacheResources(Strict):
    cpu: PositiveQuantity = Field("1", description="CPU of the NIMCache Job (the operator uses it as request and limit).")
    memory: PositiveQuantity = Field("4Gi", description="Memory of the NIMCache Job (request and limit).")


class NimSettings(Strict):
    """NIM-only settings (`engine: nim`)."""

    auth_secret: Optional[Dns1123Label] = Field(
        None, description="Secret with key `NGC_API_KEY` (and `HF_TOKEN` when `cacheSource: hf`). "
        "operator path: required; the NIMCache and NIMService `authSecret`. raw path: optional; "
        "the server's `NGC_API_KEY` comes from it. Unset, with `llm-serving:ngcApiKey` set: the "
        "Secret `llm-serving-ngc-api-key` the stack creates from it (except `cacheSource: hf`).",
    )
    cache_source: Optional[Literal["ngc", "hf"]] = Field(
        None, description="operator path: where the NIMCache downloads from. `ngc` (default): the "
        "NIM image's optimized profiles; `hf`: `source.repo` at `source.revision` from `hfEndpoint`.",
    )
    model_puller: Optional[Image] = Field(
        None, description="operator path: image of the NIMCache Job; unset uses the model's `image`. "
        "For `hf`, an image with the HF CLI such as `nvcr.io/nim/nvidia/llm-nim:<tag>`.",
    )
    pull_secret: Optional[Dns1123Label] = Field(
        None, description="operator path: image pull Secret of `modelPuller` (required for "
        "`cacheSource: hf`); also added to the NIMService's pull secrets.",
    )
    profiles: tuple[str, ...] = Field(
        (), description="operator path, `ngc` only: NIM profile ids to cache (`[all]` caches every "
        "profile). Unset: the profiles matching `tensorParallelSize`.",
    )
    cache_resources: Optional[NimCacheResources] = Field(
        None, description="operator path: CPU and memory of the NIMCache Job; unset: 1 CPU, 4Gi.",
    )


class SecurityContextOverride(Strict):
    """A model's own uid/gid instead of its engine's (for images built with another user)."""

    run_as_user: Optional[NonRootUid] = Field(None, description="uid of the model's pods (server and puller).")
    run_as_group: Optional[int] = Field(None, ge=0, description="gid of the model's pods (server and puller).")
    allow_non_default_identity: bool = Field(
        False, description="Required to set a uid/gid other than the engine's image user "
        "(vLLM 2000/0, NIM 1000/2000): an image without a passwd entry for it crashes.",
    )


class ModelConfig(Strict):
    """One model server."""

    name: Annotated[str, AfterValidator(values.check_model_name)] = Field(
        description="Model name: stem of every object name and the served model name."
    )
    engine: str = Field("vllm", description="`vllm` or `nim` (`generic` is not supported on Kubernetes).")
    source: WeightSource = Field(
        description="Where the weights come from: `type: hf` (the default), `s3` or `pvc`; see "
        "docs/weight-sources.md.")
    gpus: int = Field(1, ge=0, description="GPUs per pod (`nvidia.com/gpu` limit). `0`: a CPU model, served by "
                      "vLLM's CPU server (`platform.vllmCpuImage`) with no GPU and no GPU node placement; see "
                      "docs/02-models-and-weights.md, \"CPU models\".")
    tensor_parallel_size: int = Field(
        1, ge=1, description="Tensor-parallel degree; must divide `gpus`. vLLM, and the NIM operator's ngc "
        "cache without `nim.profiles` (it selects the profiles to cache); refused where it has no effect "
        "(NIM raw path, hf cache, explicit profiles).")
    replicas: int = Field(1, ge=0, description="Server replicas (unset when `autoscaling` is on).")
    autoscaling: Autoscaling = Field(default_factory=Autoscaling, description="Replicas on queue depth (KEDA).")
    resources: Resources = Field(default_factory=Resources, description="Server CPU and memory.")
    weights: WeightsStorage = Field(default_factory=WeightsStorage, description="Weights volume.")
    health_path: Optional[HealthPath] = Field(
        None, description="HTTP path of startup, readiness and liveness probes; a leading "
        "`/` is added when missing. Unset: `/health` for vLLM, `/v1/health/ready` for NIM."
    )
    shared_memory_size_limit: Optional[PositiveQuantity] = Field(
        None, description="Overrides `platform.sharedMemorySizeLimit` for this model."
    )
    lora: Lora = Field(default_factory=Lora, description="LoRA adapter serving (vLLM only: NIM serves "
                       "adapters from `NIM_PEFT_SOURCE` with a LoRA profile, which is not configured here). "
                       "Adapter names must differ from every model's name and from each other.")
    args: tuple[str, ...] = Field(
        (), description="Extra server arguments, appended last. Flags the program sets (vLLM: the "
        "model path/`--model`, `--served-model-name`, `--host`, `--port`, `--tensor-parallel-size`/"
        "`-tp`, `--enable-lora`, `--max-loras`, `--max-lora-rank`, `--download-dir`, `--hf-token`) "
        "are refused with the setting to use instead.",
    )
    env: kube.EnvVars = Field(
        default_factory=dict, description="Extra server environment variables (plain values). "
        "Names the program sets (server and puller) are refused with the setting to use instead, "
        "and so are credential-looking names (`*_TOKEN`, `*_API_KEY`, `*_PASSWORD`, `*_SECRET`): "
        "use `hfTokenSecret` / `nim.authSecret`.",
    )
    node_selector: Optional[kube.Labels] = Field(
        None, description="Overrides `platform.gpuNodeSelector` for this model; a CPU model (`gpus: 0`) "
        "has this one only."
    )
    tolerations: Optional[tuple[Toleration, ...]] = Field(
        None, description="Overrides `platform.gpuTolerations` for this model; a CPU model (`gpus: 0`) "
        "has these only."
    )
    image: Optional[Image] = Field(None, description="Overrides the engine's server image.")
    vllm_release: Optional[VllmRelease] = Field(
        None, description="vLLM only: overrides `platform.vllmRelease` for this model (the line its "
        "`image` runs). Unset: the line `image`'s tag names, else the platform's.",
    )
    hf_endpoint: Optional[HfEndpoint] = Field(None, description="Overrides `platform.hfEndpoint`.")
    hf_token_secret: Optional[SecretKeyRef] = Field(
        None, description="Secret holding a Hugging Face token, for gated or private repos. Unset, "
        "with `llm-serving:hfToken` set: the Secret `llm-serving-hf-token` the stack creates from it "
        "(not on the NIM operator path, which reads `nim.authSecret`).",
    )
    pin: Optional[bool] = Field(None, description="Overrides `platform.pin` for this model.")
    path: Optional[Literal["operator", "raw"]] = Field(
        None, description="NIM only. `raw` (default): the same PVC / puller / Deployment / Service "
        "objects as vLLM. `operator`: NIMCache + NIMService for the k8s-nim-operator (its CRDs must "
        "be installed). Rejected on vLLM models.",
    )
    nim: Optional[NimSettings] = Field(None, description="NIM settings (`engine: nim` only).")
    security_context: Optional[SecurityContextOverride] = Field(
        None, description="Per-model uid/gid override; unset uses the engine's platform uid/gid.",
    )
    disruption: Optional[DisruptionOverride] = Field(
        None, description="Overrides `platform.disruption` (drain seconds, topology spread) for this model.",
    )
    multi_node: Optional[MultiNode] = Field(
        None, description="Serve the model across nodes: a LeaderWorkerSet (the LWS controller must be "
        "installed) instead of the Deployment, one group of `nodes` pods per replica; `gpus` is each "
        "pod's (node's) share. vLLM, and NIM on the operator path (the NIMService's `multiNode`: the "
        "operator renders the LeaderWorkerSet); ReadWriteMany weights, or for vLLM a volume per pod "
        "(`multiNode.weights`). See docs/multi-node.md.",
    )

    next: Optional[NextRevision] = Field(
        None, description="A new revision (source, image or args) served beside this one under the model's "
        "name, with `weight` percent of new conversations, sticky per conversation; vLLM single-pod models "
        "behind the router's gateway. Promote: write its settings into the model and remove `next`; roll "
        "back: `weight: 0` or remove it. See docs/05-day-2.md.",
    )

    @property
    def served_name(self) -> str:
        """The name the engine answers to (`--served-model-name`): the model's, for both revisions."""
        return self.name

    @property
    def is_next_revision(self) -> bool:
        return False

    def disruption_policy(self, platform_default: DisruptionConfig) -> DisruptionPolicy:
        """This model's drain and spread: its own keys, else the platform's (``platform.disruption``)."""
        return resolve(platform_default, self.disruption)

    @field_validator("path")
    @classmethod
    def _path_for_engine(cls, path: Optional[str], info: ValidationInfo) -> Optional[str]:
        engine = ENGINES.get(info.data.get("engine"))  # None: the engine was refused (its own message)
        return engine.resolve_path(path) if engine is not None else path

    @property
    def nim_settings(self) -> NimSettings:
        return self.nim or NimSettings()

    @property
    def on_operator(self) -> bool:
        # `path` is NIM's: the other engines refuse it (their ``resolve_path``).
        return self.path == "operator"

    @property
    def streams(self) -> bool:
        """Whether the server streams its weights from the store (`source.load: stream`, config/streaming.py):
        no volume, no puller, no gate."""
        return self.source.streams

    @property
    def on_cpu(self) -> bool:
        """A CPU model (``gpus: 0``): vLLM's CPU server (config/cpu.py)."""
        return self.gpus == 0

    @field_validator("engine")
    @classmethod
    def _supported_engine(cls, engine: str) -> str:
        return check_name(engine)

    @field_validator("health_path")
    @classmethod
    def _engine_health_path(cls, path: Optional[str], info: ValidationInfo) -> str:
        return path or ENGINES.get(info.data.get("engine", "vllm"), ENGINES["vllm"]).health_path

    @model_validator(mode="after")
    def _topology(self, info: ValidationInfo) -> ModelConfig:
        problems: list[Problem] = []
        # The stack-level check sees the secret defaults; this one reports a missing authSecret
        # beside the model's other problems when the loader says no stack secret will fill it.
        given = (info.context or {}).get(stack_secrets.CONTEXT_KEY)
        if given is not None and stack_secrets.NGC_API_KEY.config_key not in given:
            problems.extend(engine_of(self).auth_secret_problems(self))
        if self.gpus % self.tensor_parallel_size:
            problems.append(Problem(
                "tensorParallelSize",
                f"{self.tensor_parallel_size} does not divide the pod's "
                f"{self.gpus} GPUs; set gpus to a multiple of it, or lower it",
            ))
        per_pod = self.multi_node is not None and self.multi_node.per_pod  # a volume per pod: nothing shared
        if self.replicas > 1 and self.weights.access_mode == "ReadWriteOnce" and not per_pod and not self.streams:
            problems.append(Problem(
                "replicas",
                f"{self.replicas} replicas cannot share a ReadWriteOnce weights volume "
                "(replicas on two nodes hit Multi-Attach and never start); set "
                "weights.accessMode: ReadWriteMany, or replicas: 1",
            ))
        problems.extend(engine_of(self).settings_problems(self))
        problems.extend(source_problems(self))
        problems.extend(autoscaling_problems(self))
        problems.extend(multinode_problems(self))
        problems.extend(cpu_problems(self))
        problems.extend(next_problems(self))
        problems.extend(identity_problems(self))
        problems.extend(managed.arg_problems(self.args, self.engine, self.streams))
        problems.extend(managed.env_problems(self.env, self.engine, self.streams))
        problems.extend(engine_of(self).no_effect_problems(self))
        if problems:
            raise values.Problems(problems)
        return self


class RevisionServer(ModelConfig):
    """The model that serves a next revision (``revision_model``): the model with the revision's
    settings, named ``<model>-next`` (its objects), answering to the model's name. Derived, never
    read from a stack file (the stack's schema names ``ModelConfig`` only)."""

    revision_of: str

    @property
    def served_name(self) -> str:
        return self.revision_of

    @property
    def is_next_revision(self) -> bool:
        return True


# What reads several of a model's sections: the checks ``ModelConfig`` runs, and what the
# compilers derive. The sections (sources.py, autoscaling.py, multinode.py, revisions.py, ...)
# are types that validate their own keys and never see the model (tests/config/
# test_config_import_contract.py). Paths in problems are relative to the model (``models.<i>.`` is
# added by the stack).


def source_problems(model: ModelConfig) -> list[Problem]:
    """Settings of a model (``ModelConfig``) that its weight source makes wrong."""
    source, problems = model.source, []
    if not source.operator_cacheable and model.on_operator:
        problems.append(Problem("source.type", f"the NIM operator path caches weights through its NIMCache (NGC or the "
                         f"Hub); a {source.type} source needs path: raw"))
    problems.extend(stream_problems(model))
    if source.existing_claim is not None:
        for key, field in (("size", "size"), ("storageClassName", "storage_class_name")):
            if field in model.weights.model_fields_set:
                problems.append(Problem(f"weights.{key}", f"the claim {source.existing_claim} exists and keeps its own "
                                 f"{key}; remove weights.{key} (weights.accessMode states the claim's mode)"))
    return problems


def stream_problems(model: ModelConfig) -> list[Problem]:
    """What a streamed `s3` source makes wrong in its model (paths relative to the model); a source
    that is not streamed, only a `streamMemoryLimit` it sets (no other kind has the key)."""
    source, problems = model.source, []
    if not source.streams:
        if "stream_memory_limit" in source.model_fields_set:
            problems.append(Problem("source.streamMemoryLimit", "applies to load: stream only; remove it"))
        return problems
    refusal = engine_of(model).stream_refusal
    if refusal is not None:
        problems.append(Problem("source.load", refusal))
    if model.multi_node is not None:
        problems.append(Problem("multiNode", "vLLM 0.11 copies the config files into a folder of the pod that "
                                "starts the server only, and a group of pods serving from it is not established; "
                                "remove multiNode or use source.load: copy"))
    if model.lora.enabled:
        problems.append(Problem("lora.enabled", "LoRA adapters are re-based onto the weights path, and a streamed "
                                "model has none; use source.load: copy, or turn lora off"))
    if source.version_at:
        problems.append(Problem("source.versionAt", "a streamed server reads the objects as they are when it starts "
                                "(vLLM 0.11 hands the streamer an s3:// path, never a version); use source.load: copy "
                                "to serve the bucket as it was at versionAt, or remove versionAt"))
    for key, field in (("size", "size"), ("storageClassName", "storage_class_name"), ("accessMode", "access_mode")):
        if field in model.weights.model_fields_set:
            problems.append(Problem(f"weights.{key}", f"a streamed model has no weights volume; remove weights.{key}"))
    limit, memory = values.parse_quantity(source.stream_memory_limit), values.parse_quantity(model.resources.memory)
    if limit * 2 > memory:
        problems.append(Problem("source.streamMemoryLimit", f"{source.stream_memory_limit} is more than half of "
                                f"resources.memory ({model.resources.memory}), which also holds the server; "
                                "lower it or raise resources.memory"))
    return problems

def replica_ceiling(model: ModelConfig) -> int:
    """The most replicas this model may run: ``maxReplicas`` when autoscaled, else ``replicas``.
    "May it run more than one?" is ``replica_ceiling(model) > 1`` (PDB, spread, RWX rules)."""
    scaling = model.autoscaling
    if scaling.enabled and scaling.max_replicas is not None:
        return scaling.max_replicas
    return model.replicas

def may_sleep(model: ModelConfig) -> bool:
    """Scaled to zero when idle (``autoscaling.minReplicas: 0``)."""
    return model.autoscaling.enabled and model.autoscaling.min_replicas == 0

def autoscaling_problems(model: ModelConfig) -> list[Problem]:
    """What makes an autoscaling setting unusable, at the key to change."""
    scaling = model.autoscaling
    if not scaling.enabled:
        return []
    own = engine_of(model).autoscaling_problems(model)
    if own is not None:
        return own
    found: list[Problem] = []
    if "replicas" in model.model_fields_set:
        found.append(Problem("replicas", "autoscaling sets the replica count between autoscaling.minReplicas "
                             "and maxReplicas; remove replicas (or set autoscaling.enabled: false)"))
    if scaling.max_replicas is None:
        found.append(Problem("autoscaling.maxReplicas", "set the most replicas the autoscaler may start "
                             f"(each takes {model.gpus} GPU(s)), e.g. {scaling.min_replicas + 1}"))
        return found
    if "idle_seconds" in scaling.model_fields_set and scaling.min_replicas != 0:
        found.append(Problem("autoscaling.idleSeconds", "applies to minReplicas: 0 only (the idle time "
                             "before the model sleeps); remove it, or set minReplicas: 0"))
    if scaling.min_replicas > scaling.max_replicas:
        found.append(Problem("autoscaling.minReplicas", f"{scaling.min_replicas} exceeds maxReplicas "
                             f"({scaling.max_replicas}); lower it or raise maxReplicas"))
    elif scaling.min_replicas == scaling.max_replicas:
        found.append(Problem("autoscaling.maxReplicas", f"equal to minReplicas ({scaling.min_replicas}): "
                             "nothing to scale; raise maxReplicas, or set replicas instead of autoscaling"))
    if model.weights.access_mode == "ReadWriteOnce" and not model.streams:
        found.append(Problem("weights.accessMode", f"ReadWriteOnce attaches to one node, and autoscaling may start "
                             f"up to {scaling.max_replicas} replicas (a second node's pod hits Multi-Attach and "
                             "never starts); set weights.accessMode: ReadWriteMany, or use replicas: 1"))
    return found

def multinode_problems(model: ModelConfig) -> list[Problem]:
    """What a multi-node model cannot be (each with the fix)."""
    spec = model.multi_node
    if spec is None or model.gpus == 0:  # a CPU model's multiNode is refused whole (cpu.py)
        return []
    refusal = engine_of(model).multinode_refusal(model)
    if refusal:
        return refusal
    problems: list[Problem] = []
    if spec.per_pod:
        if model.on_operator:
            # The NIMCache is one PVC, which the operator mounts in every pod of every group.
            problems.append(Problem("multiNode.weights", "the NIM operator mounts its NIMCache's one volume in "
                                    "every pod of a group: per-pod volumes are not offered on the operator path; "
                                    "set multiNode.weights: shared with weights.accessMode: ReadWriteMany"))
        if model.source.existing_claim is not None:
            problems.append(Problem("multiNode.weights", "an existing claim (source.type: pvc) is one volume, it "
                             "cannot be one per pod: set multiNode.weights: shared with a ReadWriteMany claim, or "
                             "pull per pod from the store or the hub (source.type: s3 or hf)"))
        if model.source.puller_service_account:
            problems.append(Problem("source.serviceAccountName", "per-pod weights are pulled inside the server "
                             "pods, which keep the platform's identity-less ServiceAccount: give the store's keys "
                             "through source.credentials, or set multiNode.weights: shared (the puller Job runs "
                             "as this ServiceAccount)"))
    elif model.weights.access_mode != "ReadWriteMany":
        if model.on_operator:
            problems.append(Problem("weights.accessMode", "every pod of a multi-node group mounts the NIMCache's "
                                    "volume, on different nodes: set weights.accessMode: ReadWriteMany (the NIMCache "
                                    "PVC is created with it and the operator mounts it in the leader and every worker)"))
        else:
            problems.append(Problem("weights.accessMode", "every pod of a multi-node group mounts the shared weights, "
                             "on different nodes: set weights.accessMode: ReadWriteMany (pulled once and shared), or "
                             "multiNode.weights: perPod (a volume per pod, each pulled and verified: for node-local "
                             "disks)"))
    if model.autoscaling.enabled:
        if model.on_operator:
            problems.append(Problem("autoscaling.enabled", "the NIM operator refuses multiNode together with "
                                    "autoscaling (its CRD rule: autoScaling must be nil or disabled when multiNode "
                                    "is set); a multi-node NIMService runs `replicas` groups: remove autoscaling "
                                    "and set replicas"))
        else:
            problems.append(Problem("autoscaling.enabled", "a multi-node model scales by whole groups, which the "
                             "Deployment autoscaler does not do; set replicas instead"))
    if model.lora.enabled and engine_of(model).serves_lora:  # an engine without adapters refuses lora itself
        problems.append(Problem("lora.enabled", "LoRA adapters are prepared per pod for one-pod servers; "
                         "multi-node models do not offer them: remove lora or multiNode"))
    # The LWS webhook refuses a LeaderWorkerSet whose pods (replicas × size) pass int32 (found by
    # the dry-run property test: each count alone was in range).
    if model.replicas * spec.nodes > INT32_MAX:
        problems.append(Problem("replicas", f"{model.replicas} groups × {spec.nodes} nodes is more pods than a "
                         f"LeaderWorkerSet takes (at most {INT32_MAX}); lower replicas"))
    return problems + engine_of(model).multinode_problems(model)

def next_name(model: ModelConfig) -> str:
    return f"{model.name}{NEXT_SUFFIX}"

def revision_model(model: ModelConfig) -> ModelConfig:
    """The model that serves the next revision: the model with the revision's settings, named
    ``<model>-next``, fixed replicas, no next of its own; it answers to the model's name."""
    revision = model.next
    if revision is None:
        raise ValueError(f"model '{model.name}' declares no next revision")
    update = {
        "name": next_name(model),
        "source": revision.source if revision.source is not None else model.source,
        "image": revision.image if revision.image is not None else model.image,
        "args": revision.args if revision.args is not None else model.args,
        "replicas": revision.replicas,
        "autoscaling": Autoscaling(),
        "next": None,
        "revision_of": model.name,
    }
    # Built as model_copy builds a copy (the settings are the model's, validated with it), as the
    # class whose served name is the model's.
    return RevisionServer.model_construct(model.model_fields_set | set(update), **{**dict(model), **update})

def weights_model(model: ModelConfig) -> ModelConfig:
    """The model as it will be once promoted, as far as its weights go: its name, the revision's
    source. Its weights objects (volume, puller Job, gate) are the revision's, by name and spec."""
    revision = model.next
    if revision is None:
        raise ValueError(f"model '{model.name}' declares no next revision")
    return model.model_copy(update={"source": revision.source if revision.source is not None else model.source,
                                    "next": None})

def changes(model: ModelConfig, default_image: Optional[str] = None) -> list[str]:
    """What the next revision changes, in the words of the config (empty: nothing).
    ``default_image``: the image a model without its own runs (the platform's); the stack passes
    it, so a revision naming the image the model already runs changes nothing."""
    revision = model.next
    if revision is None:
        return []
    changed = []
    if revision.source is not None and revision.source != model.source:
        changed.append("source")
    if revision.image is not None and revision.image != (model.image or default_image):
        changed.append("image")
    if revision.args is not None and tuple(revision.args) != tuple(model.args):
        changed.append("args")
    return changed

def next_problems(model: ModelConfig) -> list[Problem]:
    """Where a next revision cannot be served: each with the setting to change."""
    if model.next is None:
        return []
    problems: list[Problem] = []
    unsupported = [
        (engine_of(model).revision_refusal is not None, "engine", engine_of(model).revision_refusal),
        (model.multi_node is not None, "multiNode", "single-pod models only (two LeaderWorkerSets of one model "
         "would each need whole nodes); deploy the new revision as another model"),
        (model.lora.enabled, "lora.enabled", "models without LoRA adapters only (an adapter is asked for by its "
         "own name, which both revisions would register: the split could not hold); remove lora or next"),
        (model.autoscaling.enabled and model.autoscaling.min_replicas == 0, "autoscaling.minReplicas",
         "models that do not sleep (a sleeping model's revisions would wake apart); set minReplicas: 1 or remove next"),
        (len(model.name) > NEXT_NAME_MAX, "name", f"model names of at most {NEXT_NAME_MAX} characters ('{model.name}' "
         f"is {len(model.name)}: the revision's objects are named '{model.name}{NEXT_SUFFIX}-...', which must fit "
         "Kubernetes' 63-character limit); shorten the name"),
    ]
    problems += [Problem("next", f"a next revision can be declared for {why} (ruled out here by {setting})")
                 for bad, setting, why in unsupported if bad]
    if problems:
        return problems
    if not changes(model):
        problems.append(Problem("next", "declares the revision already serving (no source, image or args of its "
                                "own that differ); set what the new revision changes, or remove next"))
        return problems
    derived = revision_model(model)
    if derived.streams != model.streams:
        problems.append(Problem("next.source", "loads its weights otherwise than the model (`load: stream` on one "
                                "of them only): their pullers share the model's network policy; give both the same "
                                "load, or deploy the revision as another model"))
    if ("source" not in changes(model) and model.weights.access_mode == "ReadWriteOnce" and not model.streams):
        problems.append(Problem("next", "keeps the model's source, so both revisions mount the model's one weights "
                                "volume, which ReadWriteOnce attaches to one node; set weights.accessMode: "
                                "ReadWriteMany, or give the revision a source of its own"))
    if revision_rwo_shared(model):
        # The model's own replicas are checked in model.py; the revision's Deployment mounts its
        # weights volume (the model's, or the one it will have once promoted) from every pod too.
        problems.append(Problem("next.replicas", f"{model.next.replicas} replicas cannot share a ReadWriteOnce "
                                "weights volume (replicas on two nodes hit Multi-Attach and never start); set "
                                "weights.accessMode: ReadWriteMany, or next.replicas: 1"))
    problems += [p.under("next") for p in managed.arg_problems(derived.args, derived.engine, derived.streams)
                 if p.path.startswith("args")]
    return problems

def revision_rwo_shared(model: ModelConfig) -> bool:
    """The next revision runs several pods on one ReadWriteOnce weights volume."""
    return (model.next is not None and model.next.replicas > 1 and model.weights.access_mode == "ReadWriteOnce"
            and not revision_model(model).streams)

def identity_problems(model: ModelConfig) -> list[Problem]:
    """uid/gid stay per engine: another engine's (or any other) identity must be explicit."""
    context = model.security_context
    if context is None:
        return []
    engine = engine_of(model)
    uid, gid = engine.identity
    problems: list[Problem] = []
    if not context.allow_non_default_identity:
        for key, value, default in (("runAsUser", context.run_as_user, uid),
                                    ("runAsGroup", context.run_as_group, gid)):
            if value is None or value == default:
                continue
            borrowed = [other for other in ENGINES.values()
                        if other is not engine and other.identity[key == "runAsGroup"] == value]
            what = "uid" if key == "runAsUser" else "gid"
            whose = f"{borrowed[0].label}'s {what}, " if borrowed else ""
            problems.append(Problem(f"securityContext.{key}", (
                f"{value} is {whose}not the {engine.label} image's {what} "
                f"({default}); an image without a passwd entry for it crashes "
                "(`getpwuid(): uid not found`). Remove it, or set "
                "securityContext.allowNonDefaultIdentity: true if the image has that user"
            )))
    elif context.run_as_user is None and context.run_as_group is None:
        problems.append(Problem("securityContext.allowNonDefaultIdentity",
                                "nothing to allow: set runAsUser/runAsGroup, or remove it"))
    return problems


def cpu_problems(model: ModelConfig) -> list[Problem]:
    """What a CPU model cannot be, and CPU-only settings on a GPU model."""
    if model.gpus > 0:
        return _gpu_cpu_settings_problems(model)
    refusal = engine_of(model).cpu_refusal
    if refusal is not None:
        return [Problem("gpus", refusal)]
    problems: list[Problem] = []
    if model.multi_node is not None:
        problems.append(Problem("multiNode", "a CPU model (gpus: 0) serves from one pod: vLLM's CPU backend spans "
                                "no nodes; remove multiNode, or set gpus"))
    if model.tensor_parallel_size > 1:
        problems.append(Problem("tensorParallelSize", f"{model.tensor_parallel_size}: {cpu.ONE_RANK}"))
    problems += cpu.resource_problems(model.resources.cpu, model.resources.memory, model.resources.kv_cache)
    problems += cpu.arg_problems(model.args)
    problems += [Problem(f"env.{name}", f"is set by this program on a CPU model: {cpu.MANAGED_ENV[name]}")
                 for name in sorted(model.env) if name in cpu.MANAGED_ENV]
    return problems


def _gpu_cpu_settings_problems(model: ModelConfig) -> list[Problem]:
    problems = []
    if model.resources.kv_cache is not None:
        problems.append(Problem("resources.kvCache", "sizes the KV cache of CPU models (gpus: 0) only; on GPUs vLLM "
                                "sizes it from --gpu-memory-utilization: remove it, or set gpus: 0"))
    problems += [Problem(f"env.{name}", "is read by vLLM's CPU backend only, and this model runs on GPUs: remove "
                         "it, or set gpus: 0") for name in sorted(model.env) if name.startswith("VLLM_CPU_")]
    return problems


# Which models read a stack secret (stack_secrets.py), per config key: the update that makes a model
# read it where it names no Secret of its own (None: it does not use it, or its path reads
# credentials elsewhere), and whether a resolved model reads it (the stack creates it only then).
def _hf_token_default(model: ModelConfig) -> Optional[dict]:
    # The operator path reads HF_TOKEN from nim.authSecret, never from hfTokenSecret.
    if model.on_operator or model.hf_token_secret is not None:
        return None
    return {"hf_token_secret": stack_secrets.HF_TOKEN_SECRET}

def _ngc_api_key_default(model: ModelConfig) -> Optional[dict]:
    return engine_of(model).ngc_api_key_default(model)

def _reads_hf_token(model: ModelConfig) -> bool:
    ref = model.hf_token_secret
    return ref is not None and (ref.name, ref.key) == (stack_secrets.HF_TOKEN_SECRET.name, stack_secrets.HF_TOKEN_SECRET.key)

def _reads_ngc_api_key(model: ModelConfig) -> bool:
    return engine_of(model).reads_ngc_api_key(model)


SECRET_READERS: dict[str, tuple[Callable[[ModelConfig], Optional[dict]], Callable[[ModelConfig], bool]]] = {
    stack_secrets.HF_TOKEN.config_key: (_hf_token_default, _reads_hf_token),
    stack_secrets.NGC_API_KEY.config_key: (_ngc_api_key_default, _reads_ngc_api_key),
}


def reads_stack_secret(model: ModelConfig, spec: stack_secrets.StackSecretSpec) -> bool:
    return SECRET_READERS[spec.config_key][1](model)


def with_secret_defaults(model: ModelConfig, specs: tuple[stack_secrets.StackSecretSpec, ...]) -> ModelConfig:
    """``model`` reading the given stack secrets wherever it names no Secret of its own."""
    for spec in specs:
        update = SECRET_READERS[spec.config_key][0](model)
        if update:
            model = model.model_copy(update=update)
    return model
