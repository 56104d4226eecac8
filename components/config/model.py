"""The one config model: defaults, validation and the generated reference all come from here.

Stack files use camelCase keys (Pulumi's convention); error paths are reported in the same
spelling so that a message points at the line the user has to change.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import (
    AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator,
)
from pydantic.alias_generators import to_camel

from . import values

Image = Annotated[str, AfterValidator(values.check_image)]
Quantity = Annotated[str, AfterValidator(values.check_quantity)]
PositiveQuantity = Annotated[str, AfterValidator(values.check_positive_quantity)]
HfEndpoint = Annotated[str, AfterValidator(values.check_cluster_reachable_url)]

NonRootUid = Annotated[int, AfterValidator(values.check_non_root_uid)]

DEFAULT_HEALTH_PATH = {"vllm": "/health", "nim": "/v1/health/ready"}
VLLM_IMAGE = "docker.io/vllm/vllm-openai:v0.11.0"


class Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
        validate_default=True,
    )


class Toleration(Strict):
    key: Optional[str] = Field(None, description="Taint key the toleration matches.")
    operator: Literal["Exists", "Equal"] = Field("Exists", description="`Exists` or `Equal`.")
    value: Optional[str] = Field(None, description="Taint value, with `operator: Equal`.")
    effect: Optional[Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]] = Field(
        None, description="Taint effect matched; empty matches all effects."
    )

    @model_validator(mode="after")
    def _value_needs_equal(self) -> "Toleration":
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("a toleration with operator 'Exists' takes no value; remove value or use operator 'Equal'")
        return self

    def to_k8s(self) -> dict:
        return self.model_dump(by_alias=True, exclude_none=True)


class SecretKeyRef(Strict):
    name: Annotated[str, AfterValidator(values.check_dns1123_label)] = Field(
        description="Name of an existing Kubernetes Secret in the stack's namespace."
    )
    key: str = Field("token", description="Key inside the Secret.")


GPU_TOLERATIONS = (Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),)


class PlatformConfig(Strict):
    """Platform defaults: what every model gets unless it says otherwise."""

    namespace: Annotated[str, AfterValidator(values.check_dns1123_label)] = Field(
        "llm-serving", description="Namespace every object of the stack is created in."
    )
    create_namespace: bool = Field(
        True, description="Create the namespace (false when the cluster admins own it)."
    )
    vllm_image: Image = Field(VLLM_IMAGE, description="vLLM server image, fully qualified and pinned.")
    puller_image: Image = Field(
        VLLM_IMAGE,
        description="Weight-puller image; must ship the `hf` CLI of huggingface_hub. The vLLM "
        "image does, and it is already on the node for the server.",
    )
    busybox_image: Image = Field(
        "docker.io/library/busybox:1.37.0",
        description="Image of the LoRA cache init container (fully qualified: short names fail "
        "on runtimes that enforce qualified names).",
    )
    vllm_uid: NonRootUid = Field(
        2000, description="uid of vLLM pods and their puller: the image's `vllm` user. An "
        "arbitrary uid has no passwd entry and torch crashes with `getpwuid(): uid not found`.",
    )
    vllm_gid: int = Field(0, ge=0, description="gid of vLLM pods and their puller (the `vllm` user's group).")
    nim_uid: NonRootUid = Field(1000, description="uid NIM images expect.")
    nim_gid: int = Field(2000, ge=0, description="gid NIM images expect.")
    service_account_name: Annotated[str, AfterValidator(values.check_dns1123_label)] = Field(
        "llm-serving-model",
        description="ServiceAccount of serving and puller pods; created with no permissions "
        "and no mounted token.",
    )
    shared_memory_size_limit: PositiveQuantity = Field(
        "16Gi", description="Size limit of the in-memory /dev/shm volume (tensor parallel needs it)."
    )
    pending_timeout_seconds: int = Field(
        900, gt=0, description="How long a pod may stay Pending before the status reports ERROR."
    )
    pull_timeout_seconds: int = Field(
        7200, gt=0, description="Deadline of the weight download (the puller Job's activeDeadlineSeconds)."
    )
    startup_timeout_seconds: int = Field(
        1800, ge=60, description="Budget for a server to load weights before its startup probe gives up."
    )
    storage_class_name: Optional[str] = Field(
        None, description="StorageClass of weight volumes; unset uses the cluster default."
    )
    image_pull_secrets: tuple[Annotated[str, AfterValidator(values.check_dns1123_label)], ...] = Field(
        (), description="Names of image pull Secrets attached to every pod."
    )
    gpu_node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node selector that places serving pods on GPU nodes."
    )
    gpu_tolerations: tuple[Toleration, ...] = Field(
        GPU_TOLERATIONS, description="Tolerations of serving pods for GPU-node taints."
    )
    hf_endpoint: HfEndpoint = Field(
        "https://huggingface.co",
        description="Hugging Face endpoint for the puller: the hub, or a mirror reachable from "
        "inside the cluster (never localhost).",
    )


class ModelSource(Strict):
    repo: Annotated[str, AfterValidator(values.check_hf_repo)] = Field(
        description="Hugging Face repo id, `owner/name`."
    )
    revision: Annotated[str, AfterValidator(values.check_revision)] = Field(
        "main", description="Branch, tag or full 40-hex commit to download."
    )

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.revision}"


class WeightsStorage(Strict):
    size: PositiveQuantity = Field("50Gi", description="Size of the weights volume.")
    storage_class_name: Optional[str] = Field(
        None, description="StorageClass; unset uses `platform.storageClassName`."
    )
    access_mode: Literal["ReadWriteOnce", "ReadWriteMany"] = Field(
        "ReadWriteOnce",
        description="`ReadWriteOnce` attaches to one node at a time: one replica only. "
        "Several replicas need `ReadWriteMany`.",
    )


class Resources(Strict):
    cpu: PositiveQuantity = Field("4", description="CPU request of the server container.")
    memory: PositiveQuantity = Field(
        "32Gi", description="Memory request and limit of the server container (kept equal, so "
        "the node never overcommits the memory a model needs)."
    )


class Lora(Strict):
    enabled: bool = Field(False, description="Serve LoRA adapters.")
    max_loras: int = Field(4, gt=0, description="`--max-loras`: adapters resident at once.")
    max_lora_rank: int = Field(16, gt=0, description="`--max-lora-rank`.")
    cache_size_limit: PositiveQuantity = Field("10Gi", description="Size limit of the adapter cache volume.")


class ModelConfig(Strict):
    """One model server."""

    name: Annotated[str, AfterValidator(values.check_model_name)] = Field(
        description="Model name: stem of every object name and the served model name."
    )
    engine: str = Field("vllm", description="`vllm` or `nim` (`generic` is not supported on Kubernetes).")
    source: ModelSource = Field(description="Where the weights come from.")
    gpus: int = Field(1, ge=1, description="GPUs per pod (`nvidia.com/gpu` limit).")
    tensor_parallel_size: int = Field(1, ge=1, description="Tensor-parallel degree; must divide `gpus`.")
    replicas: int = Field(1, ge=0, description="Server replicas.")
    resources: Resources = Field(default_factory=Resources, description="Server CPU and memory.")
    weights: WeightsStorage = Field(default_factory=WeightsStorage, description="Weights volume.")
    health_path: Optional[str] = Field(
        None, description="HTTP path of startup, readiness and liveness probes; a leading "
        "`/` is added when missing. Unset: `/health` for vLLM, `/v1/health/ready` for NIM."
    )
    shared_memory_size_limit: Optional[PositiveQuantity] = Field(
        None, description="Overrides `platform.sharedMemorySizeLimit` for this model."
    )
    lora: Lora = Field(default_factory=Lora, description="LoRA adapter serving.")
    args: tuple[str, ...] = Field((), description="Extra server arguments, appended last.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra server environment variables.")
    node_selector: Optional[dict[str, str]] = Field(
        None, description="Overrides `platform.gpuNodeSelector` for this model."
    )
    tolerations: Optional[tuple[Toleration, ...]] = Field(
        None, description="Overrides `platform.gpuTolerations` for this model."
    )
    image: Optional[Image] = Field(None, description="Overrides the engine's server image.")
    hf_endpoint: Optional[HfEndpoint] = Field(None, description="Overrides `platform.hfEndpoint`.")
    hf_token_secret: Optional[SecretKeyRef] = Field(
        None, description="Secret holding a Hugging Face token, for gated or private repos."
    )

    @field_validator("engine")
    @classmethod
    def _supported_engine(cls, engine: str) -> str:
        if engine == "generic":
            raise ValueError(
                "engine 'generic' is not supported on Kubernetes; use 'vllm' (open models) or 'nim'"
            )
        if engine not in ("vllm", "nim"):
            raise ValueError(f"engine '{engine}' is unknown; use 'vllm' or 'nim'")
        return engine

    @field_validator("health_path")
    @classmethod
    def _leading_slash(cls, path: Optional[str], info: ValidationInfo) -> str:
        if path is None:
            return DEFAULT_HEALTH_PATH.get(info.data.get("engine", "vllm"), "/health")
        path = path.strip()
        if not path or any(ch.isspace() for ch in path):
            raise ValueError("health path must be a non-empty URL path such as '/health'")
        return path if path.startswith("/") else "/" + path

    @model_validator(mode="after")
    def _topology(self) -> "ModelConfig":
        problems: list[tuple[str, str]] = []
        if self.gpus % self.tensor_parallel_size:
            problems.append((
                "tensorParallelSize",
                f"{self.tensor_parallel_size} does not divide the pod's "
                f"{self.gpus} GPUs; set gpus to a multiple of it, or lower it",
            ))
        if self.replicas > 1 and self.weights.access_mode == "ReadWriteOnce":
            problems.append((
                "replicas",
                f"{self.replicas} replicas cannot share a ReadWriteOnce weights volume "
                "(replicas on two nodes hit Multi-Attach and never start); set "
                "weights.accessMode: ReadWriteMany, or replicas: 1",
            ))
        if self.engine == "nim" and not self.image:
            problems.append((
                "image",
                "NIM images are per model; set the NIM image, e.g. "
                "'nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3'",
            ))
        if problems:
            raise values.Problems(problems)
        return self


class ClusterConfig(Strict):
    """Which cluster the stack deploys to (or none, when rendering)."""

    kubeconfig: Optional[str] = Field(
        None, description="Path of a kubeconfig file; unset uses the ambient KUBECONFIG / ~/.kube/config."
    )
    context: Optional[str] = Field(None, description="kubeconfig context to use.")
    render_yaml_to_directory: Optional[str] = Field(
        None,
        description="Write manifests to this directory instead of applying them (no cluster is "
        "contacted; dynamic providers are skipped).",
    )


class StackConfig(Strict):
    """Everything one stack declares."""

    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Target cluster.")
    platform: PlatformConfig = Field(default_factory=PlatformConfig, description="Platform defaults.")
    models: tuple[ModelConfig, ...] = Field((), description="Model servers of the stack.")

    @model_validator(mode="after")
    def _cross_field(self) -> "StackConfig":
        seen: set[str] = set()
        problems: list[tuple[str, str]] = []
        for index, model in enumerate(self.models):
            if model.name in seen:
                problems.append((f"models.{index}.name", f"'{model.name}' is declared twice; model names must be unique"))
            seen.add(model.name)
            shm = values.parse_quantity(self.shm_limit(model))
            if model.tensor_parallel_size > 1 and shm < values.parse_quantity("1Gi"):
                problems.append((
                    f"models.{index}.sharedMemorySizeLimit",
                    f"tensor parallel {model.tensor_parallel_size} exchanges tensors through "
                    "/dev/shm; set at least 1Gi",
                ))
            if shm > values.parse_quantity(model.resources.memory):
                problems.append((
                    f"models.{index}.sharedMemorySizeLimit",
                    f"{self.shm_limit(model)} exceeds the "
                    f"container's memory ({model.resources.memory}); /dev/shm is counted against "
                    "it, so lower the limit or raise resources.memory",
                ))
        if problems:
            raise values.Problems(problems)
        return self

    def shm_limit(self, model: ModelConfig) -> str:
        return model.shared_memory_size_limit or self.platform.shared_memory_size_limit
