"""The router.gateway section: defaults, and refusals reported at the field to change."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from components.config.gateway import DEFAULT_IMAGE
from tests.support.builders import model

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
TWO_MODELS = (model("chat"), model("code"))
KEYS = {"secretName": "gateway-keys", "tenants": [{"name": "team-a"}]}


def load(gateway: dict, models=TWO_MODELS, **router):
    return load_stack_config({"models": list(models), "router": {"image": ROUTER_IMAGE, "gateway": gateway, **router}})


def problems_of(gateway: dict, **router) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(gateway, **router)
    return caught.value.problems


BAD = [
    ("unknown-key", {"port": 80}, "router.gateway.port", ""),
    ("short-image", {"image": "nginx:1.26.3"}, "router.gateway.image", "not fully qualified"),
    ("latest-image", {"image": "docker.io/library/nginx:latest"}, "router.gateway.image", ":latest"),
    ("root", {"uid": 0}, "router.gateway.uid", "no pod runs as root"),
    ("zero-replicas", {"replicas": 0}, "router.gateway.replicas", ""),
    ("service-type", {"serviceType": "ExternalName"}, "router.gateway.serviceType", "ClusterIP"),
    ("exposed-without-keys", {"serviceType": "LoadBalancer"}, "router.gateway.serviceType", "set apiKeys"),
    ("model-not-fronted", {"models": ["chat", "nope"]}, "router.gateway.models.1", "not a model the router fronts"),
    ("tenant-model-not-admitted", {"models": ["chat"], "apiKeys": {**KEYS, "tenants": [{"name": "a", "models": ["code"]}]}},
     "router.gateway.apiKeys.tenants.0.models.0", "add it to gateway.models"),
    ("tenant-twice", {"apiKeys": {**KEYS, "tenants": [{"name": "a"}, {"name": "a"}]}},
     "router.gateway.apiKeys.tenants.1.name", "listed twice"),
    ("no-tenants", {"apiKeys": {**KEYS, "tenants": []}}, "router.gateway.apiKeys.tenants", ""),
    ("bad-routing-key", {"apiKeys": {**KEYS, "tenants": [{"name": "a", "routingKey": "has space"}]}},
     "router.gateway.apiKeys.tenants.0.routingKey", ""),
    ("zero-rate", {"apiKeys": {**KEYS, "tenants": [{"name": "a", "rateLimit": {"requestsPerMinute": 0}}]}},
     "router.gateway.apiKeys.tenants.0.rateLimit.requestsPerMinute", ""),
    ("limit-of-nothing", {"apiKeys": {**KEYS, "tenants": [{"name": "a", "rateLimit": {}}]}},
     "router.gateway.apiKeys.tenants.0.rateLimit.requestsPerMinute", "set requestsPerMinute and/or tokensPerMinute"),
    ("burst-without-rate", {"apiKeys": {**KEYS, "tenants": [{"name": "a", "rateLimit": {"tokensPerMinute": 1000,
                                                                                           "burst": 5}}]}},
     "router.gateway.apiKeys.tenants.0.rateLimit.burst", "set requestsPerMinute or remove burst"),
    ("zero-tokens", {"apiKeys": {**KEYS, "tenants": [{"name": "a", "rateLimit": {"tokensPerMinute": 0}}]}},
     "router.gateway.apiKeys.tenants.0.rateLimit.tokensPerMinute", ""),
    ("session-header-is-trusted", {"affinity": {"sessionHeader": "x-routing-key"}},
     "router.gateway.affinity.sessionHeader", "sets or consumes itself"),
    ("session-header-not-a-name", {"affinity": {"sessionHeader": "x session"}},
     "router.gateway.affinity.sessionHeader", "not a header name"),
    ("name-is-the-routers", {"name": "llm-router"}, "router.gateway.name", "already a name of the router"),
    ("requests-above-limits", {"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}},
     "router.gateway.resources.requests.cpu", "exceeds limits.cpu"),
    # The memory bound: 64Mi + 128 requests x 1Mi + 1.25 x 64Mi of bodies + 2 folds x (20 x
    # maxResponseBytes + 4 x maxBodyBytes).
    ("answer-over-the-memory-limit", {"maxResponseBytes": 64 * 1024 * 1024}, "router.gateway.maxResponseBytes",
     "lower maxResponseBytes to at most 5452595, lower inFlight.maxRequests or inFlight.maxBodyBytes, or raise "
     "router.gateway.resources.limits.memory to at least 2864Mi"),
    ("bound-over-a-lowered-limit", {"resources": {"limits": {"cpu": "1", "memory": "128Mi"}}},
     "router.gateway.resources.limits.memory", "raise router.gateway.resources.limits.memory to at least 464Mi"),
    ("folds-over-the-memory-limit", {"inFlight": {"maxFolds": 8}}, "router.gateway.inFlight.maxFolds",
     "lower inFlight.maxFolds to at most 2"),
    ("bodies-over-the-tmp-volume", {"inFlight": {"maxBodyBytes": 256 * 1024 * 1024},
                                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
     "router.gateway.inFlight.maxBodyBytes", "over the /tmp volume's 256Mi (the kubelet would evict the pod); "
     "lower inFlight.maxBodyBytes to at most 243138560"),
    ("hold-per-model-over-total", {"hold": {"timeoutSeconds": 60, "maxPerModel": 40, "maxTotal": 20}},
     "router.gateway.hold.maxPerModel", "lower maxPerModel to at most 20 or raise maxTotal"),
    ("hold-past-the-deadline", {"requestTimeoutSeconds": 30, "hold": {"timeoutSeconds": 60}},
     "router.gateway.hold.timeoutSeconds", "lower hold.timeoutSeconds to at most 30 or raise requestTimeoutSeconds"),
    ("hold-too-long", {"hold": {"timeoutSeconds": 3601}}, "router.gateway.hold.timeoutSeconds", ""),
    ("tls-unknown-key", {"tls": {"enabled": True, "port": 8443}}, "router.gateway.tls.port", "valid keys here"),
    ("tls-name-outside-domains", {"tls": {"enabled": True, "dnsNames": ["llm.example.com"]}},
     "router.gateway.tls.dnsNames.0", "add its domain to router.gateway.tls.allowedDomains"),
    ("tls-domains-without-the-service", {"tls": {"enabled": True, "allowedDomains": ["example.com"]}},
     "router.gateway.tls.allowedDomains", "add 'llm-serving.svc' and 'llm-serving.svc.cluster.local'"),
    ("tls-secret-while-off", {"tls": {"existingSecret": "gw-tls"}}, "router.gateway.tls.enabled",
     "set enabled: true, or remove existingSecret"),
    ("tls-secret-and-issuer", {"tls": {"enabled": True, "existingSecret": "gw-tls", "issuer": {"name": "ca"}}},
     "router.gateway.tls.issuer", "remove it, or remove existingSecret"),
    ("tls-issuer-kind", {"tls": {"enabled": True, "issuer": {"name": "ca", "kind": "Vault"}}},
     "router.gateway.tls.issuer.kind", ""),
]


@pytest.mark.parametrize("gateway, path, fragment", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_gateway_config_is_reported_at_its_field(gateway, path, fragment):
    problems = problems_of(gateway)
    at_path = [p for p in problems if p.startswith(f"{path}: ")]
    assert at_path, f"no problem reported at {path!r}; got {problems}"
    assert any(fragment in p for p in at_path), f"{fragment!r} not in {at_path}"


@pytest.mark.parametrize("taken", ["llm-router-gateway", "llm-router-gateway-limiter", "llm-router-gateway-metrics"])
def test_a_model_named_like_the_gateway_collides(taken):
    with pytest.raises(ConfigError) as caught:
        load({}, models=(model("chat"), model(taken)))
    assert any(f"collides with model '{taken}'" in p for p in caught.value.problems)


def test_defaults():
    gateway = load({}).router.gateway
    assert gateway.enabled and gateway.image == DEFAULT_IMAGE and gateway.replicas == 2
    assert gateway.uid == 101 and gateway.api_keys is None and gateway.affinity.enabled
    assert gateway.resolved_name("llm-router") == "llm-router-gateway"
    # A stream of 4 MiB, folded at ~20 bytes a byte beside nginx's 64Mi: five at once in 512Mi.
    assert gateway.max_response_bytes == 4 * 1024 * 1024 and gateway.resources.limits.memory == "512Mi"


def test_the_default_burst_is_a_seconds_worth_of_requests_at_least_one():
    def burst(limit: dict) -> int:
        tenants = load({"apiKeys": {**KEYS, "tenants": [{"name": "a", "rateLimit": limit}]}}).router.gateway.api_keys.tenants
        return tenants[0].rate_limit.resolved_burst()
    assert burst({"requestsPerMinute": 600}) == 10
    assert burst({"requestsPerMinute": 10}) == 1  # two simultaneous requests pass
    assert burst({"requestsPerMinute": 601}) == 11
    assert burst({"requestsPerMinute": 600, "burst": 0}) == 0


def test_session_header_is_lowercased():
    assert load({"affinity": {"sessionHeader": "X-Session-Id"}}).router.gateway.affinity.session_header == "x-session-id"


def test_gateway_off_skips_its_checks():
    assert not load({"enabled": False, "models": ["nope"]}).router.gateway.enabled


def test_affinity_off_is_refused_where_the_load_balancer_requires_the_key():
    lb = {"models": {"code": {"algorithm": "pulsar", "requireCacheAffinityKey": True}}}
    problems = problems_of({"affinity": {"enabled": False}}, loadBalancer=lb)
    assert any(p.startswith("router.gateway.affinity.enabled: ") and "for code" in p for p in problems), problems
    assert load({}, loadBalancer=lb).router.gateway.affinity.enabled


def test_tls_is_off_by_default_and_names_its_secret():
    assert not load({}).router.gateway.tls.enabled and load({}).router.gateway.tls_secret("llm-router") is None
    gateway = load({"tls": {"enabled": True}}).router.gateway
    assert gateway.tls_secret("llm-router") == "llm-router-gateway-tls" and gateway.tls.issued
    assert load({"tls": {"enabled": True, "existingSecret": "s"}}).router.gateway.tls_secret("llm-router") == "s"
    # Off with settings kept (how a feature is paused): accepted, nothing checked.
    assert not load({"tls": {"enabled": False, "dnsNames": ["llm.example.com"]}}).router.gateway.tls.enabled


def test_the_gateway_may_not_share_the_routers_tls_secret():
    problems = problems_of({"tls": {"enabled": True, "secretName": "shared"}},
                           tls={"enabled": True, "secretName": "shared"})
    assert any(p.startswith("router.gateway.tls: ") and "also the router's" in p for p in problems), problems
