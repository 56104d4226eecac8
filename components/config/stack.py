"""The stack: every section of a stack file, and the checks that need more than one of them.

``StackConfig`` is the aggregate on top of the sections (``cluster`` and ``platform`` in
``platform.py``, ``models`` in ``model.py``, ``router`` in ``router.py`` with its pylon in
``pylon.py``, the stack secrets). A section validates what it holds alone and never imports this
module at runtime; every check that reads two sections lives here: the router's models and
names against the models (``router_problems``), the pylon against the models it fronts
(``pylon_problems``), autoscaling against platform metrics (``metrics_problems``), shared memory
against the model's memory, the NIM credentials against the stack secrets, and the network
policy against the router. Paths are relative to the stack.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Optional

from pydantic import Field, model_validator

from . import secret_values, stack_secrets, values, vllm_checks
from .autoscaling import AutoscalingPlatform
from .engines import engine_of
from .gateway import GatewayConfig, admitted_models, gateway_problems
from .model import (
    ModelConfig,
    changes,
    may_sleep,
    next_name,
    reads_stack_secret,
    revision_model,
    with_secret_defaults,
)
from .platform import ClusterConfig, PlatformConfig, cpu_image
from .router import RouterConfig
from .router_lb import lb_model_problems
from .router_names import added_dns_names, allowed_domains, backend_name, headless_name, tls_secret_name, within
from .types import StackSecret, Strict
from .values import Problem
from .vllm_release import RELEASES, image_version, line_of_version


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
    def _no_credential_values(cls, data: object) -> object:
        """Before any other check, so no other message can repeat a pasted credential."""
        if isinstance(data, dict):
            found = secret_values.problems(data, skip=stack_secrets.SECRET_SECTIONS)
            if found:
                raise values.Problems(found)
        return data

    @model_validator(mode="after")
    def _cross_field(self) -> StackConfig:
        seen: set[str] = set()
        problems: list[Problem] = []
        for index, model in enumerate(self.with_secret_defaults().models):
            if model.name in seen:
                problems.append(Problem(f"models.{index}.name", f"'{model.name}' is declared twice; model names must be unique"))
            seen.add(model.name)
            problems.extend(problem.under(f"models.{index}") for problem in engine_of(model).auth_secret_problems(model))
            problems.extend(self._shm_problems(index, model))
            problems.extend(p.under(f"models.{index}") for p in vllm_checks.model_problems(model, self.platform))
            problems.extend(p.under(f"models.{index}") for p in cpu_stream_problems(model, self.platform))
            problems.extend(p.under(f"models.{index}") for p in next_revision_line_problems(model, self.platform))
        problems.extend(served_name_problems(
            self.models, {next_name(model): model.name for model in self.models if model.next is not None}))
        problems.extend(metrics_problems(
            [(index, model.name) for index, model in enumerate(self.models) if model.autoscaling.enabled],
            self.platform.metrics.enabled, self.platform.autoscaling))
        problems.extend(sleep_problems(self))
        problems.extend(split_problems(self))
        if self.router is not None:
            problems.extend(router_problems(
                self.router, self.platform.namespace, [model.name for model in self.models]))
            problems.extend(pylon_problems(self))
        policy = self.platform.network_policy
        if policy.enabled and self.router is None and "allow_from" not in policy.model_fields_set:
            problems.append(Problem(
                "platform.networkPolicy.enabled",
                "the policy admits model traffic from the router and allowFrom only, and this stack "
                "has no router: only the monitoring namespace could reach the models. Add "
                "llm-serving:router, or list the clients of the models under "
                "platform.networkPolicy.allowFrom",
            ))
        if problems:
            raise values.Problems(problems)
        return self

    def _shm_problems(self, index: int, model: ModelConfig) -> list[Problem]:
        """Named at the key the user set: the model's own limit, or the platform default it inherits."""
        if model.shared_memory_size_limit is not None:
            where, whose = f"models.{index}.sharedMemorySizeLimit", ""
        else:
            where = "platform.sharedMemorySizeLimit"
            whose = f" (model '{model.name}' inherits it; or set models.{index}.sharedMemorySizeLimit)"
        limit = self.shm_limit(model)
        shm, problems = values.parse_quantity(limit), []
        if model.tensor_parallel_size > 1 and shm < values.parse_quantity("1Gi"):
            problems.append(Problem(where, f"{limit}: tensor parallel {model.tensor_parallel_size} of model "
                                    f"'{model.name}' exchanges tensors through /dev/shm; set at least 1Gi{whose}"))
        if shm > values.parse_quantity(model.resources.memory):
            problems.append(Problem(where, f"{limit} exceeds the container's memory "
                                    f"({model.resources.memory}, models.{index}.resources.memory); /dev/shm is "
                                    f"counted against it, so lower the limit or raise resources.memory{whose}"))
        return problems

    def shm_limit(self, model: ModelConfig) -> str:
        """The model's own limit, else the platform's. Left at its default (16Gi) by both, and more
        than the container's memory (which /dev/shm counts against): half that memory, since a
        default that refuses every model under 16Gi (the docs' 8Gi one) is a trap, not a choice;
        a model of 16Gi or more keeps the 16Gi it always had."""
        if model.shared_memory_size_limit is not None:
            return model.shared_memory_size_limit
        limit = self.platform.shared_memory_size_limit
        memory = values.parse_quantity(model.resources.memory)
        if "shared_memory_size_limit" in self.platform.model_fields_set or values.parse_quantity(limit) <= memory:
            return limit
        return _quantity(memory / 2)

    def with_secret_defaults(self) -> StackConfig:
        """The stack with every model reading the stack secrets it uses and names no Secret for
        (see stack_secrets.py). ``load_stack_config`` returns stacks resolved this way."""
        specs = configured(self)
        if not specs:
            return self
        models = tuple(with_secret_defaults(model, specs) for model in self.models)
        return self.model_copy(update={"models": models})


