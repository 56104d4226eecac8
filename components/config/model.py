"""The one config model: defaults, validation and the generated reference all come from here.

Stack files use camelCase keys (Pulumi's convention); error paths are reported in the same
spelling so that a message points at the line the user has to change.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional
from urllib.parse import urlparse

from pydantic import (
    AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake

from . import values

Image = Annotated[str, AfterValidator(values.check_image)]
Quantity = Annotated[str, AfterValidator(values.check_quantity)]
PositiveQuantity = Annotated[str, AfterValidator(values.check_positive_quantity)]
HfEndpoint = Annotated[str, AfterValidator(values.check_cluster_reachable_url)]

NonRootUid = Annotated[int, AfterValidator(values.check_non_root_uid)]

DEFAULT_HEALTH_PATH = {"vllm": "/health", "nim": "/v1/health/ready"}
# (uid, gid) each engine's image has a passwd entry for: vLLM's `vllm` user, NIM's user.
ENGINE_IDENTITY = {"vllm": (2000, 0), "nim": (1000, 2000)}
VLLM_IMAGE = "docker.io/vllm/vllm-openai:v0.11.0"
# Checkpoint copies vLLM never loads when safetensors are there. Skip-lists degrade safely: a
# puller whose CLI keeps only the last `--exclude` (huggingface_hub 0.x) downloads more, never
# less; `original/*` (Meta's full duplicate) is last so it is the one such a CLI keeps.
DEFAULT_IGNORE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.h5", "*.msgpack", "*.ckpt", "*.onnx", "*.ot", "original/*")


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


class Preflight(Strict):
    """What `pulumi preview` / `up` checks on the Hugging Face endpoint before declaring anything."""

    enabled: bool = Field(
        True, description="Check every model's repo, revision, token access and download size, and "
        "pin revisions (see `pin`), before any resource is declared. Skipped when rendering.",
    )
    on_unreachable: Literal["fail", "warn"] = Field(
        "fail", description="When the endpoint cannot be reached: `fail` (with the reason), or "
        "`warn` and deploy the configured revision unpinned and unchecked.",
    )
    endpoint: Optional[str] = Field(
        None, description="Endpoint preflight asks instead of the models' `hfEndpoint`, when the "
        "machine running preview reaches the same hub or mirror by another URL (e.g. a port-forward "
        "to an in-cluster mirror; loopback is fine here). The environment variable "
        "`LLM_SERVING_HF_PREFLIGHT_ENDPOINT` overrides it.",
    )
    headroom_percent: int = Field(
        10, ge=0, le=100, description="Free space the weights volume keeps beyond the download.",
    )

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, url: Optional[str]) -> Optional[str]:
        if url is None:
            return None
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"'{url}' is not an http(s) URL; write e.g. 'http://127.0.0.1:8080'")
        return url.rstrip("/")


class TeardownIdentity(Strict):
    enabled: bool = Field(
        False,
        description="Create a ServiceAccount with a Role of exactly get/list/watch/delete on what "
        "the models own (and the NIM operator's resources when NIM is used), for an in-cluster "
        "runner of `pulumi destroy` or a clean-up job. Secrets: get/delete only on the ones the stack "
        "makes from `hfToken`/`ngcApiKey` (by name), list/watch on all Secrets of the namespace "
        "(pulumi-kubernetes' delete await needs them). It removes the models, not the namespace, "
        "the ServiceAccounts or its own Role.",
    )
    service_account_name: Annotated[str, AfterValidator(values.check_dns1123_label)] = Field(
        "llm-serving-teardown", description="Name of that ServiceAccount, its Role and RoleBinding."
    )


# Who may reach model pods besides the router when `platform.networkPolicy` is on: Prometheus
# and friends, in the namespace the kube-prometheus-stack chart uses by default.
MONITORING_NAMESPACE = {"kubernetes.io/metadata.name": "monitoring"}


class NetworkPeer(Strict):
    """Clients admitted to model pods besides the router: pods, namespaces, or pods of namespaces."""

    namespace_selector: Optional[dict[str, str]] = Field(
        None, description="Labels of the namespaces the clients run in (matchLabels); "
        "`kubernetes.io/metadata.name: <namespace>` names one. Unset: the stack's namespace.",
    )
    pod_selector: Optional[dict[str, str]] = Field(
        None, description="Labels of the client pods (matchLabels). Unset: every pod of the "
        "selected namespaces.",
    )

    @model_validator(mode="after")
    def _narrow(self) -> "NetworkPeer":
        if self.namespace_selector is None and self.pod_selector is None:
            raise values.Problems([("namespaceSelector", "a peer must select namespaces or pods; "
                                    "write e.g. {kubernetes.io/metadata.name: monitoring}")])
        if self.namespace_selector == {}:
            raise values.Problems([("namespaceSelector", "an empty selector admits every namespace "
                                    "of the cluster; name the namespace, e.g. "
                                    "{kubernetes.io/metadata.name: monitoring}")])
        if self.pod_selector == {} and self.namespace_selector is None:
            raise values.Problems([("podSelector", "an empty selector admits every pod of the "
                                    "namespace; give the client pods' labels")])
        return self


class NetworkPolicyConfig(Strict):
    """Ingress isolation of the model servers."""

    enabled: bool = Field(
        False, description="One NetworkPolicy per model: its server pods accept connections on the "
        "serving port only from the router's pods (`app.kubernetes.io/component: router`, this "
        "namespace) and from `allowFrom`. Off by default: a stack without a router has no other way "
        "in, turning it on cuts off clients that call a model's Service directly, and it needs a CNI "
        "that enforces NetworkPolicy (otherwise it is silently inert). Turn it on for stacks with a "
        "router.",
    )
    allow_from: tuple[NetworkPeer, ...] = Field(
        (NetworkPeer(namespace_selector=MONITORING_NAMESPACE),),
        description="Other clients of the model pods, e.g. the Prometheus that scrapes them. "
        "Default: the pods of namespace `monitoring`. `[]`: the router only.",
    )


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
    teardown_identity: TeardownIdentity = Field(
        default_factory=TeardownIdentity, description="Least-privilege identity for in-cluster teardown."
    )
    network_policy: NetworkPolicyConfig = Field(
        default_factory=NetworkPolicyConfig, description="Who may connect to the model servers."
    )
    hf_endpoint: HfEndpoint = Field(
        "https://huggingface.co",
        description="Hugging Face endpoint for the puller: the hub, or a mirror reachable from "
        "inside the cluster (never localhost).",
    )
    pin: bool = Field(
        True, description="Resolve each model's branch or tag to its commit at preview and download "
        "that commit, so a moving branch never changes a running model; when it moves, the next "
        "preview shows the re-pull (old → new commit). Per model: `pin`.",
    )
    preflight: Preflight = Field(default_factory=Preflight, description="Checks on the Hugging Face endpoint at preview.")


class ModelSource(Strict):
    repo: Annotated[str, AfterValidator(values.check_hf_repo)] = Field(
        description="Hugging Face repo id, `owner/name`."
    )
    revision: Annotated[str, AfterValidator(values.check_revision)] = Field(
        "main", description="Branch, tag or full 40-hex commit to download."
    )
    allow_patterns: Optional[tuple[str, ...]] = Field(
        None, description="Download only files matching one of these globs (`hf download "
        "--include`; `*` also matches `/`). Unset: every file not ignored. More than one pattern "
        "needs a puller image with huggingface_hub >= 1.0 (0.x keeps only the last `--include`).",
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


class NimCacheResources(Strict):
    cpu: PositiveQuantity = Field("1", description="CPU of the NIMCache Job (the operator uses it as request and limit).")
    memory: PositiveQuantity = Field("4Gi", description="Memory of the NIMCache Job (request and limit).")


class NimSettings(Strict):
    """NIM-only settings (`engine: nim`)."""

    auth_secret: Optional[Annotated[str, AfterValidator(values.check_dns1123_label)]] = Field(
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
    pull_secret: Optional[Annotated[str, AfterValidator(values.check_dns1123_label)]] = Field(
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
        problems.extend(self._nim_problems())
        problems.extend(self._identity_problems())
        if problems:
            raise values.Problems(problems)
        return self


    def _nim_problems(self) -> list[tuple[str, str]]:
        """Engine / path combinations and the credentials each path needs."""
        if self.engine != "nim":
            return [("nim", "NIM settings apply to engine 'nim' only; remove them")] if self.nim else []
        nim, problems = self.nim_settings, []
        if self.path == "raw":
            operator_only = ("cacheSource", "modelPuller", "pullSecret", "profiles", "cacheResources")
            for key in operator_only:
                if to_snake(key) in nim.model_fields_set:
                    hint = (" (raw-path pods take their pull secrets from platform.imagePullSecrets)"
                            if key == "pullSecret" else "")
                    problems.append((f"nim.{key}", "only used by path: operator (NIMCache); "
                                     f"remove it, or set path: operator{hint}"))
            return problems
        source = nim.cache_source or "ngc"
        if not nim.auth_secret:
            keys = "NGC_API_KEY" if source == "ngc" else "HF_TOKEN (and optionally NGC_API_KEY)"
            fix = ("set the stack secret llm-serving:ngcApiKey (`pulumi config set --secret "
                   "ngcApiKey <key>`), or create the Secret and name it here" if source == "ngc"
                   else "create it and name it here")
            problems.append(("nim.authSecret", f"the NIM operator needs a Secret with key {keys} "
                             f"for the NIMCache and NIMService; {fix}"))
        if source == "hf" and not nim.pull_secret:
            problems.append(("nim.pullSecret", "an hf cache source needs the image pull Secret of "
                             "its modelPuller (nvcr.io); name it here"))
        if source == "hf" and nim.profiles:
            problems.append(("nim.profiles", "profiles select NGC-optimized profiles; an hf cache "
                             "downloads the whole repo: remove them or use cacheSource: ngc"))
        if "all" in nim.profiles and len(nim.profiles) > 1:
            problems.append(("nim.profiles", "'all' caches every profile and must be the only entry"))
        if self.image and "@" in self.image and ":" not in self.image.split("@")[0].rsplit("/", 1)[-1]:
            problems.append(("image", "the NIM operator takes repository and tag; add a tag before "
                             "the digest (repo:tag@sha256:...)"))
        if self.lora.enabled:
            problems.append(("lora.enabled", "LoRA adapters are prepared by the raw path's init "
                             "container; the operator path does not support them: use path: raw"))
        if self.hf_token_secret:
            problems.append(("hfTokenSecret", "the operator path reads HF_TOKEN from nim.authSecret; "
                             "put the token there and remove hfTokenSecret"))
        return problems

    def _identity_problems(self) -> list[tuple[str, str]]:
        """uid/gid stay per engine: another engine's (or any other) identity must be explicit."""
        context = self.security_context
        if context is None:
            return []
        uid, gid = ENGINE_IDENTITY.get(self.engine, (None, None))
        problems: list[tuple[str, str]] = []
        if not context.allow_non_default_identity:
            for key, value, default in (("runAsUser", context.run_as_user, uid),
                                        ("runAsGroup", context.run_as_group, gid)):
                if value is None or value == default:
                    continue
                borrowed = [e for e, ident in ENGINE_IDENTITY.items()
                            if e != self.engine and ident[key == "runAsGroup"] == value]
                label = {"vllm": "vLLM", "nim": "NIM"}
                what = "uid" if key == "runAsUser" else "gid"
                whose = f"{label[borrowed[0]]}'s {what}, " if borrowed else ""
                problems.append((f"securityContext.{key}", (
                    f"{value} is {whose}not the {label[self.engine]} image's {what} "
                    f"({default}); an image without a passwd entry for it crashes "
                    "(`getpwuid(): uid not found`). Remove it, or set "
                    "securityContext.allowNonDefaultIdentity: true if the image has that user"
                )))
        elif context.run_as_user is None and context.run_as_group is None:
            problems.append(("securityContext.allowNonDefaultIdentity",
                             "nothing to allow: set runAsUser/runAsGroup, or remove it"))
        return problems


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


