"""Router compilers: the objects each topology renders, rollout fields per kind, the StatefulSet
pin regression, identities and RBAC exactly, secure pods, the platform settings exposed in
config, and strict schema validation of every core kind. The chart facts themselves (flags,
ports, probes, Services, TLS, drain) are in test_router_chart_contract.py."""

from __future__ import annotations

import kubernetes_validate
import pytest

from components.compile import compile_stack, pylon
from components.compile.router import RouterManifests, compile_router, endpoint_url, names, pylon_address
from components.compile.router.network import PYLON_PODS
from components.config import load_stack_config, read_stack_file, router_names
from components.config.pylon import image_version
from components.config.router import MANAGED_FLAGS
from contract.names import headless_service_name
from tests.support.builders import ROOT, containers, model, pod_spec
from tests.support.planned import router_objects

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
K8S_VERSION = kubernetes_validate.latest_version()
CRD_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")  # no schema shipped: checked by asserts
TWO_MODELS = (model("chat"), model("code"))


def config(stack_models=TWO_MODELS, platform=None, **section):
    raw = {"models": list(stack_models), "router": {"image": ROUTER_IMAGE, **section}}
    if platform:
        raw["platform"] = platform
    return load_stack_config(raw)


def compiled(**section) -> RouterManifests:
    return compile_router(config(**section))


def kinds(stack) -> list[tuple[str, str]]:
    """The router's objects in the order its plan declares them."""
    return [(m["kind"], m["metadata"]["name"]) for m in router_objects(stack)]


STATEFULSET_DNS = dict(replicas=3, workload={"kind": "StatefulSet"})
DEPLOYMENT_MULTI = dict(replicas=3)
EVERYTHING = dict(
    replicas=3, metrics={"serviceMonitor": True},
    tls={"enabled": True, "dnsNames": ["llm.example.com", "llm-router.llm-serving.svc.cluster.local"],
         "allowedDomains": ["example.com", "llm-serving.svc.cluster.local"]},
)
ROUTER_IDENTITY = [
    ("ServiceAccount", "llm-router"), ("Role", "llm-router-pod-reader"), ("RoleBinding", "llm-router-pod-reader"),
]


# --- topologies -------------------------------------------------------------------------------

def test_single_replica_deployment_renders_the_router_alone():
    objects = compiled()
    assert objects.topology.name == "single-deployment"
    assert kinds(config()) == [*ROUTER_IDENTITY, ("Service", "llm-router-headless"),
                              ("Deployment", "llm-router"), ("Service", "llm-router")]


def test_multi_replica_deployment_gets_the_backend_router():
    objects = compiled(**DEPLOYMENT_MULTI)
    assert objects.topology.name == "deployment+backend"
    assert kinds(config(**DEPLOYMENT_MULTI)) == [
        *ROUTER_IDENTITY,
        ("ServiceAccount", "llm-router-backend-router"),
        ("Role", "llm-router-backend-router-endpointslice-reader"),
        ("RoleBinding", "llm-router-backend-router-endpointslice-reader"),
        ("Service", "llm-router-headless"),
        ("Deployment", "llm-router-backend-router"),
        ("Service", "llm-router-backend-router"),
        ("PodDisruptionBudget", "llm-router-backend-router"),
        ("Deployment", "llm-router"),
        ("Service", "llm-router"),
        ("PodDisruptionBudget", "llm-router"),
    ]


def test_statefulsets_render_no_backend_router_unless_needed():
    assert compiled(**STATEFULSET_DNS).backend_deployment is None
    assert compiled(workload={"kind": "StatefulSet"}, dnsDiscovery=False).backend_deployment is None
    no_dns = compiled(replicas=2, workload={"kind": "StatefulSet"}, dnsDiscovery=False)
    assert no_dns.topology.name == "statefulset+backend" and no_dns.backend_deployment is not None


def test_everything_on_adds_monitors_and_tls_and_nothing_else():
    extra = set(kinds(config(**EVERYTHING))) - set(kinds(config(**DEPLOYMENT_MULTI)))
    assert extra == {("ServiceMonitor", "llm-router-metrics"), ("ServiceMonitor", "llm-router-backend-router-metrics"),
                     ("Issuer", "llm-router-selfsigned"), ("Certificate", "llm-router")}


def test_the_plan_puts_identity_and_tls_before_the_pods_that_use_them():
    order = kinds(config(**EVERYTHING))
    for before, after in [(("Certificate", "llm-router"), ("Deployment", "llm-router-backend-router")),
                          (("Service", "llm-router-headless"), ("Deployment", "llm-router-backend-router")),
                          (("RoleBinding", "llm-router-pod-reader"), ("Deployment", "llm-router"))]:
        assert order.index(before) < order.index(after)