def _quantity(amount) -> str:
    """Bytes as the largest binary unit that states them exactly (Kubernetes quantity syntax)."""
    whole = int(amount)
    for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if whole and whole % size == 0:
            return f"{whole // size}{unit}"
    return str(whole)


def fronted_models(router: RouterConfig, model_names: Iterable[str]) -> tuple[str, ...]:
    """The models behind the router, in stack order (every model unless ``models`` narrows it)."""
    names = tuple(model_names)
    if router.models is None:
        return names
    wanted = set(router.models)
    return tuple(name for name in names if name in wanted)


def router_problems(router: RouterConfig, namespace: str, model_names: Iterable[str]) -> list[Problem]:
    """Checks that need the rest of the stack; paths are relative to the stack."""
    names = list(model_names)
    problems: list[Problem] = []
    if router.models is not None:
        seen: set[str] = set()
        for index, name in enumerate(router.models):
            if name not in names:
                problems.append(Problem(
                    f"router.models.{index}",
                    f"'{name}' is not a model of this stack; declare it under models, or remove it "
                    f"(models: {', '.join(names) or 'none'})",
                ))
            elif name in seen:
                problems.append(Problem(f"router.models.{index}", f"'{name}' is listed twice; remove one"))
            seen.add(name)
    if not fronted_models(router, names) and not problems:
        problems.append(Problem(
            "router.models" if router.models is not None else "router",
            "the router fronts no models; declare models, or remove the router section",
        ))
    problems += [p.under("router") for p in lb_model_problems(router.load_balancer, fronted_models(router, names))]
    gateway = router.gateway
    if gateway.enabled:
        problems += [p.under("router.gateway") for p in gateway_problems(gateway, fronted_models(router, names))]
        requiring = sorted(name for name, choice in (router.load_balancer.models if router.load_balancer else {}).items()
                           if not isinstance(choice, str) and choice.require_cache_affinity_key)
        if requiring and not gateway.affinity.enabled:
            problems.append(Problem("router.gateway.affinity.enabled", "the load balancer requires "
                                    f"x-cache-affinity-key for {', '.join(requiring)} (requireCacheAffinityKey), "
                                    "which the gateway then never sends: every request would get 400; enable "
                                    "affinity, or drop requireCacheAffinityKey"))
        if gateway.tls.issued:
            problems += gateway_tls_problems(gateway, router.name, namespace)
        if gateway.tls.enabled and gateway.tls_secret(router.name) == tls_secret_name(router):
            # One Secret, two owners: the two Certificates would overwrite each other's key.
            problems.append(Problem("router.gateway.tls", f"the gateway's TLS Secret '{tls_secret_name(router)}' is "
                                    "also the router's (router.tls); set router.gateway.tls.secretName (or "
                                    "existingSecret) to another name"))
        if gateway.resolved_name(router.name) in (router.name, headless_name(router), backend_name(router)):
            problems.append(Problem("router.gateway.name", f"'{gateway.resolved_name(router.name)}' is already "
                                    "a name of the router's objects; choose another, or remove it"))
    derived = router_object_names(router)
    for index, name in enumerate(names):
        if name in derived:
            problems.append(Problem(
                "router.name",
                f"'{router.name}' collides with model '{name}' (models.{index}): their Services "
                "would share a name; rename the router",
            ))
    if router.tls.issued:
        allowed = allowed_domains(router, namespace)
        where = ", ".join(allowed)
        for index, name in enumerate(router.tls.dns_names):
            if not any(within(name, domain) for domain in allowed):
                problems.append(Problem(
                    f"router.tls.dnsNames.{index}",
                    f"'{name}' is outside the allowed domains ({where}); add its domain "
                    "to router.tls.allowedDomains, or remove the name",
                ))
        for name in added_dns_names(router, namespace):
            if not any(within(name, domain) for domain in allowed):
                problems.append(Problem(
                    "router.tls.allowedDomains",
                    f"the router's certificate gets '{name}' by default (the name pylons verify, or "
                    f"the Service's in-cluster name) and it is outside the allowed domains ({where}); "
                    f"add '{namespace}.svc.cluster.local' to router.tls.allowedDomains",
                ))
    return problems


