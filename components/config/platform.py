"""The `llm-serving:platform` and `llm-serving:cluster` sections: defaults every model gets, and
the cluster the stack deploys to."""

from __future__ import annotations

from typing import Literal, Optional
from urllib.parse import urlparse

from pydantic import Field, field_validator, model_validator

from . import kube, values
from .autoscaling import AutoscalingPlatform
from .disruption import DisruptionConfig
from .metrics import MetricsConfig
from .types import (
    GPU_TOLERATIONS,
    Dns1123Label,
    HfEndpoint,
    Image,
    NonRootUid,
    PositiveQuantity,
    Strict,
    Toleration,
)
from .values import Problem
from .vllm_release import DEFAULT_RELEASE, RELEASES, VllmRelease, image_version, minor, resolve

VLLM_IMAGE = RELEASES[DEFAULT_RELEASE].image


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
    service_account_name: Dns1123Label = Field(
        "llm-serving-teardown", description="Name of that ServiceAccount, its Role and RoleBinding; "
        "must differ from `platform.serviceAccountName`."
    )


# Who may reach model pods besides the router when `platform.networkPolicy` is on: Prometheus
# and friends, in the namespace the kube-prometheus-stack chart uses by default.
MONITORING_NAMESPACE = {"kubernetes.io/metadata.name": "monitoring"}


