"""The `models` section: one model server each (weights source, engine, resources, serving).

Stack files use camelCase keys (Pulumi's convention); error paths are reported in the same
spelling so that a message points at the line the user has to change. Checks that need a model's
own settings only are here (and in ``rules.py``, ``autoscaling.py``, ``managed.py``); checks that
need another section (the platform, the router, the other models) belong to the stack
(``stack.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Optional, Union

from pydantic import AfterValidator, Discriminator, Field, PrivateAttr, Tag, ValidationInfo, field_validator, model_validator

from . import cpu, effect, kube, managed, rules, stack_secrets, values
from .autoscaling import Autoscaling, autoscaling_problems
from .disruption import DisruptionOverride, DisruptionPolicy, resolve
from .lora import Lora
from .multinode import MultiNode, multinode_problems
from .revisions import NextRevisionBase, next_problems
from .sources import PvcSource, S3Source, source_problems, source_type
from .streaming import streams
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

if TYPE_CHECKING:
    from .platform import PlatformConfig

DEFAULT_HEALTH_PATH = {"vllm": "/health", "nim": "/v1/health/ready"}
# Checkpoint copies vLLM never loads when safetensors are there (the puller passes them all after
# one `--exclude`: compile/weights.py puller_args).
DEFAULT_IGNORE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.h5", "*.msgpack", "*.ckpt", "*.onnx", "*.ot", "original/*")


class ModelSource(Strict):
    """Weights on the Hugging Face Hub (or a Hub-compatible mirror): the default `type`."""

    type: Literal["hf"] = Field("hf", description="`hf` (the default; may be left out).")
    repo: Annotated[str, AfterValidator(values.check_hf_repo)] = Field(
        description="Hugging Face repo id, `owner/name`."
    )
    revision: Annotated[str, AfterValidator(values.check_revision)] = Field(
        "main", description="Branch, tag or full 40-hex commit to download."
    )
    allow_patterns: Optional[tuple[str, ...]] = Field(
        None, description="Download only files matching one of these globs (`hf download "
        "--include`; `*` also matches `/`). Unset: every file not ignored. The patterns follow one `--include`, "
        "as the huggingface_hub 0.x CLI of the default puller image takes them.",
    )
    ignore_patterns: tuple[str, ...] = Field(
        DEFAULT_IGNORE_PATTERNS, description="Skip files matching these globs (`hf download "
        "--exclude`): by default the duplicate checkpoints vLLM does not load (`.bin`/`.pt`/`.pth` "
        "copies of the safetensors weights, TF/Flax/ONNX exports, Meta's `original/` folder). "
        "`[]` downloads them too.",
    )

    @field_validator("allow_patterns", "ignore_patterns")
    @classmethod
    def _patterns(cls, patterns: Optional[tuple[str, ...]], info: ValidationInfo) -> Optional[tuple[str, ...]]:
        if patterns is None:
            return None
        if info.field_name == "allow_patterns" and not patterns:
            raise ValueError("an empty allow list downloads nothing; remove allowPatterns to download every file")
        for pattern in patterns:
            if not pattern.strip() or pattern != pattern.strip() or pattern.startswith("-"):
                raise ValueError(f"'{pattern}' is not a file glob; write e.g. '*.safetensors' or 'original/*'")
        return patterns

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.revision}"


# `source.type` picks the kind; without it, the Hub (stack files from before the other kinds).
WeightSource = Annotated[
    Union[Annotated[ModelSource, Tag("hf")], Annotated[S3Source, Tag("s3")], Annotated[PvcSource, Tag("pvc")]],
    Discriminator(source_type),
]
# The model of each ``source.type`` tag (the error formatter, messages.py, walks the config by it).
SOURCE_CLASSES: dict[str, type[Strict]] = {"hf": ModelSource, "s3": S3Source, "pvc": PvcSource}


class NextRevision(NextRevisionBase):
    """The model's next revision (components/config/revisions.py): its own pods beside the serving
    ones, under the model's name, with a share of the traffic."""

    source: Optional[WeightSource] = Field(
        None, description="The revision's weights; unset: the model's. Pulled and verified before the "
        "revision serves, as the model's.")


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

    # Set on the model revisions.revision_model derives (its objects are `<model>-next`): the model
    # it is the next revision of.
    _revision_of: Optional[str] = PrivateAttr(None)

    @property
    def served_name(self) -> str:
        """The name the engine answers to (`--served-model-name`): the model's, for both revisions."""
        return self._revision_of or self.name

    @property
    def is_next_revision(self) -> bool:
        return self._revision_of is not None

    def disruption_policy(self, platform: PlatformConfig) -> DisruptionPolicy:
        """This model's drain and spread: its own keys, else the platform's."""
        return resolve(platform.disruption, self.disruption)

    @field_validator("path")
    @classmethod
    def _path_for_engine(cls, path: Optional[str], info: ValidationInfo) -> Optional[str]:
        engine = info.data.get("engine")
        if engine == "nim":
            return path or "raw"
        if engine == "vllm" and path is not None:
            raise ValueError(
                "path applies to NIM models only (vLLM models always deploy as raw objects); remove it"
            )
        return path

    @property
    def nim_settings(self) -> NimSettings:
        return self.nim or NimSettings()

    @property
    def on_operator(self) -> bool:
        return self.engine == "nim" and self.path == "operator"

    @property
    def on_cpu(self) -> bool:
        """A CPU model (``gpus: 0``): vLLM's CPU server (config/cpu.py)."""
        return self.gpus == 0

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
    def _engine_health_path(cls, path: Optional[str], info: ValidationInfo) -> str:
        return path or DEFAULT_HEALTH_PATH.get(info.data.get("engine", "vllm"), "/health")

    @model_validator(mode="after")
    def _topology(self, info: ValidationInfo) -> ModelConfig:
        problems: list[Problem] = []
        # The stack-level check sees the secret defaults; this one reports a missing authSecret
        # beside the model's other problems when the loader says no stack secret will fill it.
        given = (info.context or {}).get(stack_secrets.CONTEXT_KEY)
        if given is not None and stack_secrets.NGC_API_KEY.config_key not in given:
            problems.extend(rules.auth_secret_problems(self))
        if self.gpus % self.tensor_parallel_size:
            problems.append(Problem(
                "tensorParallelSize",
                f"{self.tensor_parallel_size} does not divide the pod's "
                f"{self.gpus} GPUs; set gpus to a multiple of it, or lower it",
            ))
        per_pod = self.multi_node is not None and self.multi_node.per_pod  # a volume per pod: nothing shared
        if self.replicas > 1 and self.weights.access_mode == "ReadWriteOnce" and not per_pod and not streams(self):
            problems.append(Problem(
                "replicas",
                f"{self.replicas} replicas cannot share a ReadWriteOnce weights volume "
                "(replicas on two nodes hit Multi-Attach and never start); set "
                "weights.accessMode: ReadWriteMany, or replicas: 1",
            ))
        if self.engine == "nim" and not self.image:
            problems.append(Problem(
                "image",
                "NIM images are per model; set the NIM image, e.g. "
                "'nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3'",
            ))
        if self.engine != "vllm" and self.vllm_release is not None:
            problems.append(Problem("vllmRelease", "applies to vLLM models only (NIM images bring their own "
                                    "server); remove it"))
        problems.extend(rules.nim_problems(self))
        problems.extend(source_problems(self))
        problems.extend(autoscaling_problems(self))
        problems.extend(multinode_problems(self))
        problems.extend(cpu.model_problems(self))
        problems.extend(next_problems(self))
        problems.extend(rules.identity_problems(self))
        problems.extend(managed.arg_problems(self.args, self.engine, streams(self)))
        problems.extend(managed.env_problems(self.env, self.engine, streams(self)))
        problems.extend(effect.model_problems(self))
        if problems:
            raise values.Problems(problems)
        return self