def router_object_names(router: RouterConfig) -> set[str]:
    """The names of the router's Services and workloads (and its gateway's): no model's objects may
    take one."""
    gateway = router.gateway
    return {router.name, headless_name(router), backend_name(router),
            *(gateway.object_names(router.name) if gateway.enabled else ())}


def gateway_tls_problems(gateway: GatewayConfig, router_name: str, namespace: str) -> list[Problem]:
    """Every name on the gateway's Certificate inside its allowed domains (as the router's)."""
    problems: list[Problem] = []
    allowed = gateway.tls_allowed_domains(namespace)
    where = ", ".join(allowed)
    for index, name in enumerate(gateway.tls.dns_names):
        if not any(within(name, domain) for domain in allowed):
            problems.append(Problem(
                f"router.gateway.tls.dnsNames.{index}",
                f"'{name}' is outside the allowed domains ({where}); add its domain to "
                "router.gateway.tls.allowedDomains, or remove the name"))
    outside = [name for name in gateway.service_dns_names(router_name, namespace)
               if not any(within(name, domain) for domain in allowed)]
    if outside:
        problems.append(Problem(
            "router.gateway.tls.allowedDomains",
            f"the gateway's certificate always names its Service ({', '.join(outside)}: what in-cluster "
            f"clients verify), outside the allowed domains ({where}); add "
            f"{' and '.join(repr(n.split('.', 1)[1]) for n in outside)} to router.gateway.tls.allowedDomains"))
    return problems


def pylon_problems(stack: StackConfig) -> list[Problem]:
    """A fronted model must be able to carry the sidecar."""
    router = stack.router
    if router is None or router.pylon is None:
        return []
    fronted = set(fronted_models(router, [m.name for m in stack.models]))
    return [
        Problem(
            f"models.{index}.path",
            f"model '{model.name}' is fronted by the router, which reaches models only through a "
            "pylon sidecar in their pods; the NIM operator renders the pod from the NIMService, "
            "whose sidecar entries cannot carry the pylon's probes, security context or token "
            "volume. Use path: raw for this model, or leave it out of router.models",
        )
        for index, model in enumerate(stack.models)
        if model.name in fronted and model.on_operator
    ]


def _unfronted_reason(model_name: str, router, fronted: tuple[str, ...]) -> Optional[str]:
    """Why the gateway does not take requests for the model (None: it does)."""
    if router is None or model_name not in fronted:
        fix = "add llm-serving:router with its gateway" if router is None else f"add '{model_name}' to router.models"
        return f"no gateway fronts it; {fix}"
    if not router.gateway.enabled:
        return "router.gateway is disabled; enable it"
    if model_name not in admitted_models(router.gateway, fronted):
        return "router.gateway.models leaves it out; add it there"
    return None


def sleep_problems(stack: StackConfig) -> list[Problem]:
    """A model that may sleep (minReplicas: 0) wakes on the requests the gateway holds for it: it
    must be one the router fronts, behind a gateway that admits it and holds requests."""
    problems = []
    router = stack.router
    names = [model.name for model in stack.models]
    fronted = fronted_models(router, names) if router is not None else ()
    for index, model in enumerate(stack.models):
        if not may_sleep(model):
            continue
        why = f"at zero replicas, model '{model.name}' wakes on the requests the gateway holds for it, and "
        reason = _unfronted_reason(model.name, router, fronted)
        if reason is None and not router.gateway.hold.timeout_seconds:
            reason = ("router.gateway.hold.timeoutSeconds is 0 (nothing held: the first request would get 503 "
                      "and nothing would wake the model); set it to the wait a first request may take while "
                      "the model loads, e.g. 300")
        if reason is None:
            reason = _unwakeable_by_tenants(model.name, router.gateway)
        if reason is not None:
            problems.append(Problem(f"models.{index}.autoscaling.minReplicas", f"{why}{reason}, or set minReplicas: 1"))
    return problems


