"""The router section: topology decided at validation time, errors at the field to change.

Tables: (id, router section, expected field path, message fragment) for refusals, and
(id, router section, resolved topology) for what valid configs become.
"""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from components.config.router_names import within
from components.config.stack import fronted_models
from contract.workload_kind import kind_change_problem
from tests.support.builders import model

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
BACKEND_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.3"
BACKEND = {"image": BACKEND_IMAGE}
TWO_MODELS = (model("chat"), model("code"))


def router(**fields) -> dict:
    return {"image": ROUTER_IMAGE, **fields}


def load(section: dict, models=TWO_MODELS):
    return load_stack_config({"models": list(models), "router": section})


def problems_of(section: dict, models=TWO_MODELS) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(section, models)
    return caught.value.problems


# (id, router section, field path, message fragment)
BAD = [
    ("deployment-multi-backend-disabled",
     router(replicas=3, backendRouter={"enabled": False, **BACKEND}),
     "router.backendRouter.enabled", "needs the backend router"),
    ("deployment-multi-backend-disabled-names-the-fix",
     router(replicas=2, backendRouter={"enabled": False}),
     "router.backendRouter.enabled", "set backendRouter.enabled: auto"),
    ("deployment-dns-discovery", router(dnsDiscovery=True), "router.dnsDiscovery", "StatefulSet only"),
    ("deployment-dns-discovery-off", router(dnsDiscovery=False), "router.dnsDiscovery", "StatefulSet only"),
    ("deployment-pod-management-policy", router(workload={"podManagementPolicy": "OrderedReady"}),
     "router.workload.podManagementPolicy", "StatefulSet only"),
    ("statefulset-no-discovery-at-all",
     router(replicas=3, workload={"kind": "StatefulSet"}, dnsDiscovery=False, backendRouter={"enabled": False}),
     "router.backendRouter.enabled", "no way to discover"),
    ("retired-port", router(port=8080), "router.port", "serves HTTP on 8000"),
    ("retired-health-path", router(healthPath="/health"), "router.healthPath", "/readyz and /healthz"),
    ("retired-backend-port", router(backendRouter={"port": 50051}), "router.backendRouter.port", "50071"),
    ("retired-backend-pdb", router(backendRouter={"pdbMinAvailable": 1}), "router.backendRouter.pdbMinAvailable",
     "maxUnavailable: 1"),
    ("retired-backend-rbac-scope", router(backendRouter={"rbacScope": "cluster"}),
     "router.backendRouter.rbacScope", "own namespace only"),
    ("retired-backend-service-monitor", router(backendRouter={"serviceMonitor": True}),
     "router.backendRouter.serviceMonitor", "router.metrics.serviceMonitor"),
    ("requests-above-limits", router(resources={"requests": {"cpu": "2", "memory": "1Gi"},
                                                "limits": {"cpu": "1", "memory": "1Gi"}}),
     "router.resources.requests.cpu", "exceeds limits.cpu"),
    ("backend-account-invalid", router(backendRouter={"serviceAccount": "Bad_Name"}),
     "router.backendRouter.serviceAccount", ""),
    ("drain-too-short", router(drainTimeoutMs=10), "router.drainTimeoutMs", "greater than or equal to 1000"),
    ("managed-flag-in-args", router(args=["--metrics-port=9999"]), "router.args.0",
     "'--metrics-port' is set by the router component"),
    ("managed-bare-flag-in-args", router(args=["--verbose", "--quic-insecure"]), "router.args.1",
     "'--quic-insecure'"),
    ("stargate-env-alias", router(env={"STARGATE_HTTP_LISTEN_ADDR": "0.0.0.0:1"}),
     "router.env.STARGATE_HTTP_LISTEN_ADDR", "set by the router component"),
    ("existing-secret-with-issuer", router(tls={"enabled": True, "existingSecret": "router-tls",
                                                "issuer": {"name": "ca"}}),
     "router.tls.issuer", "existingSecret replaces"),
    ("existing-secret-without-tls", router(tls={"existingSecret": "router-tls"}), "router.tls.enabled",
     "set enabled: true"),
    ("migrate-from-same-kind", router(workload={"kind": "StatefulSet", "migrateFrom": "StatefulSet"}),
     "router.workload.migrateFrom", "already asks for"),
    ("kind-unknown", router(workload={"kind": "DaemonSet"}), "router.workload.kind", "'Deployment' or 'StatefulSet'"),
    ("enabled-unknown", router(backendRouter={"enabled": "sometimes"}), "router.backendRouter.enabled",
     "not one of auto, true, false"),
    ("image-missing", {"replicas": 1}, "router.image", "required"),
    ("image-short", router(image="llm-request-router:0.6.0"), "router.image", "not fully qualified"),
    ("image-latest", router(image="nvcr.io/nvidia/llm-request-router:latest"), "router.image", "':latest'"),
    ("backend-image-short", router(backendRouter={"image": "backend:1"}), "router.backendRouter.image",
     "not fully qualified"),
    ("replicas-zero", router(replicas=0), "router.replicas", "greater than or equal to 1"),
    ("uid-root", router(uid=0), "router.uid", "no pod runs as root"),
    ("name-invalid", router(name="LLM_Router"), "router.name", "not a valid router name"),
    ("name-too-long", router(name="r" * 41), "router.name", "at most 40"),
    ("name-collides-with-model", router(name="chat"), "router.name", "collides with model 'chat'"),
    ("unknown-model", router(models=["chat", "llama"]), "router.models.1", "'llama' is not a model of this stack"),
    ("model-twice", router(models=["chat", "chat"]), "router.models.1", "listed twice"),
    ("fronts-nothing", router(models=[]), "router.models", "fronts no models"),
    ("reserved-env", router(env={"POD_IP": "1.2.3.4"}), "router.env.POD_IP", "set by the router component"),
    ("unknown-key", router(replica=2), "router.replica", "unknown field"),
    ("tls-name-outside-allowed",
     router(tls={"enabled": True, "dnsNames": ["llm.example.com", "llm.evil.com"], "allowedDomains": ["example.com"]}),
     "router.tls.dnsNames.1", "'llm.evil.com' is outside the allowed domains (example.com)"),
    ("tls-suffix-is-not-a-subdomain",
     router(tls={"enabled": True, "dnsNames": ["notexample.com"], "allowedDomains": ["example.com"]}),
     "router.tls.dnsNames.0", "outside the allowed domains"),
    ("tls-wildcard-above-allowed",
     router(tls={"enabled": True, "dnsNames": ["*.com"], "allowedDomains": ["example.com"]}),
     "router.tls.dnsNames.0", "outside"),
    ("tls-external-name-default-allowed",
     router(tls={"enabled": True, "dnsNames": ["llm.example.com"]}),
     "router.tls.dnsNames.0", "llm-serving.svc, llm-serving.svc.cluster.local"),
    ("tls-bad-dns-name", router(tls={"enabled": True, "dnsNames": ["Bad_Name"]}), "router.tls.dnsNames.0",
     "not a DNS name"),
    ("tls-wildcard-domain", router(tls={"enabled": True, "allowedDomains": ["*.example.com"]}),
     "router.tls.allowedDomains.0", "without a wildcard"),
    ("tls-default-wildcard-outside-allowed",
     router(replicas=2, tls={"enabled": True, "dnsNames": ["llm.example.com"], "allowedDomains": ["example.com"]}),
     "router.tls.allowedDomains", "'*.llm-router-headless.llm-serving.svc.cluster.local' by default"),
    ("tls-default-service-names-outside-allowed",
     router(tls={"enabled": True, "allowedDomains": ["example.com"]}),
     "router.tls.allowedDomains", "'llm-router.llm-serving.svc' by default"),
    ("tls-issuer-kind", router(tls={"enabled": True, "issuer": {"kind": "Vault", "name": "ca"}}),
     "router.tls.issuer.kind", "'Issuer' or 'ClusterIssuer'"),
]


