"""The gateway's objects: golden YAML, strict schema, and the properties that matter one by one.

Regenerate the golden file deliberately after an intended change and review its diff:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compile/test_gateway_compile.py
"""

from __future__ import annotations

import difflib
import json
import os
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from components.compile import compile_stack
from components.compile.gateway import CONFIG_HASH_ANNOTATION, compile_gateway, endpoint_url, settings
from components.compile.gateway.nginx import HIDDEN_RESPONSE_HEADERS, settings_module
from components.compile.router import compile_router
from components.config import load_stack_config
from tests.support.builders import FIXTURES, model

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
GOLDEN = FIXTURES / "golden" / "gateway.yaml"
GATEWAY_JS = Path(__file__).resolve().parents[2] / "components" / "compile" / "gateway" / "gateway.js"
K8S_VERSION = kubernetes_validate.latest_version()
RICH = {
    "replicas": 3,
    "models": ["chat"],
    "apiKeys": {"secretName": "gateway-keys", "tenants": [
        {"name": "team-a", "routingKey": "team-a", "rateLimit": {"requestsPerMinute": 600, "burst": 20}},
        {"name": "team-b", "models": ["chat"]},
    ]},
    "affinity": {"sessionHeader": "x-session-id"},
}


def load(gateway: dict | None = None, network_policy: bool = True, **router):
    return load_stack_config({
        "platform": {"namespace": "serving", "networkPolicy": {"enabled": network_policy}, "imagePullSecrets": ["regcred"]},
        "models": [model("chat"), model("code")],
        "router": {"image": ROUTER_IMAGE, **({"gateway": gateway} if gateway is not None else {}), **router},
    })


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ConfigMap's files) as literal blocks, so a diff reads like the file."""


_Dumper.add_representer(str, lambda dumper, value: dumper.represent_scalar(
    "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None))


def render() -> str:
    return yaml.dump_all(compile_gateway(load(RICH)).in_order(), Dumper=_Dumper, sort_keys=True, default_flow_style=False)


def test_gateway_matches_golden():
    actual = render()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(actual)
    expected = GOLDEN.read_text()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), actual.splitlines(keepends=True),
                                            fromfile="golden/gateway.yaml", tofile="compile_gateway(RICH)"))
        pytest.fail(f"rendered gateway differs from {GOLDEN}; if intended, rerun with UPDATE_GOLDEN=1\n{diff}",
                    pytrace=False)


@pytest.mark.parametrize("gateway", [RICH, {}, {"replicas": 1}], ids=["rich", "default", "one-replica"])
def test_objects_are_strictly_valid_kubernetes(gateway):
    for manifest in compile_gateway(load(gateway)).in_order():
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def pod(gateway=None) -> dict:
    return compile_gateway(load(gateway)).deployment["spec"]["template"]


def test_pods_run_unprivileged_with_a_read_only_root():
    spec = pod()["spec"]
    (container,) = spec["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["runAsNonRoot"] is True
    assert context["runAsUser"] == 101 and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]} and context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    # nginx writes its pid and temp files only under the /tmp emptyDir.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["command"][0] == "nginx" and container["image"] == "docker.io/library/nginx:1.26.3"