def _unwakeable_by_tenants(model_name: str, gateway: GatewayConfig) -> Optional[str]:
    """With API keys, only the tenants' requests reach the model, and the gateway holds only those
    without a routing key (docs/gateway.md): why none of them can wake it, or None."""
    if gateway.api_keys is None:
        return None
    tenants = gateway.api_keys.tenants
    callers = [(i, t) for i, t in enumerate(tenants) if t.models is None or model_name in t.models]
    if not callers:
        return ("no tenant of router.gateway.apiKeys may call it (each one's models leaves it out), so no request "
                "reaches it; add it to a tenant's models")
    if all(tenant.routing_key is not None for _, tenant in callers):
        where = ", ".join(f"router.gateway.apiKeys.tenants.{i} ('{t.name}')" for i, t in callers)
        return (f"every tenant that may call it has a routingKey ({where}), and the gateway never holds a request "
                "with a routing key (the router lists only unscoped servers' models), so none would wake it; add "
                "a tenant without routingKey that may call it")
    return None


def next_revision_line_problems(model: ModelConfig, platform: PlatformConfig) -> list[Problem]:
    """The next revision on its own vLLM line (its image may be another line's, its args are
    checked by that line's parser): what it sets, at its own path; what it inherits from the model
    and its line refuses, at `next` (paths relative to the model)."""
    if model.next is None or not engine_of(model).release_lines:
        return []
    own = model.next.model_fields_set
    problems = []
    derived = revision_model(model)
    version = image_version(derived.image or "")
    if model.vllm_release is not None and "image" in own and version and vllm_checks.release_problem(derived, platform):
        # A revision has no vllmRelease of its own: the model's pins both, and "set vllmRelease to
        # the image's line" on the model would break the serving revision instead.
        if line_of_version(version) is None:
            return [Problem("next.image", f"is vLLM {version}, no release line this program renders; give next an "
                            f"image of vLLM {model.vllm_release} (the model's vllmRelease, which the revision keeps)")]
        return [Problem("next.image", f"is vLLM {version}, and the model's vllmRelease '{model.vllm_release}' "
                        "(which the revision keeps: next has no vllmRelease) says both revisions run vLLM "
                        f"{model.vllm_release}; remove vllmRelease from the model (each revision's image tag then "
                        f"names its line), or give next an image of vLLM {model.vllm_release}")]
    for problem in vllm_checks.model_problems(derived, platform):
        root = problem.path.split(".")[0]
        problems.append(problem.under("next") if root in own else
                        Problem("next", f"the revision keeps the model's {problem.path}, which its line refuses: "
                                        f"{problem.message}"))
    return problems


def split_problems(stack: StackConfig) -> list[Problem]:
    """A next revision gets its share at the gateway: the model must be one the gateway admits; and
    its objects (`<model>-next...`) must not be another model's."""
    problems = []
    router = stack.router
    names = [model.name for model in stack.models]
    fronted = fronted_models(router, names) if router is not None else ()
    for index, model in enumerate(stack.models):
        if model.next is None:
            continue
        reason = _unfronted_reason(model.name, router, fronted)
        if reason is not None:
            problems.append(Problem(f"models.{index}.next", f"the gateway gives the next revision of model "
                                    f"'{model.name}' its share of the traffic, and {reason}; or remove next"))
        problems += [p.under(f"models.{index}") for p in unchanged_problems(model, stack.platform.vllm_image)]
        taken = next_name(model)
        if taken in names:
            problems.append(Problem(f"models.{index}.next", f"the next revision's objects are named '{taken}', which "
                                    f"is model {names.index(taken)}'s name; rename that model, or remove next"))
        if router is not None and taken in router_object_names(router):
            # Two Deployments and two Services of one name: the API server keeps one of each.
            own = taken in (router.name, headless_name(router), backend_name(router))
            problems.append(Problem("router.name" if own else "router.gateway.name",
                                    f"the {'router' if own else 'gateway'}'s objects collide with the next revision "
                                    f"of model '{model.name}' (models.{index}.next), whose Deployment and Service are "
                                    f"named '{taken}'; rename the {'router' if own else 'gateway'}"))
    return problems


