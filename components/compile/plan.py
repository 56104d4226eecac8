"""The stack's plan: each component's children, in order, and what each waits on. One model's:

    raw (vLLM, NIM raw):  weights PVC ─▶ puller Job ─▶ WeightsGate ─▶ Deployment ─▶ Service ─▶ ModelStatus
                          (s3 with load: stream: no PVC, Job nor gate; the server reads the store)
                          (multiNode: a LeaderWorkerSet in place of the Deployment, the Service on its leaders)
                          (autoscaling: RequiredCrds first; ScaledObject after the Deployment)
    NIM operator:         NimOperatorCheck ─▶ NIMCache ─▶ NIMService ─▶ ModelStatus
                          (multiNode: the operator renders a LeaderWorkerSet; status reads its groups)

(the server also waits on the optional NetworkPolicy). A child is a manifest or a dynamic resource
named by its typed props (``contract.props``); those that read the cluster are left out in render
mode and what waited on one waits on what it waited on. Children are named by the roles of
``components.children`` (state is keyed by them).

The router's plan (``router_plan``) is one too, the gateway's children (``gateway_plan``) in it
(they are the router component's children: their URNs predate the plans), with the same waits
``RequestRouter`` declared by hand before:

    NetworkPolicies, ServiceAccount + Role ─▶ RoleBinding ───────────────────────────────────┐
    RequiredCrds ─▶ Issuer ─▶ Certificate ──────────────────────────────────┬───────────────┤
    headless Service ─▶ backend SA/Role/Binding ─▶ backend Deployment ◀─────┘               │
                        backend Deployment ─▶ backend Service, PDB, ServiceMonitor ─────────┤
    workload-kind guard, the fronted models (FRONTS) ───────────────────────────────────────┴▶ router workload
    router workload ─▶ Service ─▶ ServiceMonitor; PDB; RouterTargets
    gateway NetworkPolicy, ConfigMap, router Service ─▶ gateway Deployment ─▶ its Service, PDB
    ConfigMap ─▶ limiter Deployment ─▶ its Service ─▶ gateway Deployment (tenant limits)
    gateway Deployment ─▶ metrics Service ─▶ ServiceMonitor (platform.metrics)
    RequiredCrds ─▶ gateway Issuer ─▶ gateway Certificate ─▶ gateway Deployment (router.gateway.tls)

``stack_plan`` builds them once into the stack's plan (``StackPlan``: platform, models, router
and gateway, in creation order), which ``up`` declares (``components.resources.stack``), `render`
writes (``StackPlan.rendered``, ``compile_stack``) and the tests read. Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Optional, Union

from contract.props import (
    STACK_CRDS_OWNER,
    ClusterTarget,
    CrdRequirement,
    GateProps,
    GroupObjects,
    NimOperatorCheckProps,
    OperatorObjects,
    RawObjects,
    RequiredCrdsProps,
    RouterTargetsProps,
    StatusProps,
    WorkloadKindProps,
)

from .. import children as roles
from ..config.model import ModelConfig, changes, revision_model, weights_model
from ..config.stack import StackConfig, fronted_models
from . import autoscaling, common, metrics, nim, server
from .crds import stack_required_crds
from .dashboard import compile_dashboard
from .gateway import GatewayManifests, compile_gateway
from .gateway import endpoint_url as gateway_url
from .gateway import required_crds as gateway_required_crds
from .rbac import compile_teardown_identity
from .router import CHART, compile_router, fronted_services, pylon_address, required_crds
from .router import endpoint_url as router_url
from .secrets import stack_secrets
from .stack import compile_model, compile_model_service_account, compile_namespace

# In ``Child.after``: the platform's objects (namespace, service account, secrets).
PLATFORM = "platform"
# In ``Child.after`` of the router's workload: the models it fronts (the component's ``fronts``).
FRONTS = "fronts"
# In ``Child.after`` of the platform's children: what its caller made it wait on (a library
# user's own Namespace): children do not inherit a component's depends_on.
CALLER = "caller"
EXTERNAL = (PLATFORM, FRONTS, CALLER)

DynamicProps = Union[GateProps, NimOperatorCheckProps, RequiredCrdsProps, StatusProps, WorkloadKindProps,
                     RouterTargetsProps]


@dataclass(frozen=True)
class Child:
    role: str
    manifest: Optional[dict] = None
    props: Optional[DynamicProps] = None  # a dynamic resource (needs a cluster)
    after: tuple[str, ...] = ()  # roles this child waits on, or PLATFORM
    replace_on_changes: tuple[str, ...] = ()
    delete_before_replace: bool = False
    # Forgotten, not deleted, by `pulumi destroy` (the platform's Namespace: what users put in it survives).
    retain_on_delete: bool = False
    # The logical name after the component's (`<component>-<name>`); the role when empty. And the
    # names the child had before (Pulumi aliases: a deployed stack's resource keeps its state).
    name: str = ""
    aliases: tuple[str, ...] = ()
    # A Secret made from a stack secret: (its config key, the key its value goes under). The
    # component adds the value as a secret Output; never rendered (the file would hold it in plain text).
    secret: Optional[tuple[str, str]] = None

    @property
    def logical(self) -> str:
        return self.name or self.role

    @property
    def rendered(self) -> bool:
        """Whether `render` (and a render stack's `up`) declares it."""
        return not self.needs_cluster and self.secret is None

    @property
    def needs_cluster(self) -> bool:
        # A dynamic resource that reads the cluster carries its ClusterTarget; the router's
        # workload-kind guard only compares with its own state, so it runs in render mode too.
        return self.props is not None and hasattr(self.props, "cluster")


def declared(children: tuple[Child, ...], rendering: bool) -> Iterator[tuple[Child, tuple[str, ...]]]:
    """The children to declare, in order, each with the roles (or PLATFORM, FRONTS) it waits on. A
    wait on a role the plan lacks (no NetworkPolicy) is dropped; when rendering, a child needing a
    cluster (or holding a stack secret) is left out and its dependents wait on what it waited on."""
    resolved: dict[str, tuple[str, ...]] = {external: (external,) for external in EXTERNAL}
    for child in children:
        waits = tuple(dict.fromkeys(r for role in child.after for r in resolved.get(role, ())))
        if rendering and not child.rendered:
            resolved[child.role] = waits
            continue
        resolved[child.role] = (child.role,)
        yield child, waits


class Plan:
    """What every component's plan has: its children in the order they are declared."""

    children: tuple[Child, ...]

    def declared(self, rendering: bool) -> Iterator[tuple[Child, tuple[str, ...]]]:
        return declared(self.children, rendering)

    @property
    def objects(self) -> tuple[dict, ...]:
        """Its Kubernetes objects, in its order (a stack secret's Secret without its value)."""
        return tuple(child.manifest for child in self.children if child.manifest is not None)


@dataclass(frozen=True)
class PlatformPlan(Plan):
    """The stack-wide children (namespace, the models' ServiceAccount, the teardown identity, the
    stack secrets' Secrets, the check of every CRD the stack needs, the dashboard) and the roles every model waits
    on (``ready``; with what the platform's caller gave it)."""

    children: tuple[Child, ...]
    ready: tuple[str, ...]
    namespace: str


def platform_plan(stack: StackConfig, cluster: Any = None) -> PlatformPlan:
    """The platform's plan. The Namespace is retained on delete: `pulumi destroy` deletes every
    object the stack declared, then only forgets the Namespace, so the Secrets users created in it
    by hand (the HF token, the gateway's API keys, the NGC key the docs tell them to `kubectl
    create`) survive; deleting a Namespace deletes all it holds. Not `protect`: that would fail
    every destroy until `pulumi state unprotect`. A later `up` adopts the Namespace again
    (server-side apply creates an existing object as an update)."""
    target = ClusterTarget.of(stack.cluster if cluster is None else cluster)
    after = (CALLER, roles.NAMESPACE)
    secrets = stack_secrets(stack)
    # Every CRD the stack needs, checked here first (compile/crds.py): a cluster missing several
    # operators stops the preview naming each, with the setting and the fix, before any model or
    # router object (and their own checks) is declared.
    requirements = stack_required_crds(stack)
    dashboard = compile_dashboard(stack)
    children = (
        *((Child(roles.NAMESPACE, compile_namespace(stack), retain_on_delete=True),)
          if stack.platform.create_namespace else ()),
        Child(roles.MODEL_SERVICE_ACCOUNT, compile_model_service_account(stack.platform), after=after),
        *(Child(f"teardown-{manifest['kind'].lower()}", manifest, after=after)
          for manifest in compile_teardown_identity(stack)),
        *(Child(secret.ref.name, secret.manifest, after=after, secret=(secret.config_key, secret.ref.key))
          for secret in secrets),
        *((Child(roles.STACK_CRD_CHECK, props=RequiredCrdsProps(
            STACK_CRDS_OWNER, tuple(CrdRequirement.from_dict(r) for r in requirements), target), after=after),)
          if requirements else ()),
        *((Child(roles.DASHBOARD, dashboard, after=after),) if dashboard is not None else ()),
    )
    ready = (roles.NAMESPACE, roles.MODEL_SERVICE_ACCOUNT, *(s.ref.name for s in secrets), roles.STACK_CRD_CHECK)
    return PlatformPlan(children, ready, stack.platform.namespace)


@dataclass(frozen=True)
class ModelPlan(Plan):
    model: ModelConfig
    children: tuple[Child, ...]
    endpoint_url: str
    # What the component exports beside its status (the objects' names, the path).
    outputs: dict

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def status(self) -> StatusProps:
        """What the model's status reads (the status provider and the `status` command use it)."""
        return next(c.props for c in self.children if c.role == roles.STATUS)  # type: ignore[return-value]

    @property
    def statuses(self) -> tuple[tuple[str, StatusProps], ...]:
        """(name, what its status reads) of the model and, with one, its next revision (`<model>-next`)."""
        return tuple((props.model, props) for props in (c.props for c in self.children)
                     if isinstance(props, StatusProps))


def spec_revision(manifest: dict) -> str:
    """A stable digest of what a rollout changes, so status waits again only when it changes."""
    return hashlib.sha256(json.dumps(manifest["spec"], sort_keys=True).encode()).hexdigest()[:16]


def _policy(manifest: Optional[dict]) -> tuple[Child, ...]:
    # platform.networkPolicy: in place before the first server pod can accept a connection.
    return () if manifest is None else (Child(roles.NETWORK_POLICY, manifest, after=(PLATFORM,)),)


def _budget(manifest: Optional[dict], server_role: str) -> tuple[Child, ...]:
    # Models that may run several pods (compile.disruption.may_run_several); after the server, so a
    # budget never exists for pods its model does not declare.
    return () if manifest is None else (Child(roles.SERVER_PDB, manifest, after=(server_role,)),)


def _restart_threshold(platform) -> Optional[int]:
    """platform.restartThreshold for the status wait; left out at the default, so stacks deployed
    before the setting existed record the same status inputs (no update of every model)."""
    default = type(platform).model_fields["restart_threshold"].default
    return None if platform.restart_threshold == default else platform.restart_threshold


def _puller_policy(manifest: Optional[dict]) -> tuple[Child, ...]:
    # platform.networkPolicy: the puller's egress (DNS and its hub only) is in place before it runs.
    return () if manifest is None else (Child(roles.PULLER_NETWORK_POLICY, manifest, after=(PLATFORM,)),)


def _crd_check(model: ModelConfig, cluster: ClusterTarget) -> tuple[Child, ...]:
    """Other operators' CRDs the model's settings need (autoscaling: KEDA's): a preview on a
    cluster without them stops with the setting and the fix, before anything is created."""
    requirements = tuple(CrdRequirement.from_dict(r) for r in autoscaling.required_crds(model))
    if not requirements:
        return ()
    return (Child(roles.CRD_CHECK, props=RequiredCrdsProps(f"model {model.name}", requirements, cluster),
                  after=(PLATFORM,)),)


def _scaler(manifest: Optional[dict]) -> tuple[Child, ...]:
    # autoscaling: KEDA scales the Deployment once both exist (and its CRD is served).
    return () if manifest is None else (Child(roles.SCALED_OBJECT, manifest, after=(roles.SERVER, roles.CRD_CHECK)),)


def _monitor(manifest: Optional[dict]) -> tuple[Child, ...]:
    # platform.metrics: selects the model's Service, so declared after it. The Prometheus
    # Operator's CRD is checked once per stack, by the platform, before any model.
    return () if manifest is None else (Child(roles.SERVICE_MONITOR, manifest, after=(roles.SERVICE,)),)


def _pull(model: ModelConfig, job: Optional[dict], platform, names, cluster: ClusterTarget) -> tuple[Child, ...]:
    """The puller Job and the gate the server waits on. None for per-pod weights (each group pod's
    init containers pull and verify its own volume; the status reports them, providers/pod_weights.py)
    nor for a streamed s3 source, whose server reads the store itself (nothing checks the bytes
    before it loads them)."""
    if job is None:
        return ()
    gate = GateProps(platform.namespace, model.name, names.weights, job["metadata"]["name"], model.source.ref,
                     platform.pull_timeout_seconds, cluster)
    return (
        # A Job's pod template is immutable, so any change to it replaces the Job, under a new
        # name (common.puller_name). Delete-first all the same: two pullers never write one volume
        # at once (the old one may still be downloading when its template changes).
        Child(roles.PULLER, job, after=(roles.WEIGHTS, roles.PULLER_NETWORK_POLICY), delete_before_replace=True,
              **weights_names(model, roles.PULLER)),
        # The serving Deployment waits on the gate (complete weights, volume handed off).
        Child(roles.WEIGHTS_GATE, props=gate, after=(roles.PULLER,), **weights_names(model, roles.WEIGHTS_GATE)),
    )


def weights_names(model: ModelConfig, role: str) -> dict:
    """The logical name of a weights child (volume, puller, gate): its role and the source's
    hash, `<model>-weights-<hash>`, as the volume's object name. One source, one set of names:
    a next revision's weights (models[].next) are declared under the names the model's own will
    have once it is promoted, so promoting keeps them (the same resources: no re-download) and
    deletes the previous revision's. Aliased to the role alone, the name before: a deployed
    stack's weights keep their state."""
    return {"name": f"{role}-{common.source_hash(model)}", "aliases": (role,)}


# A StatefulSet's volumeClaimTemplates cannot change (the API server refuses the update), and the
# LWS controller applies the LeaderWorkerSet's to its StatefulSets: per-pod weights of another size,
# class or access mode, or a switch between shared and per-pod weights, replace the LeaderWorkerSet
# (its claims go with it, whenDeleted: Delete) instead of leaving its controller failing.
LWS_CLAIMS_PATH = "spec.leaderWorkerTemplate.volumeClaimTemplates"


def _claims_replace(server: dict) -> dict:
    if server["kind"] != "LeaderWorkerSet":
        return {}
    return {"replace_on_changes": (LWS_CLAIMS_PATH,), "delete_before_replace": True}


def raw_plan(model: ModelConfig, stack: StackConfig, cluster: ClusterTarget) -> ModelPlan:
    manifests = compile_model(model, stack)
    names, platform = manifests.names, stack.platform
    url = server.endpoint_url(model, platform)
    monitor = metrics.compile_service_monitor(model, stack)  # platform.metrics
    revision = spec_revision(manifests.deployment)
    multi = model.multi_node
    # Per-pod weights (the group pods pull) and a streamed s3 source (the server reads the store)
    # have no puller Job and no gate.
    puller = manifests.puller_job["metadata"]["name"] if manifests.puller_job is not None else ""
    objects = (GroupObjects(names.server, names.service, multi.nodes, puller, revision) if multi
               else RawObjects(names.server, names.service, puller, revision))
    status = StatusProps(
        platform.namespace, model.name, objects,
        url, platform.pending_timeout_seconds,
        # Per-pod weights are pulled inside the pods, a streamed source is read while the server
        # starts: without a puller Job the pull's budget is part of this wait.
        platform.startup_timeout_seconds + platform.pending_timeout_seconds
        + (platform.pull_timeout_seconds if manifests.puller_job is None else 0), cluster,
        restart_threshold=_restart_threshold(platform),
        min_replicas=model.autoscaling.min_replicas if autoscaling.autoscaled(model) else None,
    )
    return ModelPlan(model, (
        *_crd_check(model, cluster),
        # A `pvc` source has no weights volume of ours: its existing claim is never a resource here,
        # so nothing this program does (destroy included) can delete it.
        *(() if manifests.weights_pvc is None else (Child(roles.WEIGHTS, manifests.weights_pvc, after=(PLATFORM,),
                                                          **weights_names(model, roles.WEIGHTS)),)),
        *_puller_policy(manifests.puller_network_policy),
        *_pull(model, manifests.puller_job, platform, names, cluster),
        *_policy(manifests.network_policy),
        Child(roles.SERVER, manifests.deployment, after=(roles.WEIGHTS_GATE, roles.NETWORK_POLICY),
              **_claims_replace(manifests.deployment)),
        Child(roles.SERVICE, manifests.service, after=(roles.SERVER,)),
        *_budget(manifests.pod_disruption_budget, roles.SERVER),
        *_scaler(manifests.scaled_object),
        *_monitor(monitor),
        Child(roles.STATUS, props=status, after=(roles.SERVER, roles.SERVICE)),
    ), url, {"endpoint_url": url, "objects": {
        **({"weights": names.weights, "puller": puller} if puller else {}),
        ("leader_worker_set" if multi else "deployment"): names.server, "service": names.service,
        **({"service_monitor": monitor["metadata"]["name"]} if monitor is not None else {})}})


def operator_plan(model: ModelConfig, stack: StackConfig, cluster: ClusterTarget) -> ModelPlan:
    manifests = nim.compile_nim_operator(model, stack)
    names, platform = manifests.names, stack.platform
    url = nim.endpoint_url(model, platform)
    multi = model.multi_node
    objects = OperatorObjects(names.service, names.cache, spec_revision(manifests.service),
                              nim.lws_name(model) if multi else None, multi.nodes if multi else None)
    status = StatusProps(
        platform.namespace, model.name, objects,
        # Caching is part of this wait: the download's budget plus the server's.
        url, platform.pending_timeout_seconds,
        platform.pull_timeout_seconds + platform.startup_timeout_seconds + platform.pending_timeout_seconds, cluster,
        restart_threshold=_restart_threshold(platform),
    )
    return ModelPlan(model, (
        # First: nothing NIM-specific reaches a cluster without the operator's CRDs. It also
        # carries spec.multiNode, which the operator's webhook makes immutable: a change is refused
        # at preview (providers/crd_check.py multi_node_change), not halfway through `up` (a
        # same-name replacement cannot be previewed: its dry run lands on the live object).
        Child(roles.NIM_OPERATOR_CHECK, props=NimOperatorCheckProps.of(
            model.name, nim.CRD_NAMES, nim.VERSION, cluster, nim.multinode_digest(manifests.service)),
              after=(PLATFORM,)),
        # The NIMCache spec is immutable: never patch it. Its name carries a digest of the spec,
        # so a change is a new cache created before the old one is deleted.
        Child(roles.NIM_CACHE, manifests.cache, after=(roles.NIM_OPERATOR_CHECK,), replace_on_changes=("spec",)),
        *_policy(manifests.network_policy),
        Child(roles.NIM_SERVICE, manifests.service, after=(roles.NIM_CACHE, roles.NETWORK_POLICY)),
        *_budget(manifests.pod_disruption_budget, roles.NIM_SERVICE),
        Child(roles.STATUS, props=status, after=(roles.NIM_SERVICE,)),
    ), url, {"endpoint_url": url, "path": "operator",
             "objects": {"nim_cache": names.cache, "nim_service": names.service,
                         **({"leader_worker_set": nim.lws_name(model)} if multi else {})}})


# Roles of a next revision's children: the plan of the model config.model.revision_model derives,
# each role prefixed (children `<model>-next-<role>`: the revision's objects are `<model>-next...`).
NEXT_ROLE_PREFIX = roles.NEXT_ROLE_PREFIX
# The weights children: a next revision's are the model's own with its source (weights_names).
WEIGHTS_ROLES = roles.SOURCE_NAMED_ROLES


def next_role(role: str) -> str:
    return role if role in EXTERNAL else NEXT_ROLE_PREFIX + role


def _next_revision(model: ModelConfig, own: ModelPlan, stack: StackConfig,
                   cluster: ClusterTarget) -> tuple[tuple[Child, ...], dict]:
    """The next revision's children and its outputs. Its weights (volume, puller, gate) are the
    ones the model will have with the revision's source, by object and by logical name
    (weights_names): promoting keeps them. Its server side (server, Service, budget, monitor,
    policy, status) is the derived `<model>-next` model's, waiting on those weights; with the
    model's own source it mounts the model's volume and waits on the model's gate (``own``: the
    model's plan)."""
    if model.next is None:
        return (), {}
    revision = revision_model(model)
    own_weights = "source" in changes(model)
    weights = raw_plan(weights_model(model), stack, cluster) if own_weights else None
    server_side = raw_plan(revision, stack, cluster)

    def role_of(role: str) -> str:
        if role in WEIGHTS_ROLES and not own_weights:
            return role  # the model's own weights
        return next_role(role)

    children: list[Child] = []
    if weights is not None:
        # No aliases: the names before were the model's own weights' (a next revision's never had others).
        children += [replace(c, role=next_role(c.role), aliases=(),
                             after=tuple(a if a == roles.PULLER_NETWORK_POLICY else next_role(a) for a in c.after))
                     for c in weights.children if c.role in WEIGHTS_ROLES]
    # The weights it reads: its own, or the model's (the derived model's own puller is never declared).
    pulled = (weights or own).outputs["objects"]
    weights_objects = {key: pulled[key] for key in ("weights", "puller") if key in pulled}
    for c in server_side.children:
        if c.role in WEIGHTS_ROLES or c.role == roles.PULLER_NETWORK_POLICY:
            continue  # the revision's weights are above (or the model's); its puller's egress is the model's policy
        if c.role == roles.STATUS and isinstance(c.props, StatusProps):
            # The pull the revision's status reports is the one its weights come from.
            c = replace(c, props=replace(c.props, objects=replace(
                c.props.objects, puller_job=weights_objects.get("puller", ""))))
        children.append(replace(c, role=next_role(c.role), after=tuple(role_of(a) for a in c.after)))
    served = {key: value for key, value in server_side.outputs["objects"].items() if key not in ("weights", "puller")}
    return tuple(children), {"next": {"weight": model.next.weight, "changes": changes(model), **server_side.outputs,
                                      "objects": {**served, **weights_objects}}}


def model_plan(model: ModelConfig, stack: StackConfig, cluster: Any = None) -> ModelPlan:
    """The plan of one model on its path (and its next revision's, after it); ``cluster`` (the
    stack's cluster config by default) is where its dynamic resources look."""
    target = ClusterTarget.of(stack.cluster if cluster is None else cluster)
    plan = (operator_plan if model.on_operator else raw_plan)(model, stack, target)
    children, outputs = _next_revision(model, plan, stack, target)
    if not children:
        return plan
    return replace(plan, children=plan.children + children, outputs={**plan.outputs, **outputs})


@dataclass(frozen=True)
class GatewayPlan(Plan):
    """The gateway's children (router.gateway; none when it is off). The router's component
    declares them after its own, as its own children (``<router>-gateway*``: their URNs predate the
    plans); they wait on the router's roles."""

    children: tuple[Child, ...]


@dataclass(frozen=True)
class RouterPlan(Plan):
    """The router's own children in order, the gateway's plan declared after them by the same
    component, the models it fronts (in stack order) and what it exports."""

    name: str
    children: tuple[Child, ...]
    gateway: GatewayPlan
    fronts: tuple[str, ...]
    endpoint_url: str
    workload_kind: str
    outputs: dict

    @property
    def all_children(self) -> tuple[Child, ...]:
        """Every child the router's component declares: its own, then the gateway's."""
        return self.children + self.gateway.children

    def declared(self, rendering: bool) -> Iterator[tuple[Child, tuple[str, ...]]]:
        # One resolution over both: a gateway child waits on the router's roles (its Service, its
        # CRD check), which render mode may leave out.
        return declared(self.all_children, rendering)


def _present(*children: tuple[str, Optional[dict], tuple[str, ...]]) -> tuple[Child, ...]:
    """Manifest children (role, manifest or None, waits); the absent ones left out."""
    return tuple(Child(role, manifest, after=after) for role, manifest, after in children if manifest is not None)


def gateway_plan(gateway: Optional[GatewayManifests], splits: bool = False) -> GatewayPlan:
    """The gateway's children: after the router Service (nginx resolves its name at start; the
    Service itself is unchanged, so clients move to the gateway at their pace), the config before
    the pods that mount it, the limiter's Service before the replicas that resolve it. ``splits``
    (a model has a next revision): the config, which holds the revisions' shares, waits on the
    models, so a new share is written once the revision it gives traffic to is ready."""
    if gateway is None:
        return GatewayPlan(())
    limiter = gateway.limiter
    return GatewayPlan(_present(
        (roles.GATEWAY_NETWORK_POLICY, gateway.network_policy, (PLATFORM,)),
        # router.gateway.tls: the Secret the pods mount is cert-manager's to write, so the
        # Certificate (and its self-signed Issuer when none is named) comes first.
        (roles.GATEWAY_ISSUER, gateway.certificate and gateway.issuer, (roles.ROUTER_CRD_CHECK,)),
        (roles.GATEWAY_CERTIFICATE, gateway.certificate,
         (roles.ROUTER_CRD_CHECK,) if gateway.issuer is None else (roles.GATEWAY_ISSUER,)),
        (roles.GATEWAY_CONFIG, gateway.config_map, (PLATFORM, FRONTS) if splits else (PLATFORM,)),
        (roles.GATEWAY_LIMITER_NETWORK_POLICY, limiter and limiter.network_policy, (PLATFORM,)),
        (roles.GATEWAY_LIMITER, limiter and limiter.deployment,
         (roles.GATEWAY_CONFIG, roles.GATEWAY_LIMITER_NETWORK_POLICY)),
        (roles.GATEWAY_LIMITER_SERVICE, limiter and limiter.service, (roles.GATEWAY_LIMITER,)),
        (roles.GATEWAY, gateway.deployment, (roles.ROUTER_SERVICE, roles.GATEWAY_CONFIG, roles.GATEWAY_NETWORK_POLICY,
                                             roles.GATEWAY_LIMITER_SERVICE, roles.GATEWAY_CERTIFICATE)),
        (roles.GATEWAY_SERVICE, gateway.service, (roles.GATEWAY,)),
        (roles.GATEWAY_PDB, gateway.pod_disruption_budget, (roles.GATEWAY,)),
        (roles.GATEWAY_METRICS_SERVICE, gateway.metrics_service, (roles.GATEWAY,)),
        (roles.GATEWAY_SERVICE_MONITOR, gateway.service_monitor, (roles.GATEWAY_METRICS_SERVICE, roles.ROUTER_CRD_CHECK)),
    ))


def router_plan(stack: StackConfig, cluster: Any = None) -> RouterPlan:
    """The router's plan: its children and the gateway's, each with what it waits on (the one order
    they are declared and rendered in)."""
    router = stack.router
    if router is None:
        raise ValueError("the stack declares no router (llm-serving:router)")
    target = ClusterTarget.of(stack.cluster if cluster is None else cluster)
    m = compile_router(stack)
    names, topology = m.names, m.topology
    gateway = compile_gateway(stack)
    # Another operator's kinds (cert-manager, Prometheus Operator) wait for the check that the
    # cluster serves them: without it, preview stops with the setting and the fix.
    requirements = required_crds(m) + gateway_required_crds(gateway)
    crd_check = (Child(roles.ROUTER_CRD_CHECK, props=RequiredCrdsProps(
        f"router {router.name}", tuple(CrdRequirement.from_dict(r) for r in requirements), target),
        after=(PLATFORM,)),) if requirements else ()
    # State-only (no cluster access), so it is declared in render mode too: a kind flip there is
    # worse, since `kubectl apply` of the rendered files never deletes the old kind.
    kind_guard = Child(roles.ROUTER_WORKLOAD_KIND, props=WorkloadKindProps(
        router.name, topology.kind, router.workload.migrate_from or "", "kind" in router.workload.model_fields_set),
        after=(PLATFORM,))
    # cert-manager's kinds wait on the CRD check (in render mode: on what it waited on).
    tls = (roles.ROUTER_CRD_CHECK,) if m.issuer is None else (roles.ROUTER_ISSUER,)
    children = (
        *crd_check,
        # Policies first: pods are never up without the isolation the stack asked for.
        *_present(
            (roles.ROUTER_NETWORK_POLICY, m.network_policy, (PLATFORM,)),
            (roles.BACKEND_NETWORK_POLICY, m.backend_network_policy, (PLATFORM,)),
            (roles.ROUTER_SERVICE_ACCOUNT, m.service_account, (PLATFORM,)),
            (roles.ROUTER_ROLE, m.role if m.service_account is not None else None, (PLATFORM,)),
            (roles.ROUTER_ROLE_BINDING, m.role_binding if m.service_account is not None else None,
             (roles.ROUTER_SERVICE_ACCOUNT, roles.ROUTER_ROLE)),
            (roles.BACKEND_SERVICE_ACCOUNT, m.backend_deployment and m.backend_service_account, (PLATFORM,)),
            (roles.BACKEND_ROLE, m.backend_deployment and m.backend_role, (PLATFORM,)),
            (roles.BACKEND_ROLE_BINDING, m.backend_deployment and m.backend_role_binding,
             (roles.BACKEND_SERVICE_ACCOUNT, roles.BACKEND_ROLE)),
            (roles.ROUTER_ISSUER, m.certificate and m.issuer, (roles.ROUTER_CRD_CHECK,)),
            (roles.ROUTER_CERTIFICATE, m.certificate, tls),
            # The file the router reads once at start: there before the pods.
            (roles.ROUTER_LB_CONFIG, m.lb_config, (PLATFORM,)),
            # Before the router pods (their DNS discovery resolves it) and the backend router
            # (which watches its EndpointSlices).
            (roles.ROUTER_HEADLESS_SERVICE, m.headless_service, (PLATFORM,)),
            (roles.BACKEND, m.backend_deployment,
             (roles.BACKEND_ROLE_BINDING, roles.ROUTER_HEADLESS_SERVICE, roles.ROUTER_CERTIFICATE)),
            (roles.BACKEND_SERVICE, m.backend_deployment and m.backend_service, (roles.BACKEND,)),
            (roles.BACKEND_PDB, m.backend_deployment and m.backend_pod_disruption_budget, (roles.BACKEND,)),
            (roles.BACKEND_SERVICE_MONITOR, m.backend_deployment and m.backend_service_monitor,
             (roles.BACKEND_SERVICE, roles.ROUTER_CRD_CHECK)),
        ),
        kind_guard,
        # The router pods come after everything they use (the router's flags hand pylons the
        # backend router's address), and after the models they front.
        Child(roles.ROUTER_WORKLOAD, m.workload, after=(
            PLATFORM, roles.ROUTER_NETWORK_POLICY, roles.BACKEND_NETWORK_POLICY, roles.ROUTER_ROLE_BINDING,
            roles.ROUTER_HEADLESS_SERVICE, roles.ROUTER_LB_CONFIG, roles.ROUTER_CERTIFICATE, roles.BACKEND_SERVICE,
            roles.ROUTER_WORKLOAD_KIND, FRONTS)),
        Child(roles.ROUTER_SERVICE, m.service, after=(roles.ROUTER_WORKLOAD,)),
        *_present(
            (roles.ROUTER_PDB, m.pod_disruption_budget, (roles.ROUTER_WORKLOAD,)),
            (roles.ROUTER_SERVICE_MONITOR, m.service_monitor, (roles.ROUTER_SERVICE, roles.ROUTER_CRD_CHECK)),
        ),
        # Read, not awaited: each fronted model already waited for its rollout. The component
        # adds the models' recorded targets (Outputs), so whenever a model's status is
        # re-recorded (a rollout, a scale) the router's view is re-read with it, in the same `up`.
        Child(roles.ROUTER_TARGETS, props=RouterTargetsProps(
            router.name, stack.platform.namespace, fronted_services(stack), (), target),
            after=(roles.ROUTER_WORKLOAD,)),
    )
    url = gateway_url(stack) if gateway is not None else router_url(stack)
    fronts = fronted_models(router, [m.name for m in stack.models])
    outputs = {
        # What clients call: the gateway when it runs, else the router Service.
        "endpoint_url": url,
        "router_url": router_url(stack),
        "workload_kind": topology.kind,
        # Which of the chart's topologies runs, and why.
        "topology": topology.name,
        "topology_reason": topology.reason,
        "chart": CHART,
        "discovery": list(topology.discovery),
        # What a model pod's pylon dials (--stargate-address).
        "pylon_address": pylon_address(router, stack.platform.namespace),
        "backend_router": topology.backend_router,
        "models": list(fronts),
        "objects": {
            "workload": names.router,
            "service": names.router,
            "headless_service": names.headless,
            "service_account": names.service_account,
            **({"backend_router": names.backend} if topology.backend_router else {}),
            **({"gateway": gateway.names.gateway} if gateway is not None else {}),
            **({"gateway_tls_secret": gateway.names.tls_secret}
               if gateway is not None and gateway.names.tls_secret else {}),
            **({"certificate": names.certificate} if router.tls.issued else {}),
            **({"tls_secret": names.tls_secret} if router.tls.enabled else {}),
        },
    }
    return RouterPlan(router.name, children, gateway_plan(gateway, splits=any(m.next is not None for m in stack.models)),
                      tuple(fronts), url, topology.kind, outputs)


@dataclass(frozen=True)
class StackPlan:
    """The whole stack's plan, built once from its config: the platform's, each model's (in the
    stack's order) and the router's with the gateway's, in the order their components are
    created. `up` declares it (``components.resources.stack.declare``), `render` writes what it
    declares in render mode (``rendered``), and the tests read both from it."""

    platform: PlatformPlan
    models: tuple[ModelPlan, ...]
    router: Optional[RouterPlan]
    # cluster.renderYamlToDirectory: `up` writes files and reads no cluster, so what needs one is
    # left out (``Child.rendered``), as `render` leaves it out.
    rendering: bool

    @property
    def gateway(self) -> Optional[GatewayPlan]:
        return None if self.router is None else self.router.gateway

    @property
    def plans(self) -> tuple[Union[PlatformPlan, ModelPlan, RouterPlan], ...]:
        """Each component's plan, in creation order (the router, fronting the models, last)."""
        return (self.platform, *self.models, *((self.router,) if self.router is not None else ()))

    def model(self, name: str) -> ModelPlan:
        return next(plan for plan in self.models if plan.name == name)

    def rendered(self) -> list[dict]:
        """Every object `render` writes, in the order a render stack's `up` declares them."""
        return [child.manifest for plan in self.plans for child, _ in plan.declared(rendering=True)
                if child.manifest is not None]


def stack_plan(stack: StackConfig, cluster: Any = None) -> StackPlan:
    """The stack's plan; ``cluster`` (the stack's cluster config by default) is where its dynamic
    resources look."""
    return StackPlan(platform_plan(stack, cluster), tuple(model_plan(model, stack, cluster) for model in stack.models),
                     router_plan(stack, cluster) if stack.router is not None else None,
                     bool(stack.cluster.render_yaml_to_directory))


def compile_stack(stack: StackConfig) -> list[dict]:
    """Every object the stack renders, in declaration order (``StackPlan.rendered``)."""
    return stack_plan(stack).rendered()
