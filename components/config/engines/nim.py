"""NVIDIA NIM (`engine: nim`): a per-model NIM image, on one of two paths (`path`): `raw`, the
objects vLLM gets (weights volume, puller, Deployment, Service) with NIM's image, environment,
health path and uid/gid; `operator`, a NIMCache and a NIMService for the k8s-nim-operator. Its
server is ``components/compile/engines/nim.py``, the operator's resources
``components/compile/nim.py``.

What NIM ignores is refused (``no_effect_problems``; config/effect.py says why a setting without
effect is refused). Each of a model's settings was walked per path against what the compilers
render (``components/compile``); where a setting is refused elsewhere, the table says where:

    setting                         vllm      nim raw                 nim operator
    lora.enabled (+ adapters)       used      refused here (1)        refused here (1)
    tensorParallelSize              used      refused here (2)        used for ngc without profiles
                                                                      and by multiNode; refused here
                                                                      otherwise (3)
    disruption.drainSeconds         used      used                    refused here (4)
    source.allowPatterns/ignore…    used      used                    refused here (5)
    hfEndpoint                      used      used                    hf cache only; refused on ngc (5)

(1) NIM serves adapters from the directory named by NIM_PEFT_SOURCE, and only with a LoRA-capable
    profile (NIM for LLMs docs, "Fine-Tuning with LoRA" / "Parameter-Efficient Fine-Tuning"); the
    compiler would download them where NIM never looks.
(2) The raw path passes no parallelism to NIM: NIM picks a profile for the GPUs it sees.
(3) An explicit `nim.profiles` list excludes every other selector (the operator's webhook); an hf
    cache downloads the repo as it is.
(4) NIMService has no lifecycle or terminationGracePeriodSeconds to carry the drain wait
    (components/compile/nim.py compile_pod_disruption_budget).
(5) The NIMCache's hf source has no file patterns; its ngc source downloads from NGC.

Paths in problems are relative to the model.
"""

from __future__ import annotations

from typing import Optional

from pydantic.alias_generators import to_snake

from .. import stack_secrets
from ..effect import unused_keys
from ..multinode import NIM_JSONL_LOGGING, NIM_MULTINODE_ENV
from ..values import Problem
from .base import SERVER_PORT, Engine, Model