def metrics_problems(autoscaled_models: list[tuple[int, str]], metrics_enabled: bool,
                     platform: AutoscalingPlatform) -> list[Problem]:
    """Autoscaling reads a queue depth that only exists once Prometheus scrapes the model.
    ``autoscaled_models``: (index, name) of the models with ``autoscaling.enabled``."""
    if metrics_enabled or not platform.require_model_metrics:
        return []
    return [Problem(f"models.{index}.autoscaling.enabled",
                    f"model '{name}' scales on vllm:num_requests_waiting, which Prometheus only has once it "
                    "scrapes the model; set platform.metrics.enabled: true (a ServiceMonitor per model), or, "
                    "when your Prometheus scrapes the model pods another way, "
                    "platform.autoscaling.requireModelMetrics: false")
            for index, name in autoscaled_models]


def unchanged_problems(model: ModelConfig, default_image: str) -> list[Problem]:
    """At the stack, with the image a model without its own runs: a revision whose only change is
    the image the model already runs (the model-level check compares with the model's own `image`,
    unset there)."""
    if model.next is None or engine_of(model).revision_refusal is not None or not changes(model) or changes(model, default_image):
        return []
    return [Problem("next.image", f"'{model.next.image}' is the image the model already runs "
                    "(platform.vllmImage; the model sets no image of its own), so the revision changes nothing; "
                    "set the new image, source or args, or remove next")]


def served_name_problems(models: Iterable[ModelConfig], revisions: Mapping[str, str] = MappingProxyType({})
                         ) -> list[Problem]:
    """A request's `model` names one thing: a model, or one adapter of one model. An adapter named
    like its own base model is shadowed by it (the server answers with the base model), and one
    named like another model, or like another model's adapter, sends clients (and the router,
    which routes by model name) to whichever answers first. ``revisions``: the name each next
    revision registers with the router under (``<model>-next``) -> its model; an adapter may not
    take one either."""
    models = tuple(models)
    owner = {model.name: f"model '{model.name}'" for model in models}
    owner.update({name: f"the next revision of model '{of}' (it registers with the router as '{name}')"
                  for name, of in revisions.items() if name not in owner})
    problems: list[Problem] = []
    for index, model in enumerate(models):
        for number, adapter in enumerate(model.lora.adapters):
            path = f"models.{index}.lora.adapters.{number}.name"
            if adapter.name == model.name:
                problems.append(Problem(path, f"'{adapter.name}' is the served name of its base model, which "
                                 "answers every request for it: the adapter would never be used; "
                                 "give the adapter its own name, e.g. "
                                 f"'{model.name}-{adapter.repo.rsplit('/', 1)[-1].lower()[:20]}'"))
                continue
            if adapter.name in owner:
                problems.append(Problem(path, f"'{adapter.name}' is already served by {owner[adapter.name]}; "
                                 "requests for it would reach either; give the adapter a name of its own"))
                continue
            owner[adapter.name] = f"adapter {number} of model '{model.name}'"
    return problems


def cpu_stream_problems(model: ModelConfig, platform: PlatformConfig) -> list[Problem]:
    """What only the image tells: vLLM's upstream CPU image has no Run:ai streamer (its Dockerfile
    installs the wheel without the `runai` extra), so a streamed source cannot load on it."""
    if model.gpus > 0 or not engine_of(model).release_lines or not model.source.streams:
        return []
    image = model.image or cpu_image(platform)
    if image not in {line.cpu_image for line in RELEASES.values()}:
        return []
    return [Problem("source.load", f"stream loads through the Run:ai streamer, which vLLM's CPU image ({image}) "
                    "does not ship: copy the weights onto the volume (remove load), or set image to a CPU image "
                    "with vLLM's runai extra")]


def configured(stack: StackConfig) -> tuple[stack_secrets.StackSecretSpec, ...]:
    """The stack secrets this stack sets."""
    return tuple(spec for spec in stack_secrets.STACK_SECRETS if getattr(stack, spec.field) is not None)


def used(stack: StackConfig) -> tuple[stack_secrets.StackSecretSpec, ...]:
    """The stack secrets this stack sets and at least one of its models reads."""
    return tuple(spec for spec in configured(stack) if any(reads_stack_secret(model, spec) for model in stack.models))