# Imported here, not at the top: the router section builds on Strict, Image and the other types above.
from .router import RouterConfig, stack_problems as router_stack_problems  # noqa: E402
from .pylon import pylon_stack_problems  # noqa: E402

# Stack secrets: Pulumi secret config values the program turns into Kubernetes Secrets (never
# into a manifest, an output or a log). The config model knows only that one is set.
SECRET_MARKER = "[secret]"
HF_TOKEN_SECRET = SecretKeyRef(name="llm-serving-hf-token", key="token")
NGC_API_KEY_SECRET = SecretKeyRef(name="llm-serving-ngc-api-key", key="NGC_API_KEY")


def _pulumi_secret(value: object, info: ValidationInfo) -> object:
    """``{secure: ...}`` (a stack file's encrypted value, or the program's stand-in for one) becomes
    the marker; a plain value is refused without being echoed."""
    key = to_camel(info.field_name or "")
    if value is None or value == SECRET_MARKER:
        return value
    if isinstance(value, dict) and set(value) == {"secure"} and isinstance(value["secure"], str):
        return SECRET_MARKER
    if isinstance(value, str):
        raise ValueError(
            "is stored in plain text in the stack config; remove it (`pulumi config rm "
            f"{key}`), revoke it if the file was ever shared, and set it as a secret: "
            f"`pulumi config set --secret {key} <value>`"
        )
    raise ValueError(f"must be a Pulumi secret string: `pulumi config set --secret {key} <value>`")