def test_probes_use_the_health_port():
    (container,) = pod()["spec"]["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_more_than_one_replica_gets_a_pdb_and_node_spread():
    objects = compile_gateway(load({"replicas": 2}))
    assert objects.pod_disruption_budget["spec"]["maxUnavailable"] == 1
    assert objects.deployment["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    single = compile_gateway(load({"replicas": 1}))
    assert single.pod_disruption_budget is None
    assert "topologySpreadConstraints" not in single.deployment["spec"]["template"]["spec"]


def test_a_changed_file_rolls_the_pods():
    before = pod({})["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    after = pod({"requestTimeoutSeconds": 30})["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    assert before != after


def test_api_keys_come_from_the_secret_mounted_read_only():
    spec = pod(RICH)["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "api-keys"]
    assert volume["secret"]["secretName"] == "gateway-keys"
    (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "api-keys"]
    assert mount["readOnly"] is True
    assert settings(load(RICH)).keys_file == "/etc/llm-gateway/keys/keys"
    assert "api-keys" not in [v["name"] for v in pod({})["spec"]["volumes"]]


def test_settings_resolve_models_tenants_and_the_router_address():
    resolved = settings(load(RICH))
    assert resolved.upstream == "llm-router.serving.svc.cluster.local:8000"
    assert resolved.models == ("chat",)
    team_a = resolved.tenants[0]
    # 600 per minute across 3 replicas: each enforces 200.
    assert team_a.requests_per_minute == 200 and team_a.burst == 20 and team_a.routing_key == "team-a"
    module = json.loads(settings_module(resolved).split("export default ", 1)[1].rstrip(";\n"))
    assert module["tenants"]["team-b"] == {"routingKey": None, "models": ["chat"]}
    assert module["affinity"] == {"maxLeadingMessages": 4, "sessionHeader": "x-session-id"}
    assert settings(load({})).models == ("chat", "code")


def test_the_nginx_conf_limits_each_rated_tenant_and_hides_internal_headers():
    conf = compile_gateway(load(RICH)).config_map["data"]["nginx.conf"]
    assert "limit_req_zone $gw_rate_key_0 zone=gw_tenant_0:1m rate=200r/m;" in conf
    assert "gw_tenant_1" not in conf  # team-b has no limit
    assert "limit_req zone=gw_tenant_0 burst=20 nodelay;" in conf
    for name in HIDDEN_RESPONSE_HEADERS:
        assert f"proxy_hide_header {name};" in conf
    assert conf.count("proxy_pass_request_headers off;") == 3
    assert "server llm-router.serving.svc.cluster.local:8000;" in conf


def test_the_config_map_ships_the_script_and_nginx_calls_only_what_it_exports():
    """The ConfigMap carries gateway.js byte for byte as it is in the repository (the file the
    nginx tests run), and every njs handler nginx.conf names (``gw.<name>``) is one the script's
    default export holds: a handler renamed on one side only would fail at nginx start."""
    data = compile_gateway(load(RICH)).config_map["data"]
    assert set(data) == {"nginx.conf", "gateway.js", "gateway_config.js"}
    assert data["gateway.js"] == GATEWAY_JS.read_text(encoding="utf-8")
    exported = re.search(r"^export default \{([^}]*)\};$", data["gateway.js"], re.MULTILINE)
    assert exported, "gateway.js has no `export default {...};` line"
    handlers = set(re.findall(r"\bgw\.(\w+)", data["nginx.conf"]))
    assert "js_import gw from gateway.js;" in data["nginx.conf"]
    assert handlers >= {"tenant", "chat", "responses", "embeddings", "models", "unsupported", "foldHeaders", "foldBody"}
    assert handlers <= {name.strip() for name in exported.group(1).split(",")}


def test_clients_call_the_gateway_service_on_8000():
    stack = load({})
    service = compile_gateway(stack).service
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    assert endpoint_url(stack) == "http://llm-router-gateway.serving.svc.cluster.local:8000"


def test_gateway_off_or_no_router_renders_nothing():
    assert compile_gateway(load({"enabled": False})) is None
    names = [m["metadata"]["name"] for m in compile_stack(load({"enabled": False}))]
    assert not [n for n in names if "gateway" in n]
    assert compile_gateway(load_stack_config({"models": [model("chat")]})) is None


def test_adding_the_gateway_leaves_the_router_serving_as_it_was():
    """An update that turns the gateway on (a stack deployed before it existed) changes no router
    object but its NetworkPolicy: the workload does not roll and its Service keeps serving the
    clients that still call it, while the gateway comes up beside it."""
    before = compile_router(load({"enabled": False}, network_policy=True))
    after = compile_router(load({}, network_policy=True))
    for key in before.ORDER:
        if key != "network_policy":
            assert getattr(before, key) == getattr(after, key), key
    assert before.network_policy != after.network_policy


def test_the_service_can_be_exposed_with_its_annotations():
    service = compile_gateway(load({**RICH, "serviceType": "LoadBalancer",
                                    "serviceAnnotations": {"example.com/lb-scheme": "internal"}})).service
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {"example.com/lb-scheme": "internal"}
    kubernetes_validate.validate(service, K8S_VERSION, strict=True)
    assert "annotations" not in compile_gateway(load({})).service["metadata"]