class Nim(Engine):
    name = "nim"
    label = "NIM"
    health_path = "/v1/health/ready"
    identity = (1000, 2000)  # the NIM images' user
    identity_keys = ("nim_uid", "nim_gid")
    managed_env = {
        "NIM_CACHE_PATH": "NIM's writable cache (an emptyDir beside the read-only weights); remove it",
        "NIM_SERVER_PORT": f"the probes and the Service use {SERVER_PORT}; remove it",
        "NIM_HTTP_API_PORT": f"the probes and the Service use {SERVER_PORT}; remove it",
        "NIM_MODEL_NAME": "the weights volume; set source.repo",
        "NIM_SERVED_MODEL_NAME": "the model is served under its name; set name",
        "NGC_API_KEY": "set nim.authSecret (or the stack secret llm-serving:ngcApiKey)",
    }
    serves_lora = False  # refused in no_effect_problems
    cpu_refusal = "NIM images serve on GPUs only; set gpus to at least 1, or serve the model on CPU with engine: vllm"
    stream_refusal = ("stream is vLLM's loader (--load-format runai_streamer); NIM reads its weights from a volume: "
                      "use load: copy")
    revision_refusal = ("vLLM models only (a NIM's revision is its image, which its operator or its profile cache "
                        "pins); deploy the new NIM as another model")

    def resolve_path(self, path: Optional[str]) -> Optional[str]:
        return path or "raw"

    def settings_problems(self, model: Model) -> list[Problem]:
        """The image NIM needs, and the paths' settings and credentials."""
        problems = []
        if not model.image:
            problems.append(Problem(
                "image",
                "NIM images are per model; set the NIM image, e.g. "
                "'nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3'",
            ))
        if model.vllm_release is not None:
            problems.append(Problem("vllmRelease", "applies to vLLM models only (NIM images bring their own "
                                    "server); remove it"))
        nim = model.nim_settings
        if model.path == "raw":
            operator_only = ("cacheSource", "modelPuller", "pullSecret", "profiles", "cacheResources")
            for key in operator_only:
                if to_snake(key) in nim.model_fields_set:
                    hint = (" (raw-path pods take their pull secrets from platform.imagePullSecrets)"
                            if key == "pullSecret" else "")
                    problems.append(Problem(f"nim.{key}", "only used by path: operator (NIMCache); "
                                            f"remove it, or set path: operator{hint}"))
            return problems
        source = nim.cache_source or "ngc"
        if source == "hf" and not nim.pull_secret:
            problems.append(Problem("nim.pullSecret", "an hf cache source needs the image pull Secret of "
                                    "its modelPuller (nvcr.io); name it here"))
        if source == "hf" and nim.profiles:
            problems.append(Problem("nim.profiles", "profiles select NGC-optimized profiles; an hf cache "
                                    "downloads the whole repo: remove them or use cacheSource: ngc"))
        if "all" in nim.profiles and len(nim.profiles) > 1:
            problems.append(Problem("nim.profiles", "'all' caches every profile and must be the only entry"))
        if model.image and "@" in model.image and ":" not in model.image.split("@")[0].rsplit("/", 1)[-1]:
            problems.append(Problem("image", "the NIM operator takes repository and tag; add a tag before "
                                    "the digest (repo:tag@sha256:...)"))
        if model.hf_token_secret:
            problems.append(Problem("hfTokenSecret", "the operator path reads HF_TOKEN from nim.authSecret; "
                                    "put the token there and remove hfTokenSecret"))
        return problems

    def autoscaling_problems(self, model: Model) -> Optional[list[Problem]]:
        if model.on_operator and model.multi_node is not None:
            return []  # the operator's own rule against multiNode with scale (multinode_problems) says it
        if model.on_operator:
            # k8s-nim-operator: NIMService `spec.scale` renders the operator's own HPA, whose metrics
            # are autoscaling/v2 MetricSpecs read from the metrics APIs (a queue depth there needs
            # prometheus-adapter rules). NIMService has no scale subresource for a ScaledObject to
            # target (only `+kubebuilder:subresource:status` in NVIDIA/k8s-nim-operator
            # api/apps/v1alpha1/nimservice_types.go), and the operator owns its Deployment's replicas.
            return [Problem("autoscaling.enabled", "the NIM operator path scales through the NIMService's own HPA "
                            "(spec.scale), which cannot read a Prometheus queue depth without prometheus-adapter, and "
                            "a KEDA ScaledObject cannot target a NIMService; use path: raw with engine vllm, or "
                            "replicas")]
        # NIM LLM documents `num_requests_waiting` on /v1/metrics (docs.nvidia.com/nim/large-language-
        # models/latest/observability.html) but not the label that names the model, so the query
        # could not be scoped to one model's pods the way vLLM's `model_name` scopes it.
        return [Problem("autoscaling.enabled", "queue-depth autoscaling reads vLLM's vllm:num_requests_waiting "
                        "(label model_name); NIM's queue metric has no documented model label to scope it to this "
                        "model. Use engine: vllm, or set replicas")]

    def multinode_refusal(self, model: Model) -> list[Problem]:
        if model.on_operator:
            return []
        # The NIM container's multi-node contract (NIM_LEADER_ROLE / NIM_NODE_RANK, the MPI ssh
        # keys and start script, or `nim-serve-ray`) is the operator's to render; copying it here
        # would duplicate the operator and drift with each NIM release.
        return [Problem("multiNode", "multi-node NIM is rendered by the NIM operator (NIMService multiNode: it "
                        "starts the group's Ray or MPI cluster and sets each pod's rank); the raw path does not "
                        "render that: set path: operator (and nim.authSecret), or remove multiNode")]

    def multinode_problems(self, model: Model) -> list[Problem]:
        """The NIM operator's multi-node contract (k8s-nim-operator v3.1.2): the LeaderWorkerSet's size is
        ``parallelism.pipeline`` (one stage per pod), ``parallelism.tensor`` is each pod's GPU count
        (its ``GPUS_PER_NODE``), every pod gets the NIMService's resources, and the LWS template runs its
        own container arguments (the NIMService's ``args`` are not in it)."""
        spec, problems = model.multi_node, []
        if spec.mode == "dataParallel":
            problems.append(Problem("multiNode.mode", "the NIM operator starts a group over Ray (NIM for LLMs 2.x and "
                                    "later) or MPI (NIM 1.x TensorRT-LLM images); set multiNode.mode: ray or mpi"))
        if spec.expert_parallel:
            problems.append(Problem("multiNode.expertParallel", "the NIM operator has no expert-parallel setting (NIM "
                                    "picks it from its profile); remove it"))
        if spec.pipeline_parallel_size is not None and spec.pipeline_parallel_size != spec.nodes:
            problems.append(Problem("multiNode.pipelineParallelSize", f"the NIM operator runs one pipeline stage per "
                                    f"pod (parallelism.pipeline is the group's size): {spec.pipeline_parallel_size} "
                                    f"stages need {spec.pipeline_parallel_size} nodes, not {spec.nodes}; set it to "
                                    f"{spec.nodes}, or remove it"))
        if model.tensor_parallel_size != model.gpus:
            problems.append(Problem("tensorParallelSize", f"the NIM operator runs tensor parallel across each pod's GPUs "
                                    f"(parallelism.tensor is its GPUs per node): tensorParallelSize "
                                    f"{model.tensor_parallel_size} × {spec.nodes} nodes would not use the group's "
                                    f"{spec.nodes} × {model.gpus} GPUs; set tensorParallelSize: {model.gpus}"))
        if model.args:
            problems.append(Problem("args", "the NIM operator's LeaderWorkerSet runs its own container arguments and "
                                    "leaves the NIMService's args out (k8s-nim-operator v3.1.2); pass NIM settings as env, "
                                    "or remove args"))
        managed = NIM_MULTINODE_ENV + ((NIM_JSONL_LOGGING,) if spec.ray else ())
        for name in sorted(n for n in model.env if n in managed):
            why = ("set to 0 in ray mode: NIM has no JSON log formatter on Ray workers" if name == NIM_JSONL_LOGGING
                   else "set by the NIM operator on every pod of a multi-node group (rank, sizes, launcher)")
            problems.append(Problem(f"env.{name}", f"{why}; remove it"))
        return problems

    def no_effect_problems(self, model: Model) -> list[Problem]:
        """The table above, each refused with what to use instead."""
        problems: list[Problem] = []
        if model.lora.enabled:
            problems.append(Problem("lora.enabled", (
                "NIM serves LoRA adapters from the directory named by NIM_PEFT_SOURCE and only with a "
                "LoRA-capable profile of its image, which this program does not configure: the adapters "
                "would be downloaded where NIM never looks. Use engine: vllm for adapters, or remove lora")))
        tensor_parallel_set = "tensor_parallel_size" in model.model_fields_set
        if tensor_parallel_set and not model.on_operator:
            problems.append(Problem("tensorParallelSize", (
                "the NIM raw path passes no parallelism to NIM, which picks a profile for the GPUs it "
                "sees; remove it and set gpus (to pin a profile, set env NIM_MODEL_PROFILE)")))
        if not model.on_operator:
            return problems
        nim = model.nim_settings
        source = nim.cache_source or "ngc"
        # multiNode: tensorParallelSize is the NIMService's parallelism.tensor, whatever the cache.
        if tensor_parallel_set and (source == "hf" or nim.profiles) and model.multi_node is None:
            reason = ("an hf cache downloads the repo as it is" if source == "hf"
                      else "nim.profiles names the profiles to cache, which excludes every other selector")
            problems.append(Problem("tensorParallelSize", f"has no effect on this NIMCache: {reason}; remove it"))
        if model.disruption is not None and model.disruption.drain_seconds is not None:
            problems.append(Problem("disruption.drainSeconds", (
                "the NIM operator path renders no drain wait: a NIMService has no lifecycle hook or "
                "terminationGracePeriodSeconds to carry it; remove it, or use path: raw")))
        problems += unused_keys(model.source, ("allow_patterns", "ignore_patterns"), "source.",
                                "the NIMCache downloads without file patterns; remove it, or use path: raw")
        if source == "ngc" and model.hf_endpoint is not None:
            problems.append(Problem("hfEndpoint", "an ngc cache downloads from NGC, never from a Hugging Face "
                             "endpoint; remove it, or set nim.cacheSource: hf"))
        return problems

    def auth_secret_problems(self, model: Model) -> list[Problem]:
        """The operator path needs nim.authSecret: checked on the model with the stack's secret
        defaults in place (a stack ngcApiKey fills it), so the stack asks for it."""
        nim = model.nim_settings
        if not model.on_operator or nim.auth_secret:
            return []
        source = nim.cache_source or "ngc"
        keys = "NGC_API_KEY" if source == "ngc" else "HF_TOKEN (and optionally NGC_API_KEY)"
        fix = ("set the stack secret llm-serving:ngcApiKey (`pulumi config set --secret "
               "ngcApiKey <key>`), or create the Secret and name it here" if source == "ngc"
               else "create it and name it here")
        return [Problem("nim.authSecret", f"the NIM operator needs a Secret with key {keys} "
                        f"for the NIMCache and NIMService; {fix}")]

    def ngc_api_key_default(self, model: Model) -> Optional[dict]:
        nim = model.nim_settings
        if nim.auth_secret:
            return None
        if model.on_operator and nim.cache_source == "hf":
            return None  # an hf cache needs HF_TOKEN in the same Secret: the user's own Secret
        return {"nim": nim.model_copy(update={"auth_secret": stack_secrets.NGC_API_KEY_SECRET.name})}

    def reads_ngc_api_key(self, model: Model) -> bool:
        return model.nim_settings.auth_secret == stack_secrets.NGC_API_KEY_SECRET.name


NIM = Nim()
