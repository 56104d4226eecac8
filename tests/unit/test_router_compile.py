"""Router compilers: one topology per test, RBAC asserted exactly, rollout fields per kind, the
StatefulSet pin regression, secure pods, and strict schema validation of every core kind."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from components.compile import compile_stack
from components.compile.router import RouterManifests, compile_router
from components.config import load_stack_config, read_stack_file
from unit_helpers import ROOT, containers, model, nim_model, pod_spec

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.6.0"
BACKEND_IMAGE = "nvcr.io/nvidia/llm-backend-router:0.6.0"
K8S_VERSION = kubernetes_validate.latest_version()
CRD_GROUPS = ("cert-manager.io/", "monitoring.coreos.com/")  # no schema shipped: checked by asserts


def config(stack_models=(model("chat"), model("code")), platform=None, **section):
    raw = {"models": list(stack_models), "router": {"image": ROUTER_IMAGE, **section}}
    if platform:
        raw["platform"] = platform
    return load_stack_config(raw)


def compiled(**section) -> RouterManifests:
    return compile_router(config(**section))


def env(manifest: dict, container: str = "router") -> dict[str, str]:
    (found,) = [c for c in containers(manifest) if c["name"] == container]
    return {e["name"]: e.get("value") for e in found["env"]}


def kinds(manifests: RouterManifests) -> list[tuple[str, str]]:
    return [(m["kind"], m["metadata"]["name"]) for m in manifests.in_order()]


STATEFULSET_DNS = dict(replicas=3, workload={"kind": "StatefulSet"})
DEPLOYMENT_MULTI = dict(replicas=3, backendRouter={"image": BACKEND_IMAGE})
EVERYTHING = dict(
    replicas=3, backendRouter={"image": BACKEND_IMAGE, "serviceMonitor": True},
    tls={"enabled": True, "dnsNames": ["llm.example.com"], "allowedDomains": ["example.com"]},
)


# --- topologies -------------------------------------------------------------------------------

def test_single_replica_deployment_discovers_only_itself():
    objects = compiled()
    assert kinds(objects) == [("Deployment", "llm-router"), ("Service", "llm-router")]
    assert env(objects.workload)["ROUTER_DISCOVERY"] == "self"
    assert "ROUTER_BACKEND_ROUTER" not in env(objects.workload)
    assert "ROUTER_PEER_DNS" not in env(objects.workload)


def test_multi_replica_deployment_gets_the_backend_router():
    objects = compiled(**DEPLOYMENT_MULTI)
    assert kinds(objects) == [
        ("ServiceAccount", "llm-router-backend"),
        ("Role", "llm-router-backend-endpointslices"),
        ("RoleBinding", "llm-router-backend-endpointslices"),
        ("Deployment", "llm-router-backend"),
        ("Service", "llm-router-backend"),
        ("PodDisruptionBudget", "llm-router-backend"),
        ("Deployment", "llm-router"),
        ("Service", "llm-router"),
        ("PodDisruptionBudget", "llm-router"),
    ]
    router_env = env(objects.workload)
    assert router_env["ROUTER_DISCOVERY"] == "backend-router"
    assert router_env["ROUTER_BACKEND_ROUTER"] == "llm-router-backend.llm-serving.svc.cluster.local:50051"
    assert env(objects.backend_deployment, "backend-router")["BACKEND_ROUTER_WATCH_SERVICES"] == "chat,code"


def test_multi_replica_deployment_with_backend_router_disabled_is_refused():
    from components.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        config(replicas=3, backendRouter={"enabled": False})
    assert caught.value.problems[0].startswith("router.backendRouter.enabled: a Deployment with 3 replicas")


def test_statefulset_with_dns_discovery_gets_a_headless_service():
    objects = compiled(**STATEFULSET_DNS)
    assert kinds(objects) == [
        ("Service", "llm-router-headless"), ("StatefulSet", "llm-router"),
        ("Service", "llm-router"), ("PodDisruptionBudget", "llm-router"),
    ]
    headless = objects.headless_service["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert headless["selector"] == objects.workload["spec"]["selector"]["matchLabels"]
    assert env(objects.workload)["ROUTER_DISCOVERY"] == "dns"
    assert env(objects.workload)["ROUTER_PEER_DNS"] == "llm-router-headless.llm-serving.svc.cluster.local"


def test_statefulset_without_dns_discovery_has_no_headless_service_but_keeps_its_service_name():
    objects = compiled(workload={"kind": "StatefulSet"}, dnsDiscovery=False)
    assert objects.headless_service is None
    assert [k for k, _ in kinds(objects)] == ["StatefulSet", "Service"]
    # serviceName is immutable: toggling DNS discovery must never replace the StatefulSet.
    assert objects.workload["spec"]["serviceName"] == "llm-router-headless"
    assert env(objects.workload)["ROUTER_DISCOVERY"] == "self"


def test_multi_replica_statefulset_without_dns_uses_the_backend_router():
    objects = compiled(replicas=2, workload={"kind": "StatefulSet"}, dnsDiscovery=False,
                       backendRouter={"image": BACKEND_IMAGE})
    assert objects.backend_deployment is not None and objects.headless_service is None
    assert env(objects.workload)["ROUTER_DISCOVERY"] == "backend-router"


# --- rollout fields per kind ------------------------------------------------------------------

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
    {"dnsDiscovery": False, "backendRouter": {"image": BACKEND_IMAGE}},
    {"backendRouter": {"enabled": True, "image": BACKEND_IMAGE}},
    {"tls": {"enabled": True}},
    {"resources": {"cpu": "2", "memory": "2Gi"}},
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


def test_both_kinds_share_name_and_selector_so_a_migration_keeps_the_service():
    deployment = compiled(**DEPLOYMENT_MULTI)
    statefulset = compiled(**STATEFULSET_DNS)
    assert deployment.service == statefulset.service
    assert deployment.workload["spec"]["selector"] == statefulset.workload["spec"]["selector"]


# --- backend router RBAC ----------------------------------------------------------------------

def test_backend_router_role_is_exactly_get_list_watch_on_endpointslices():
    objects = compiled(**DEPLOYMENT_MULTI)
    assert objects.backend_role == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": "llm-router-backend-endpointslices",
            "namespace": "llm-serving",
            "labels": {
                "app.kubernetes.io/name": "llm-router",
                "app.kubernetes.io/component": "backend-router",
                "app.kubernetes.io/instance": "llm-router",
                "app.kubernetes.io/part-of": "llm-serving",
                "app.kubernetes.io/managed-by": "pulumi",
            },
        },
        "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                   "verbs": ["get", "list", "watch"]}],
    }
    binding = objects.backend_role_binding
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "llm-router-backend-endpointslices"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "llm-router-backend", "namespace": "llm-serving"}]
    assert pod_spec(objects.backend_deployment)["serviceAccountName"] == "llm-router-backend"


def test_cluster_scope_uses_a_cluster_role_with_the_same_single_rule():
    objects = compiled(replicas=2, backendRouter={"image": BACKEND_IMAGE, "rbacScope": "cluster"})
    role, binding = objects.backend_role, objects.backend_role_binding
    assert (role["kind"], binding["kind"]) == ("ClusterRole", "ClusterRoleBinding")
    assert role["metadata"]["name"] == "llm-serving-llm-router-backend-endpointslices"
    assert "namespace" not in role["metadata"] and "namespace" not in binding["metadata"]
    assert role["rules"] == compiled(**DEPLOYMENT_MULTI).backend_role["rules"]
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["subjects"][0]["namespace"] == "llm-serving"


def test_only_the_backend_router_mounts_an_api_token():
    objects = compiled(**EVERYTHING)
    assert pod_spec(objects.backend_deployment)["automountServiceAccountToken"] is True
    assert objects.backend_service_account["automountServiceAccountToken"] is False
    assert pod_spec(objects.workload)["automountServiceAccountToken"] is False
    # The router runs as the models' ServiceAccount, which is bound to no Role.
    assert pod_spec(objects.workload)["serviceAccountName"] == "llm-serving-model"


def test_component_labels():
    objects = compiled(**EVERYTHING)
    assert objects.workload["metadata"]["labels"]["app.kubernetes.io/component"] == "router"
    assert objects.workload["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "router"
    for manifest in (objects.backend_role, objects.backend_role_binding, objects.backend_deployment,
                     objects.backend_service, objects.backend_pod_disruption_budget, objects.service_monitor):
        assert manifest["metadata"]["labels"]["app.kubernetes.io/component"] == "backend-router", manifest["kind"]


def test_backend_pdb_and_service_monitor():
    objects = compiled(**EVERYTHING)
    assert objects.backend_pod_disruption_budget["spec"] == {
        "minAvailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "llm-router",
                                     "app.kubernetes.io/component": "backend-router"}},
    }
    monitor = objects.service_monitor
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    # A ServiceMonitor selects Services by their labels: the backend Service must carry them.
    labels = objects.backend_service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["llm-serving"]}
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert {p["name"] for p in objects.backend_service["spec"]["ports"]} == {"grpc", "metrics"}
    assert compiled(**DEPLOYMENT_MULTI).service_monitor is None


def test_router_pdb_only_with_several_replicas():
    assert compiled().pod_disruption_budget is None
    assert compiled(**DEPLOYMENT_MULTI).pod_disruption_budget["spec"]["maxUnavailable"] == 1


# --- TLS --------------------------------------------------------------------------------------

def test_tls_with_self_signed_issuer_by_default():
    objects = compiled(tls={"enabled": True})
    assert objects.issuer == {
        "apiVersion": "cert-manager.io/v1", "kind": "Issuer",
        "metadata": objects.issuer["metadata"], "spec": {"selfSigned": {}},
    }
    cert = objects.certificate["spec"]
    assert cert["issuerRef"] == {"name": "llm-router-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
    assert cert["dnsNames"] == ["llm-router.llm-serving.svc", "llm-router.llm-serving.svc.cluster.local"]
    assert cert["secretName"] == "llm-router-tls"
    assert cert["privateKey"]["rotationPolicy"] == "Always"


def test_tls_with_an_existing_issuer_creates_none():
    objects = compiled(tls={"enabled": True, "issuer": {"kind": "ClusterIssuer", "name": "internal-ca"},
                            "dnsNames": ["llm.example.com"], "allowedDomains": ["example.com"],
                            "secretName": "router-cert"})
    assert objects.issuer is None
    cert = objects.certificate["spec"]
    assert cert["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert cert["dnsNames"] == ["llm.example.com"]
    volumes = {v["name"]: v for v in pod_spec(objects.workload)["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "router-cert", "defaultMode": 0o440}


def test_tls_reaches_the_pod_probes_and_service():
    objects = compiled(tls={"enabled": True})
    (router,) = pod_spec(objects.workload)["containers"]
    assert router["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert router["ports"][0]["name"] == "https"
    assert objects.service["spec"]["ports"][0]["name"] == "https"
    assert env(objects.workload)["ROUTER_TLS_CERT_FILE"].endswith("/tls.crt")
    # The key is group-readable only: fsGroup makes the router's group own it.
    assert pod_spec(objects.workload)["securityContext"]["fsGroup"] == 65532


def test_no_tls_objects_without_tls():
    objects = compiled(**DEPLOYMENT_MULTI)
    assert objects.issuer is None and objects.certificate is None
    assert "fsGroup" not in pod_spec(objects.workload)["securityContext"]


# --- pods -------------------------------------------------------------------------------------

def test_router_pods_are_non_root_confined_and_read_only():
    objects = compiled(**EVERYTHING)
    for manifest in (objects.workload, objects.backend_deployment):
        pod = pod_spec(manifest)["securityContext"]
        assert (pod["runAsUser"], pod["runAsGroup"], pod["runAsNonRoot"]) == (65532, 65532, True)
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        for item in containers(manifest):
            ctx = item["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["privileged"] is False
            assert ctx["capabilities"] == {"drop": ["ALL"]} and ctx["readOnlyRootFilesystem"] is True
            assert ctx["runAsUser"] == 65532
            assert item["resources"]["limits"]["memory"] == item["resources"]["requests"]["memory"]


def test_router_uid_is_configurable_and_not_shared_with_models():
    objects = compile_router(config(uid=10001, gid=10001))
    assert pod_spec(objects.workload)["securityContext"]["runAsUser"] == 10001
    manifests = compile_stack(config(uid=10001, gid=10001))
    server = next(m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == "chat")
    assert pod_spec(server)["securityContext"]["runAsUser"] == 2000


def test_router_is_told_every_fronted_model_endpoint():
    objects = compile_router(config(stack_models=(model("chat"), model("code"), nim_model("nim")), models=["chat", "nim"]))
    assert json.loads(env(objects.workload)["ROUTER_MODELS"]) == {
        "chat": "http://chat.llm-serving.svc.cluster.local:8000",
        "nim": "http://nim.llm-serving.svc.cluster.local:8000",
    }


def test_user_env_and_args_are_appended():
    objects = compiled(env={"RUST_LOG": "info"}, args=["--verbose"])
    (router,) = pod_spec(objects.workload)["containers"]
    assert router["env"][-1] == {"name": "RUST_LOG", "value": "info"} and router["args"] == ["--verbose"]


def test_image_pull_secrets_reach_both_pods():
    objects = compile_router(config(platform={"imagePullSecrets": ["ngc"]}, replicas=2,
                                    backendRouter={"image": BACKEND_IMAGE}))
    for manifest in (objects.workload, objects.backend_deployment):
        assert pod_spec(manifest)["imagePullSecrets"] == [{"name": "ngc"}]


def test_multi_replica_pods_spread_over_nodes_softly():
    spread = pod_spec(compiled(**DEPLOYMENT_MULTI).workload)["topologySpreadConstraints"]
    assert spread[0]["whenUnsatisfiable"] == "ScheduleAnyway"
    assert "topologySpreadConstraints" not in pod_spec(compiled().workload)


# --- stack and schema -------------------------------------------------------------------------

def test_compile_stack_renders_the_router_after_the_models():
    manifests = compile_stack(config(**DEPLOYMENT_MULTI))
    names = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    assert names.index(("Service", "code")) < names.index(("ServiceAccount", "llm-router-backend"))
    assert names[-3:] == [("Deployment", "llm-router"), ("Service", "llm-router"), ("PodDisruptionBudget", "llm-router")]
    assert compile_stack(load_stack_config({"models": [model("chat")]}))[-1]["kind"] == "Service"


def test_the_gpu_cluster_stack_has_a_multi_replica_deployment_with_backend_router_and_tls():
    stack = load_stack_config(read_stack_file(ROOT / "stacks" / "Pulumi.gpu-cluster.yaml"))
    objects = compile_router(stack)
    assert objects.topology.kind == "Deployment" and objects.topology.replicas > 1
    assert objects.topology.backend_router and objects.certificate is not None
    assert objects.workload["spec"]["template"]["spec"]["containers"][0]["image"].startswith("nvcr.io/")


SCHEMA_CASES = {
    "deployment-1": {},
    "deployment-everything": EVERYTHING,
    "statefulset-dns": STATEFULSET_DNS,
    "statefulset-no-dns-backend-cluster-scope": dict(
        replicas=2, workload={"kind": "StatefulSet"}, dnsDiscovery=False,
        backendRouter={"image": BACKEND_IMAGE, "rbacScope": "cluster"}, tls={"enabled": True}),
}


@pytest.mark.parametrize("section", SCHEMA_CASES.values(), ids=SCHEMA_CASES.keys())
def test_core_kinds_are_strictly_valid(section):
    checked = 0
    for manifest in compiled(**section).in_order():
        if manifest["apiVersion"].startswith(CRD_GROUPS):
            continue
        try:
            kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']}: {error}")
        checked += 1
    assert checked >= 2