@pytest.mark.parametrize("section, path, fragment", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_router_config_is_reported_at_its_field(section, path, fragment):
    problems = problems_of(section)
    at_path = [p for p in problems if p.startswith(f"{path}: ")]
    assert at_path, f"no problem reported at {path!r}; got {problems}"
    assert any(fragment in p for p in at_path), f"{fragment!r} not in {at_path}"


def test_a_stack_without_models_cannot_have_a_router():
    assert problems_of(router(), models=()) == [
        "router: the router fronts no models; declare models, or remove the router section"
    ]


# (id, router section, topology name, backend router, DNS discovery, discovery order). The names
# are the status output's `router.topology`; the rules are chart 0.16.2's (_helpers.tpl
# backendRouterEnabled; deployment.yaml $disableDnsDiscovery) plus `auto` for a StatefulSet
# without DNS.
TOPOLOGIES = [
    ("deployment-1", router(), "single-deployment", False, False, ("self",)),
    ("deployment-1-backend-forced", router(backendRouter={"enabled": True, **BACKEND}),
     "deployment+backend", True, True, ("backend-router", "dns")),
    ("deployment-1-backend-off", router(backendRouter={"enabled": False}), "single-deployment", False, False, ("self",)),
    ("deployment-3-auto", router(replicas=3), "deployment+backend", True, True, ("backend-router", "dns")),
    ("deployment-3-true", router(replicas=3, backendRouter={"enabled": True}),
     "deployment+backend", True, True, ("backend-router", "dns")),
    ("statefulset-1", router(workload={"kind": "StatefulSet"}), "statefulset-dns", False, True, ("dns",)),
    ("statefulset-3-dns", router(replicas=3, workload={"kind": "StatefulSet"}), "statefulset-dns", False, True, ("dns",)),
    ("statefulset-3-dns-and-backend",
     router(replicas=3, workload={"kind": "StatefulSet"}, backendRouter={"enabled": True}),
     "statefulset-dns+backend", True, True, ("backend-router", "dns")),
    ("statefulset-3-no-dns-auto",
     router(replicas=3, workload={"kind": "StatefulSet"}, dnsDiscovery=False),
     "statefulset+backend", True, False, ("backend-router",)),
    ("statefulset-1-no-dns", router(workload={"kind": "StatefulSet"}, dnsDiscovery=False),
     "statefulset", False, False, ("self",)),
]


@pytest.mark.parametrize("section, name, backend, dns, discovery", [c[1:] for c in TOPOLOGIES],
                         ids=[c[0] for c in TOPOLOGIES])
def test_topology_follows_kind_replicas_and_switches(section, name, backend, dns, discovery):
    topology = load(section).router.topology
    assert (topology.name, topology.backend_router, topology.dns_discovery, topology.discovery) == (
        name, backend, dns, discovery)
    assert topology.reason


def test_every_problem_of_the_router_is_reported_at_once():
    problems = problems_of(router(replicas=3, dnsDiscovery=True, backendRouter={"enabled": False},
                                  workload={"podManagementPolicy": "Parallel"}))
    assert sorted(p.split(":")[0] for p in problems) == [
        "router.backendRouter.enabled", "router.dnsDiscovery", "router.workload.podManagementPolicy",
    ]


def test_defaults():
    config = load(router()).router
    assert config.workload.kind == "Deployment"
    assert config.backend_router.enabled == "auto" and config.backend_router.image is None
    assert config.dns_discovery is None and config.tls.enabled is False
    # chart 0.16.2 values.yaml: runAsUser/fsGroup 1000, shutdown.drainTimeoutMs 30000, resources.
    assert (config.uid, config.gid, config.drain_timeout_ms) == (1000, 1000, 30000)
    assert config.resources.model_dump() == {"requests": {"cpu": "100m", "memory": "128Mi"},
                                             "limits": {"cpu": "1000m", "memory": "1Gi"}}
    assert config.backend_router.resources.model_dump() == {"requests": {"cpu": "250m", "memory": "256Mi"},
                                                            "limits": {"cpu": "2", "memory": "1Gi"}}
    assert config.backend_router.replicas == 2
    assert config.models is None


def test_router_fronts_every_model_unless_narrowed():
    names = ["chat", "code"]
    assert fronted_models(load(router()).router, names) == ("chat", "code")
    assert fronted_models(load(router(models=["code"])).router, names) == ("code",)


def test_tls_names_within_allowed_domains_are_accepted():
    config = load(router(tls={
        "enabled": True, "issuer": {"name": "internal-ca"},
        "dnsNames": ["llm.example.com", "*.llm.example.com", "example.com", "llm-router.llm-serving.svc.cluster.local"],
        "allowedDomains": ["example.com", "llm-serving.svc.cluster.local"],
    })).router
    assert config.tls.issuer.kind == "ClusterIssuer"


def test_an_existing_secret_needs_no_allowed_domains():
    """No Certificate is issued, so there is nothing to hold to allowedDomains."""
    config = load(router(replicas=2, tls={"enabled": True, "existingSecret": "router-tls"})).router
    assert config.tls.issued is False and config.tls.existing_secret == "router-tls"


def test_tls_settings_are_not_checked_while_tls_is_off():
    loaded = load(router(tls={"enabled": False, "dnsNames": ["llm.elsewhere.org"], "allowedDomains": ["example.com"]}))
    assert loaded.router.tls.enabled is False
    assert loaded.router.tls.dns_names == ("llm.elsewhere.org",)


@pytest.mark.parametrize("name, domain, inside", [
    ("example.com", "example.com", True),
    ("a.example.com", "example.com", True),
    ("a.b.example.com", "example.com", True),
    ("*.example.com", "example.com", True),
    ("*.a.example.com", "example.com", True),
    ("badexample.com", "example.com", False),
    ("example.com.evil.org", "example.com", False),
    ("*.com", "example.com", False),
])
def test_within(name, domain, inside):
    assert within(name, domain) is inside


# --- workload-kind migration ------------------------------------------------------------------

@pytest.mark.parametrize("deployed, kind, migrate_from, refused", [
    (None, "Deployment", None, False),  # first deployment
    (None, "StatefulSet", None, False),
    ("StatefulSet", "StatefulSet", None, False),  # the pin
    ("Deployment", "Deployment", "StatefulSet", False),  # after a migration, the leftover ack is harmless
    ("StatefulSet", "Deployment", None, True),  # an edit or a changed default: refused
    ("Deployment", "StatefulSet", None, True),
    ("StatefulSet", "Deployment", "StatefulSet", False),  # acknowledged
    ("Deployment", "StatefulSet", "Deployment", False),
    ("StatefulSet", "Deployment", "Deployment", True),  # acknowledges the wrong kind
])
def test_a_kind_switch_needs_migrate_from_naming_the_deployed_kind(deployed, kind, migrate_from, refused):
    assert (kind_change_problem(deployed, kind, migrate_from) is not None) is refused


def test_kind_switch_message_says_both_ways_out():
    message = kind_change_problem("StatefulSet", "Deployment", None, kind_explicit=False)
    assert message.startswith("router.workload.kind: the router is deployed as a StatefulSet")
    assert "by default (workload.kind is unset)" in message
    assert "pin workload.kind: StatefulSet" in message
    assert "workload.migrateFrom: StatefulSet" in message