class NetworkPeer(Strict):
    """Clients admitted to model pods besides the router: pods, namespaces, or pods of namespaces."""

    namespace_selector: Optional[kube.Labels] = Field(
        None, description="Labels of the namespaces the clients run in (matchLabels); "
        "`kubernetes.io/metadata.name: <namespace>` names one. Unset: the stack's namespace.",
    )
    pod_selector: Optional[kube.Labels] = Field(
        None, description="Labels of the client pods (matchLabels). Unset: every pod of the "
        "selected namespaces.",
    )

    @model_validator(mode="after")
    def _narrow(self) -> NetworkPeer:
        if self.namespace_selector is None and self.pod_selector is None:
            raise values.Problems([Problem("namespaceSelector", "a peer must select namespaces or pods; "
                                           "write e.g. {kubernetes.io/metadata.name: monitoring}")])
        if self.namespace_selector == {}:
            raise values.Problems([Problem("namespaceSelector", "an empty selector admits every namespace "
                                           "of the cluster; name the namespace, e.g. "
                                           "{kubernetes.io/metadata.name: monitoring}")])
        if self.pod_selector == {} and self.namespace_selector is None:
            raise values.Problems([Problem("podSelector", "an empty selector admits every pod of the "
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

    namespace: Dns1123Label = Field(
        "llm-serving", description="Namespace every object of the stack is created in. Not "
        "`kube-system`, `kube-public` or `kube-node-lease`; `default` only with "
        "`createNamespace: false` (the stack labels a namespace it creates with Pod Security "
        "`restricted`, or `baseline` with `restricted` as warn/audit when a model is on the NIM operator "
        "path, whose pods `restricted` refuses).",
    )
    create_namespace: bool = Field(
        True, description="Create the namespace (false when the cluster admins own it)."
    )
    vllm_image: Image = Field(
        VLLM_IMAGE, description="vLLM server image, fully qualified and pinned. Unset: the image of "
        "`vllmRelease` (`docker.io/vllm/vllm-openai:v<version>`).",
    )
    vllm_release: Optional[VllmRelease] = Field(
        None, description="The vLLM release line the servers run (`0.11` or `0.32`), which decides the "
        "flags, env names and LoRA ranks `validate` checks `args`, `env` and `lora` against (each "
        "line's facts come from its wheel's own parser). Unset: the line `vllmImage`'s tag names "
        "(a `vllm…` image tagged `v0.11.0` or `v0.32.0`), else `0.11`, the line every stack ran "
        "before this setting. New stacks: `0.32` (docs/09-upgrading.md says what moving a deployed "
        "stack rolls). Per model: `vllmRelease`.",
    )
    vllm_cpu_image: Optional[Image] = Field(
        None, description="vLLM CPU server image of CPU models (`gpus: 0`), fully qualified and pinned, of "
        "the platform's release line. Unset: the line's upstream CPU image (`0.11`: "
        f"`{RELEASES['0.11'].cpu_image}`, `0.32`: `{RELEASES['0.32'].cpu_image}`).",
    )
    puller_image: Image = Field(
        VLLM_IMAGE,
        description="Weight-puller image; must ship the `hf` CLI of huggingface_hub and `python3` "
        "(the verify step hashes the download with it). The vLLM "
        "image does, and it is already on the node for the server. Unset, a CPU model's puller and "
        "LoRA init container run a CPU image, which ships it too: `vllmCpuImage` when set, else "
        f"`{RELEASES[DEFAULT_RELEASE].cpu_image}` (fixed, as this default is: a line move re-pulls nothing).",
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
    service_account_name: Dns1123Label = Field(
        "llm-serving-model",
        description="ServiceAccount of serving and puller pods; created with no permissions "
        "and no mounted token.",
    )
    shared_memory_size_limit: PositiveQuantity = Field(
        "16Gi", description="Size limit of the in-memory /dev/shm volume (tensor parallel needs it). Left "
        "unset here and on the model: 16Gi, or half the model's `resources.memory` when that is less than 16Gi "
        "(/dev/shm counts against the container's memory)."
    )
    pending_timeout_seconds: int = Field(
        900, gt=0, description="How long a pod may stay Pending before the status reports ERROR."
    )
    restart_threshold: int = Field(
        3, ge=1, description="Restarts a server container may make for a cause that can pass (a crash "
        "with no known cause, NCCL) before `pulumi up` fails with the reason. Definitive causes (OOMKilled, "
        "the uid crash, missing weights, an image that does not exist) fail at once.",
    )
    pull_timeout_seconds: int = Field(
        7200, gt=0, description="Deadline of the weight download (the puller Job's activeDeadlineSeconds)."
    )
    startup_timeout_seconds: int = Field(
        1800, ge=60, description="Budget for a server to load weights before its startup probe gives up."
    )
    storage_class_name: Optional[kube.DnsSubdomain] = Field(
        None, description="StorageClass of weight volumes; unset uses the cluster default."
    )
    image_pull_secrets: tuple[Dns1123Label, ...] = Field(
        (), description="Names of image pull Secrets attached to every pod."
    )
    gpu_node_selector: kube.Labels = Field(
        default_factory=dict, description="Node selector that places serving pods on GPU nodes (not "
        "CPU models' pods, `gpus: 0`: theirs is the model's `nodeSelector`)."
    )
    gpu_tolerations: tuple[Toleration, ...] = Field(
        GPU_TOLERATIONS, description="Tolerations of serving pods for GPU-node taints (not CPU models' "
        "pods, `gpus: 0`: theirs are the model's `tolerations`)."
    )
    teardown_identity: TeardownIdentity = Field(
        default_factory=TeardownIdentity, description="Least-privilege identity for in-cluster teardown."
    )
    network_policy: NetworkPolicyConfig = Field(
        default_factory=NetworkPolicyConfig, description="Who may connect to the model servers."
    )
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="Prometheus scraping and the Grafana dashboard.")
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
    disruption: DisruptionConfig = Field(
        default_factory=DisruptionConfig, description="How model server pods drain and spread "
        "(PodDisruptionBudget, preStop wait, grace period, topology spread). Per model: `disruption`.",
    )
    autoscaling: AutoscalingPlatform = Field(
        default_factory=AutoscalingPlatform, description="Where KEDA reads autoscaled models' queue depth.")

    @model_validator(mode="before")
    @classmethod
    def _line_image(cls, data: object) -> object:
        """A release line set without an image picks the line's own image."""
        if isinstance(data, dict):
            release = data.get("vllmRelease", data.get("vllm_release"))
            if release in RELEASES and "vllmImage" not in data and "vllm_image" not in data:
                return {**data, "vllmImage": RELEASES[release].image}
        return data

    @model_validator(mode="after")
    def _ownership(self) -> PlatformConfig:
        problems = namespace_problems(self.namespace, self.create_namespace)
        _, release_problem = resolve(self.vllm_release, self.vllm_image)
        if release_problem is not None:
            problems.append(Problem("vllmRelease" if self.vllm_release else "vllmImage", release_problem))
        else:
            problems.extend(cpu_image_problems(self))
        teardown = self.teardown_identity
        if teardown.enabled and teardown.service_account_name == self.service_account_name:
            # Two ServiceAccounts of one name are one object: the serving pods would run with the
            # teardown Role's delete rights.
            problems.append(Problem(
                "teardownIdentity.serviceAccountName",
                f"'{teardown.service_account_name}' is also platform.serviceAccountName, the serving "
                "pods' account: they would get the teardown Role's delete rights. Give the teardown "
                "identity its own name (default 'llm-serving-teardown')",
            ))
        if self.metrics.enabled and self.network_policy.enabled and not self.network_policy.allow_from:
            # The engines serve their metrics on the serving port, which the policy opens to the
            # router and allowFrom only: with no peer, Prometheus could never scrape a model.
            problems.append(Problem(
                "networkPolicy.allowFrom",
                "is empty (router only), so with metrics.enabled no Prometheus can scrape the models; "
                "list the Prometheus pods' namespace, e.g. [{namespaceSelector: "
                "{kubernetes.io/metadata.name: monitoring}}], or set metrics.enabled: false",
            ))
        if problems:
            raise values.Problems(problems)
        return self


# Namespaces Kubernetes itself runs in: a stack must never label them or fill them with models.
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def namespace_problems(namespace: str, create_namespace: bool) -> list[Problem]:
    """The stack labels the namespace it creates with Pod Security `restricted`; it may only do
    that to a namespace it owns."""
    if namespace in SYSTEM_NAMESPACES:
        return [Problem("namespace", f"'{namespace}' belongs to Kubernetes itself; deploy into a namespace "
                        "of your own, e.g. 'llm-serving'")]
    if namespace == "default" and create_namespace:
        return [Problem("namespace", "'default' exists in every cluster and is not this stack's to "
                        "relabel (createNamespace would set its Pod Security level); use a namespace of "
                        "your own, e.g. 'llm-serving', or set createNamespace: false to deploy into it "
                        "as it is")]
    return []


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


def cpu_image(platform: PlatformConfig) -> str:
    """The CPU server image: ``platform.vllmCpuImage``, else the upstream CPU image of the
    platform's release line."""
    return platform.vllm_cpu_image or RELEASES[platform_line(platform)].cpu_image


def platform_line(platform: PlatformConfig) -> str:
    line, _ = resolve(platform.vllm_release, platform.vllm_image)
    return line or DEFAULT_RELEASE


def cpu_image_problems(platform: PlatformConfig) -> list[Problem]:
    """``vllmCpuImage`` runs the platform's line (what its models' args are checked against)."""
    image = platform.vllm_cpu_image
    version = image_version(image) if image else None
    line = platform_line(platform)
    if version is None or minor(version) == line:
        return []
    whose = f"vllmRelease '{platform.vllm_release}'" if platform.vllm_release else f"vllmImage {platform.vllm_image}"
    return [Problem("vllmCpuImage", f"{image} is vLLM {version}, but the platform's release line is {line} "
                    f"({whose}), whose flags the CPU models are checked against: use a CPU image of vLLM {line} "
                    f"(e.g. {RELEASES[line].cpu_image}), or set vllmRelease to the image's line")]