def test_deployment_has_a_strategy_and_no_statefulset_fields():
    spec = compiled(**DEPLOYMENT_MULTI).workload["spec"]
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert not {"updateStrategy", "podManagementPolicy", "serviceName"} & spec.keys()


def test_statefulset_has_update_strategy_policy_and_service_name_and_no_strategy():
    spec = compiled(replicas=3, workload={"kind": "StatefulSet", "podManagementPolicy": "OrderedReady"}
                    ).workload["spec"]
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert spec["podManagementPolicy"] == "OrderedReady"
    assert spec["serviceName"] == "llm-router-headless"
    assert "strategy" not in spec


# --- the StatefulSet pin (regression) ---------------------------------------------------------

# An install that was deployed as a StatefulSet, as its stack file says it. Every field below is
# immutable on a live StatefulSet (a change would make Pulumi replace it); they must never move.
PINNED_STATEFULSET_STACK = {
    "models": [model("chat")],
    "router": {"image": ROUTER_IMAGE, "replicas": 3, "workload": {"kind": "StatefulSet"}},
}
PINNED_IMMUTABLE_FIELDS = {
    "apiVersion": "apps/v1",
    "kind": "StatefulSet",
    "name": "llm-router",
    "serviceName": "llm-router-headless",
    "podManagementPolicy": "Parallel",
    "selector": {"matchLabels": {"app.kubernetes.io/name": "llm-router", "app.kubernetes.io/component": "router"}},
    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
}


def immutable_fields(workload: dict) -> dict:
    spec = workload["spec"]
    return {
        "apiVersion": workload["apiVersion"], "kind": workload["kind"], "name": workload["metadata"]["name"],
        **{key: spec.get(key) for key in ("serviceName", "podManagementPolicy", "selector", "updateStrategy")},
    }


def test_a_pinned_statefulset_keeps_rendering_the_same_statefulset():
    workload = compile_router(load_stack_config(PINNED_STATEFULSET_STACK)).workload
    assert immutable_fields(workload) == PINNED_IMMUTABLE_FIELDS


@pytest.mark.parametrize("change", [
    {"replicas": 5},
    {"image": "nvcr.io/nvidia/llm-request-router:0.7.0"},
    {"dnsDiscovery": False},
    {"backendRouter": {"enabled": True}},
    {"tls": {"enabled": True}},
    {"resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"cpu": "4", "memory": "2Gi"}}},
    {"drainTimeoutMs": 60000},
], ids=lambda c: next(iter(c)))
def test_everyday_changes_to_a_pinned_statefulset_leave_its_immutable_fields_alone(change):
    raw = {**PINNED_STATEFULSET_STACK, "router": {**PINNED_STATEFULSET_STACK["router"], **change}}
    workload = compile_router(load_stack_config(raw)).workload
    assert immutable_fields(workload) == PINNED_IMMUTABLE_FIELDS


def test_the_default_kind_is_deployment_and_only_an_explicit_kind_changes_it():
    assert compiled().workload["kind"] == "Deployment"
    assert compiled(workload={"kind": "StatefulSet"}).workload["kind"] == "StatefulSet"
    # The migration acknowledgement changes nothing in the manifests; the guard reads it.
    acked = compiled(workload={"kind": "Deployment", "migrateFrom": "StatefulSet"})
    assert acked.workload == compiled().workload


def test_both_kinds_share_name_and_selector_so_a_migration_keeps_the_services():
    deployment = compiled(**DEPLOYMENT_MULTI)
    statefulset = compiled(**STATEFULSET_DNS)
    assert deployment.service == statefulset.service
    assert deployment.headless_service == statefulset.headless_service
    assert deployment.workload["spec"]["selector"] == statefulset.workload["spec"]["selector"]


# --- identities -------------------------------------------------------------------------------

def test_roles_are_exactly_the_charts():
    objects = compiled(**DEPLOYMENT_MULTI)
    assert objects.role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    assert objects.backend_role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}]
    assert objects.backend_role["kind"] == "Role" and objects.backend_role["metadata"]["namespace"] == "llm-serving"
    assert objects.backend_role_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "llm-router-backend-router", "namespace": "llm-serving"}]
    assert objects.role_binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "llm-router", "namespace": "llm-serving"}]


def test_existing_service_accounts_are_used_and_not_created():
    objects = compiled(replicas=2, serviceAccount="platform-router", backendRouter={"serviceAccount": "platform-br"})
    assert objects.service_account is None and objects.role is None and objects.backend_service_account is None
    assert pod_spec(objects.workload)["serviceAccountName"] == "platform-router"
    assert pod_spec(objects.backend_deployment)["serviceAccountName"] == "platform-br"
    # The backend router still needs its one grant, now bound to the given account.
    assert objects.backend_role_binding["subjects"][0]["name"] == "platform-br"