StackSecret = Annotated[Literal["[secret]"], BeforeValidator(_pulumi_secret)]
# The StackConfig sections typed StackSecret: the program reads them as secret Outputs only.
SECRET_SECTIONS = ("hfToken", "ngcApiKey")


def _present(raw: dict, *keys: str) -> bool:
    return any(raw.get(key) is not None for key in keys)


def _with_stack_secrets(raw: dict, hf_token: bool, ngc_api_key: bool) -> dict:
    """A raw model section with the stack's Secrets as its defaults (names only, never values)."""
    engine, nim = raw.get("engine", "vllm"), raw.get("nim")
    operator = engine == "nim" and raw.get("path") == "operator"
    raw = dict(raw)
    if hf_token and not operator and not _present(raw, "hfTokenSecret", "hf_token_secret"):
        raw["hfTokenSecret"] = HF_TOKEN_SECRET.model_dump()
    if ngc_api_key and engine == "nim" and isinstance(nim, (dict, type(None))):
        nim = dict(nim or {})
        hf_cache = (nim.get("cacheSource") or nim.get("cache_source")) == "hf"
        if not _present(nim, "authSecret", "auth_secret") and not (operator and hf_cache):
            raw["nim"] = {**nim, "authSecret": NGC_API_KEY_SECRET.name}
    return raw


class StackConfig(Strict):
    """Everything one stack declares."""

    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Target cluster.")
    platform: PlatformConfig = Field(default_factory=PlatformConfig, description="Platform defaults.")
    models: tuple[ModelConfig, ...] = Field((), description="Model servers of the stack.")
    router: Optional[RouterConfig] = Field(None, description="The request router in front of the models; unset: no router.")
    hf_token: Optional[StackSecret] = Field(
        None, description="Hugging Face token, as a Pulumi secret only (`pulumi config set --secret "
        "hfToken <token>`; a plain value is refused). The stack creates the Secret "
        "`llm-serving-hf-token` (key `token`) from it, which pullers of models without "
        "`hfTokenSecret` read. Never written to a manifest, an output or a log; `render` omits the "
        "Secret (create it in the cluster yourself).",
    )
    ngc_api_key: Optional[StackSecret] = Field(
        None, description="NVIDIA NGC API key, as a Pulumi secret only (`pulumi config set --secret "
        "ngcApiKey <key>`). The stack creates the Secret `llm-serving-ngc-api-key` (key "
        "`NGC_API_KEY`) from it for NIM models without `nim.authSecret`. `render` omits the Secret.",
    )

    @model_validator(mode="before")
    @classmethod
    def _stack_secrets_as_defaults(cls, data: object) -> object:
        if not isinstance(data, dict) or not isinstance(data.get("models"), (list, tuple)):
            return data
        hf_token, ngc_api_key = _present(data, "hfToken", "hf_token"), _present(data, "ngcApiKey", "ngc_api_key")
        if not (hf_token or ngc_api_key):
            return data
        models = [_with_stack_secrets(m, hf_token, ngc_api_key) if isinstance(m, dict) else m
                  for m in data["models"]]
        return {**data, "models": models}

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
        if self.router is not None:
            problems.extend(router_stack_problems(
                self.router, self.platform.namespace, [model.name for model in self.models]))
            problems.extend(pylon_stack_problems(self))
        policy = self.platform.network_policy
        if policy.enabled and self.router is None and "allow_from" not in policy.model_fields_set:
            problems.append((
                "platform.networkPolicy.enabled",
                "the policy admits model traffic from the router and allowFrom only, and this stack "
                "has no router: only the monitoring namespace could reach the models. Add "
                "llm-serving:router, or list the clients of the models under "
                "platform.networkPolicy.allowFrom",
            ))
        if problems:
            raise values.Problems(problems)
        return self

    def shm_limit(self, model: ModelConfig) -> str:
        return model.shared_memory_size_limit or self.platform.shared_memory_size_limit