def test_the_router_pods_never_use_the_models_account():
    for objects in (compiled(), compiled(**DEPLOYMENT_MULTI)):
        assert pod_spec(objects.workload)["serviceAccountName"] != "llm-serving-model"


# --- pods -------------------------------------------------------------------------------------

def test_router_pods_are_non_root_confined_and_read_only():
    objects = compiled(**EVERYTHING)
    for manifest in (objects.workload, objects.backend_deployment):
        pod = pod_spec(manifest)
        assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsNonRoot"]) == (1000, True)
        assert pod["securityContext"]["fsGroup"] == 1000
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["enableServiceLinks"] is False
        for item in containers(manifest):
            ctx = item["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["readOnlyRootFilesystem"] is True


def test_resources_are_the_configured_requests_and_limits():
    objects = compiled(replicas=2, resources={"requests": {"cpu": "1", "memory": "1Gi"},
                                              "limits": {"cpu": "2", "memory": "2Gi"}})
    (router,) = containers(objects.workload)
    assert router["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    (backend,) = containers(objects.backend_deployment)
    assert backend["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}


def test_router_uid_is_configurable_and_not_shared_with_models():
    objects = compile_router(config(uid=10001, gid=10001))
    assert pod_spec(objects.workload)["securityContext"]["runAsUser"] == 10001
    manifests = compile_stack(config(uid=10001, gid=10001))
    server = next(m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "chat")
    assert pod_spec(server)["securityContext"]["runAsUser"] == 2000


def test_user_env_and_args_come_after_the_managed_ones():
    objects = compiled(env={"RUST_LOG": "info"}, args=["--lb-config-path=/etc/lb.json"])
    (router,) = containers(objects.workload)
    assert router["env"][-1] == {"name": "RUST_LOG", "value": "info"}
    assert router["args"][-1] == "--lb-config-path=/etc/lb.json"
    assert router["args"][0] == "--stargate-id=$(POD_NAME)"


def test_the_backend_router_runs_the_router_image_unless_overridden():
    assert containers(compiled(replicas=2).backend_deployment)[0]["image"] == ROUTER_IMAGE
    other = "nvcr.io/nvidia/llm-request-router:0.16.3"
    assert containers(compiled(replicas=2, backendRouter={"image": other}).backend_deployment)[0]["image"] == other


def test_image_pull_secrets_reach_both_pods():
    objects = compile_router(config(platform={"imagePullSecrets": ["ngc"]}, replicas=2))
    for manifest in (objects.workload, objects.backend_deployment):
        assert pod_spec(manifest)["imagePullSecrets"] == [{"name": "ngc"}]


def test_the_router_placement_reaches_the_router_and_the_backend_router_and_nothing_else():
    placed = compiled(replicas=2, nodeSelector={"pool": "cpu"},
                      tolerations=[{"key": "pool", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}])
    for manifest in (placed.workload, placed.backend_deployment):
        spec = pod_spec(manifest)
        assert spec["nodeSelector"] == {"pool": "cpu"}
        assert spec["tolerations"] == [{"key": "pool", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}]
    # Unset, neither key is rendered (an empty one would change every stack's render).
    unplaced = compiled(replicas=2)
    for manifest in (unplaced.workload, unplaced.backend_deployment):
        assert not {"nodeSelector", "tolerations"} & set(pod_spec(manifest))
    # The gateway keeps its own placement (router.gateway.nodeSelector), none here.
    gateway = next(m for m in compile_stack(config(nodeSelector={"pool": "cpu"}))
                   if m["kind"] == "Deployment" and m["metadata"]["name"] == "llm-router-gateway")
    assert "nodeSelector" not in pod_spec(gateway)


def test_multi_replica_pods_spread_over_nodes_softly():
    spread = pod_spec(compiled(**DEPLOYMENT_MULTI).workload)["topologySpreadConstraints"]
    assert spread[0]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert "topologySpreadConstraints" not in pod_spec(compiled().workload)


def test_addresses_for_clients_and_pylons():
    stack = config()
    assert endpoint_url(stack) == "http://llm-router.llm-serving.svc.cluster.local:8000"
    assert pylon_address(stack.router, "llm-serving") == "http://llm-router.llm-serving.svc.cluster.local:50071"
    multi_stack = config(replicas=2)
    assert pylon_address(multi_stack.router, "llm-serving") == (
        "http://llm-router-backend-router.llm-serving.svc.cluster.local:50071")


def test_one_definition_of_the_pylon_address_and_the_headless_name():
    """The router's outputs, the pylon's --stargate-address and the targets reader cannot drift:
    each is the same function, not a copy."""
    assert pylon_address is pylon.stargate_address
    assert headless_service_name is router_names.headless_service_name
    assert compiled().names.headless == headless_service_name("llm-router")
    # The port in that address is the one the router and backend router listen on.
    assert pylon.ROUTER_GRPC_PORT == names.GRPC_PORT == names.BACKEND_GRPC_PORT


# --- stack and schema -------------------------------------------------------------------------

def test_compile_stack_renders_the_router_after_the_models():
    manifests = compile_stack(config(**DEPLOYMENT_MULTI))
    names = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert names.index(("Service", "code")) < names.index(("ServiceAccount", "llm-router"))
    router = names.index(("Deployment", "llm-router"))
    assert names[router:router + 3] == [("Deployment", "llm-router"), ("Service", "llm-router"),
                                        ("PodDisruptionBudget", "llm-router")]
    # The gateway last: it resolves the router Service's name when it starts.
    assert names[router + 3:] == [("ConfigMap", "llm-router-gateway-config"), ("Deployment", "llm-router-gateway"),
                                  ("Service", "llm-router-gateway"), ("PodDisruptionBudget", "llm-router-gateway")]


def test_the_gpu_cluster_stack_has_a_multi_replica_deployment_with_backend_router_and_tls():
    stack = load_stack_config(read_stack_file(ROOT / "stacks" / "Pulumi.gpu-cluster.yaml"))
    objects = compile_router(stack)
    assert objects.topology.name == "deployment+backend" and objects.certificate is not None
    assert objects.service_monitor is not None and objects.backend_service_monitor is not None
    assert "*.llm-router-headless.llm-serving.svc.cluster.local" in objects.certificate["spec"]["dnsNames"]


def test_the_stacks_make_their_models_routable_and_an_open_router_is_fenced():
    """Both stacks with a router carry pylons; the gpu-cluster one pins its pylon by digest and,
    running a 0.16.2 router (no token mode), runs open behind the router's NetworkPolicy, whose
    gRPC/QUIC ingress admits only model server pods and router-side pods."""
    local = load_stack_config(read_stack_file(ROOT / "stacks" / "Pulumi.local.yaml"))
    assert local.router.pylon is not None and local.router.worker_auth.mode == "open"
    gpu = load_stack_config(read_stack_file(ROOT / "stacks" / "Pulumi.gpu-cluster.yaml"))
    assert gpu.router.pylon.image.endswith(":0.4.0")
    assert image_version(gpu.router.image) < (0, 17, 0) and gpu.router.worker_auth.mode == "open"
    policy = compile_router(gpu).network_policy
    [tunnel] = [rule for rule in policy["spec"]["ingress"] if "from" in rule and
                {"protocol": "TCP", "port": 50071} in rule["ports"]]
    assert {"podSelector": PYLON_PODS} in tunnel["from"]
    assert all("podSelector" in peer and "namespaceSelector" not in peer for peer in tunnel["from"])


SCHEMA_CASES = {
    "deployment-1": {},
    "deployment-everything": EVERYTHING,
    "statefulset-dns": STATEFULSET_DNS,
    "statefulset-no-dns-backend-existing-secret": dict(
        replicas=2, workload={"kind": "StatefulSet"}, dnsDiscovery=False,
        tls={"enabled": True, "existingSecret": "router-tls"}),
}


@pytest.mark.parametrize("section", SCHEMA_CASES.values(), ids=SCHEMA_CASES.keys())
def test_core_kinds_are_strictly_valid(section):
    checked = 0
    for manifest in router_objects(config(platform={"networkPolicy": {"enabled": True}}, **section)):
        if manifest["apiVersion"].startswith(CRD_GROUPS):
            continue
        try:
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']}: {error}")
        checked += 1
    assert checked >= 6


TOKEN_AUTH = {"image": "nvcr.io/nvidia/llm-request-router:0.18.0",
              "pylon": {"image": "nvcr.io/example/stargate-client:0.4.0"},
              "workerAuth": {"mode": "token", "secretName": "worker-auth"}}


@pytest.mark.parametrize("section", [{}, DEPLOYMENT_MULTI, STATEFULSET_DNS, {"tls": {"enabled": True}}, TOKEN_AUTH],
                         ids=["single", "multi", "statefulset", "tls", "worker-auth-token"])
def test_every_flag_the_render_sets_is_refused_in_args(section):
    """A flag the component sets, repeated in `args`, is refused at startup or wins over ours;
    validate must refuse each of them (config MANAGED_FLAGS), or the protection has a hole."""
    (router,) = containers(compiled(**section).workload)
    emitted = {arg.split("=", 1)[0] for arg in router["args"]}
    assert emitted <= set(MANAGED_FLAGS), emitted - set(MANAGED_FLAGS)
