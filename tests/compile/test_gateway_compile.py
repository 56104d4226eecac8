"""The gateway's objects: golden YAML, strict schema, and the properties that matter one by one.

Regenerate the golden file deliberately after an intended change and review its diff:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/compile/test_gateway_compile.py
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

import components.compile.gateway
from components import children as roles
from components.compile import compile_stack
from components.compile.gateway import CONFIG_HASH_ANNOTATION, compile_gateway, config_hash, endpoint_url, settings
from components.compile.gateway.limiter import LIMITER_HEADERS, header_variable
from components.compile.gateway.monitoring import required_crds as gateway_required_crds
from components.compile.gateway.nginx import HIDDEN_RESPONSE_HEADERS, MODULES, ROUTER_REQUEST_HEADERS, settings_module
from components.compile.plan import router_plan
from components.compile.router import compile_router
from components.config import load_stack_config, read_stack_file
from components.config.gateway import TRUSTED_HEADERS
from tests.support.builders import FIXTURES, ROOT, model
from tests.support.kube_schema import assert_valid_kubernetes
from tests.support.planned import gateway_objects
from tests.support.real_crds import operator_crd, structural_schema

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
GOLDEN = FIXTURES / "golden" / "gateway.yaml"
RICH = {
    "replicas": 3,
    "models": ["chat"],
    "apiKeys": {"secretName": "gateway-keys", "tenants": [
        {"name": "team-a", "routingKey": "team-a",
         "rateLimit": {"requestsPerMinute": 600, "burst": 20, "tokensPerMinute": 120000}},
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


SCRIPT_FILE = Path(components.compile.gateway.__file__).parent / "gateway.js"
SCRIPTS = ("gateway.js", *MODULES)


def script_reference(name: str) -> str:
    return f"<components/compile/gateway/{name}, unchanged: test_the_config_map_ships_the_script>"

HASH_REFERENCE = "<hash of the files: test_a_changed_file_rolls_the_pods>"


def render() -> str:
    """The rendered config (nginx.conf, the settings module, every object), with the script and
    the files' hash by reference: the script has its own tests (tests/gateway/js), and a copy of
    it here would make every edit of the script regenerate this golden."""
    manifests = copy.deepcopy(gateway_objects(load(RICH)))
    for manifest in manifests:
        if manifest["kind"] == "ConfigMap":
            for name in SCRIPTS:
                manifest["data"][name] = script_reference(name)
        if manifest["kind"] == "Deployment":
            manifest["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION] = HASH_REFERENCE
    return yaml.dump_all(manifests, Dumper=_Dumper, sort_keys=True, default_flow_style=False)


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
    for manifest in gateway_objects(load(gateway)):
        assert_valid_kubernetes(manifest)


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
    assert container["image"] == "docker.io/library/nginx:1.26.3"
    # The start writes the pod's nameservers for nginx's resolver (into /tmp), then execs nginx
    # as the main process (tests/gateway/test_gateway_resolver.py runs this script).
    assert container["command"][:2] == ["/bin/sh", "-c"]
    assert "> /tmp/resolver.conf" in container["command"][2]
    assert container["command"][2].endswith("\nexec nginx -e stderr -c /etc/llm-gateway/nginx.conf")


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
    # The whole rate, not a share per replica: the limiter counts it for all of them.
    assert team_a.requests_per_minute == 600 and team_a.burst == 20 and team_a.routing_key == "team-a"
    assert team_a.tokens_per_minute == 120000
    assert resolved.limiter == "llm-router-gateway-limiter.serving.svc.cluster.local:8090"
    module = json.loads(settings_module(resolved).split("export default ", 1)[1].rstrip(";\n"))
    assert module["tenants"]["team-b"] == {"routingKey": None, "models": ["chat"], "tokenLimited": False}
    assert module["tenants"]["team-a"]["tokenLimited"] is True
    assert module["affinity"] == {"maxLeadingMessages": 4, "sessionHeader": "x-session-id"}
    assert settings(load({})).models == ("chat", "code")


def test_admitting_a_model_admits_its_lora_adapters():
    """An adapter is asked for by its own name (the model's pylons register it): admitted where its
    model is, for the gateway and for a tenant that lists the model, and nowhere else."""
    lora = {"enabled": True, "adapters": [{"name": "chat-sql", "repo": "acme/chat-sql"}]}
    tenants = [{"name": "team-chat", "models": ["chat"]}, {"name": "team-code", "models": ["code"]}]
    stack = load_stack_config({
        "models": [model("chat", lora=lora), model("code")],
        "router": {"image": ROUTER_IMAGE, "gateway": {"apiKeys": {"secretName": "keys", "tenants": tenants}}},
    })
    resolved = settings(stack)
    assert resolved.models == ("chat", "chat-sql", "code")
    assert [t.models for t in resolved.tenants] == [("chat", "chat-sql"), ("code",)]
    narrowed = load_stack_config({"models": [model("chat", lora=lora), model("code")],
                                  "router": {"image": ROUTER_IMAGE, "gateway": {"models": ["code"]}}})
    assert settings(narrowed).models == ("code",)


def test_the_nginx_conf_asks_the_limiter_for_limited_tenants_and_hides_internal_headers():
    data = compile_gateway(load(RICH)).config_map["data"]
    conf = data["nginx.conf"]
    assert "team-a 1;" in conf and "team-b 1;" not in conf  # team-b has no limit: no call
    assert conf.count("auth_request /_gw/limit;") == 5  # every endpoint: chat, Responses, embeddings, models, others
    assert "server llm-router-gateway-limiter.serving.svc.cluster.local:8090;" in conf
    assert "error_page 500 502 503 504 = @gw_limit_open;" in conf  # fail open
    assert "limit_req" not in conf
    buckets = json.loads(data["limiter_config.js"].split("export default ", 1)[1].rstrip(";\n"))
    # 600/min: one per 100 ms, 20 ahead; 120000 tokens/min: 0.5 ms each, a minute's worth.
    assert buckets["tenants"] == {"team-a": {"requestIntervalMs": 100.0, "requestToleranceMs": 2000.0,
                                             "tokenIntervalMs": 0.5, "tokenToleranceMs": 60000}}
    assert "worker_processes 1;" in data["limiter.conf"]
    for name in HIDDEN_RESPONSE_HEADERS:
        assert f"proxy_hide_header {name};" in conf
    # 4 to the router (streams, the model list, the fold server's two), 1 to the fold server, 2 to the limiter
    assert conf.count("proxy_pass_request_headers off;") == 7
    # The router by name, resolved per request through the pod's nameservers (resolver.conf).
    assert 'default llm-router.serving.svc.cluster.local:8000;' in conf
    assert "include /tmp/resolver.conf;" in conf and "upstream gw_router" not in conf


def test_the_limiter_is_one_isolated_pod_only_with_tenant_limits():
    gateway = compile_gateway(load(RICH))
    limiter = gateway.limiter
    spec = limiter.deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    container = spec["template"]["spec"]["containers"][0]
    assert container["command"][-1] == "/etc/llm-gateway/limiter.conf"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsNonRoot"] is True
    assert spec["template"]["spec"]["automountServiceAccountToken"] is False
    policy = limiter.network_policy["spec"]
    assert policy["egress"] == [] and policy["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "llm-router", "app.kubernetes.io/component": "gateway"}}}]
    egress = gateway.network_policy["spec"]["egress"]
    assert {"protocol": "TCP", "port": 8090} in [port for rule in egress for port in rule["ports"]]
    order = [m["metadata"]["name"] for m in gateway_objects(load(RICH))]
    assert order.index("llm-router-gateway-limiter") < order.index("llm-router-gateway")
    unlimited = compile_gateway(load({"apiKeys": {"secretName": "k", "tenants": [{"name": "team-b"}]}}))
    assert unlimited.limiter is None and "limiter.conf" not in unlimited.config_map["data"]
    assert "auth_request /_gw/limit" not in unlimited.config_map["data"]["nginx.conf"]
    assert "auth_request /_gw/auth;" in unlimited.config_map["data"]["nginx.conf"]  # the key check only


def test_the_gateway_placement_reaches_the_gateway_and_its_limiter_and_not_the_router():
    edge = [{"key": "edge", "operator": "Exists", "effect": "NoExecute"}]
    placed = compile_gateway(load({**RICH, "nodeSelector": {"pool": "edge"}, "tolerations": edge}))
    for deployment in (placed.deployment, placed.limiter.deployment):
        spec = deployment["spec"]["template"]["spec"]
        assert spec["nodeSelector"] == {"pool": "edge"} and spec["tolerations"] == edge
    router = compile_router(load({"nodeSelector": {"pool": "edge"}, "tolerations": edge}))
    assert not {"nodeSelector", "tolerations"} & set(router.workload["spec"]["template"]["spec"])
    unplaced = compile_gateway(load(RICH))
    for deployment in (unplaced.deployment, unplaced.limiter.deployment):
        assert not {"nodeSelector", "tolerations"} & set(deployment["spec"]["template"]["spec"])


def test_the_config_map_ships_the_script_and_nginx_calls_only_what_it_exports():
    """The ConfigMap carries gateway.js byte for byte as it is in the repository (the file the
    nginx tests run), and every njs handler nginx.conf names (``gw.<name>``) is one the script's
    default export holds: a handler renamed on one side only would fail at nginx start."""
    data = compile_gateway(load(RICH)).config_map["data"]
    # RICH has rate-limited tenants: the limiter's files ride in the same ConfigMap.
    assert set(data) == {"nginx.conf", *SCRIPTS, "gateway_config.js", "limiter.conf", "limiter.js",
                         "limiter_config.js"}
    for name in SCRIPTS:
        assert data[name] == (SCRIPT_FILE.parent / name).read_text(encoding="utf-8")
    # Each module gateway.js or its modules import by bare name is shipped beside it (njs finds it
    # on js_path), and none is shipped that nothing imports.
    imported = {name for script in SCRIPTS
                for name in re.findall(r"^import \w+ from '([\w.]+\.js)';", data[script], re.MULTILINE)}
    assert imported - {"gateway_config.js"} == set(MODULES)
    # The handlers come before the `pure` member (the functions the script's own tests import).
    exported = re.search(r"^export default \{(.*?)(?:pure:|\};)", data["gateway.js"], re.MULTILINE | re.DOTALL)
    assert exported, "gateway.js has no `export default {...};`"
    names = {name.strip() for name in re.sub(r"//[^\n]*", "", exported.group(1)).split(",")} - {""}
    handlers = set(re.findall(r"\bgw\.(\w+)", data["nginx.conf"]))
    assert "js_import gw from gateway.js;" in data["nginx.conf"]
    assert handlers >= {"tenant", "chat", "responses", "embeddings", "models", "unsupported", "foldHeaders"}
    assert handlers <= names, handlers - names


def test_the_files_hash_covers_the_script():
    files = dict(compile_gateway(load(RICH)).config_map["data"])
    before = config_hash(files)
    files["gateway.js"] += "// edited\n"
    assert config_hash(files) != before


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
    planned = {c.role: c.manifest for c in router_plan(load({"enabled": False}, network_policy=True)).children}
    for role, manifest in planned.items():
        if role != roles.ROUTER_NETWORK_POLICY:
            assert next(c.manifest for c in router_plan(load({}, network_policy=True)).children if c.role == role) == manifest, role
    assert before.network_policy != after.network_policy


def test_the_service_can_be_exposed_with_its_annotations():
    service = compile_gateway(load({**RICH, "serviceType": "LoadBalancer",
                                    "serviceAnnotations": {"example.com/lb-scheme": "internal"}})).service
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {"example.com/lb-scheme": "internal"}
    assert_valid_kubernetes(service)
    assert "annotations" not in compile_gateway(load({})).service["metadata"]


def test_metrics_on_add_a_cluster_only_service_and_a_service_monitor_for_the_health_port():
    stack = load_stack_config({
        "platform": {"namespace": "serving", "metrics": {"enabled": True, "labels": {"release": "prom"}}},
        "models": [model("chat")],
        "router": {"image": ROUTER_IMAGE, "gateway": {"serviceType": "LoadBalancer", "apiKeys": {
            "secretName": "k", "tenants": [{"name": "a"}]}}},
    })
    gateway = compile_gateway(stack)
    service, monitor = gateway.metrics_service, gateway.service_monitor
    assert service["spec"]["type"] == "ClusterIP"  # the API Service is a LoadBalancer: not there
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8081, "targetPort": "health", "protocol": "TCP"}]
    assert service["spec"]["selector"] == gateway.service["spec"]["selector"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert [p["name"] for p in gateway.service["spec"]["ports"]] == ["http"]
    assert gateway_required_crds(monitor)[0]["crds"] == ["servicemonitors.monitoring.coreos.com"]
    assert compile_gateway(load({})).service_monitor is None and compile_gateway(load({})).metrics_service is None


def test_every_header_set_for_the_router_is_a_trusted_one():
    """One list: what nginx.conf sets for the router (besides Host, Content-Type and Accept) is in
    the config's TRUSTED_HEADERS, the list that also refuses them as a session header."""
    conf = compile_gateway(load(RICH)).config_map["data"]["nginx.conf"]
    # Only the locations that proxy to the router (the limiter's check sets its own headers).
    router_locations = [block for block in conf.split("location ")[1:] if "proxy_pass http://$gw_router" in block]
    assert len(router_locations) >= 2  # the stream and fold paths at least
    set_names = {line.split()[1].lower() for block in router_locations for line in block.splitlines()
                 if line.strip().startswith("proxy_set_header")}
    assert set_names - {"host", "content-type", "accept", "content-length"} <= set(TRUSTED_HEADERS)
    assert {"x-request-id", "x-model", "x-input-tokens", "x-routing-key", "x-cache-affinity-key"} <= set_names
    assert {name for name, _ in ROUTER_REQUEST_HEADERS} <= set(TRUSTED_HEADERS)


def test_the_header_names_have_one_source_the_scripts_read_them_from_their_settings():
    """The scripts name no header the gateway sets, hides or sends its limiter: those are Python's
    (ROUTER_REQUEST_HEADERS, HIDDEN_RESPONSE_HEADERS, LIMITER_HEADERS), nginx.conf is rendered from
    them and the scripts read the limiter's from their generated settings."""
    data = compile_gateway(load(RICH)).config_map["data"]
    owned = ({name for name, _ in ROUTER_REQUEST_HEADERS} | set(HIDDEN_RESPONSE_HEADERS) - {"server"}
             | set(LIMITER_HEADERS.values()) | set(TRUSTED_HEADERS))
    for script in (*SCRIPTS, "limiter.js"):
        quoted = {m.lower() for m in re.findall(r"""['"]([A-Za-z][A-Za-z0-9-]*)['"]""", data[script])}
        assert not quoted & owned, (script, quoted & owned)

    def settings_of(name: str) -> dict:
        return json.loads(data[name].split("export default ", 1)[1].rstrip(";\n"))

    assert settings_of("gateway_config.js")["limiterHeaders"] == LIMITER_HEADERS
    assert settings_of("limiter_config.js")["headers"] == LIMITER_HEADERS
    conf = data["nginx.conf"]
    for header in LIMITER_HEADERS.values():
        assert f"proxy_set_header {header} " in conf or header_variable("upstream_http", header) in conf, header


# --- router.gateway.tls ---------------------------------------------------------------------------

TLS = {"tls": {"enabled": True}}


def cert_manager_schema(kind: str) -> dict:
    """cert-manager's real CRD (v1.19.1, the operators cache), strict: undeclared fields fail."""
    return structural_schema(operator_crd("cert-manager", f"cert-manager.io_{kind.lower()}s.yaml"), "v1")


def assert_valid_cert_manager(manifest: dict) -> None:
    try:
        jsonschema.validate(manifest, cert_manager_schema(manifest["kind"]))
    except jsonschema.ValidationError as error:
        pytest.fail(f"{manifest['kind']}/{manifest['metadata']['name']} is not a valid cert-manager object: {error.message}")


def test_tls_issues_a_certificate_for_the_service_names_from_a_self_signed_issuer():
    objects = compile_gateway(load(TLS))
    certificate, issuer = objects.certificate, objects.issuer
    assert issuer["kind"] == "Issuer" and issuer["spec"] == {"selfSigned": {}}
    assert issuer["metadata"]["name"] == "llm-router-gateway-selfsigned"
    spec = certificate["spec"]
    assert spec["secretName"] == "llm-router-gateway-tls"
    assert spec["issuerRef"] == {"name": "llm-router-gateway-selfsigned", "kind": "Issuer", "group": "cert-manager.io"}
    assert spec["dnsNames"] == ["llm-router-gateway.serving.svc", "llm-router-gateway.serving.svc.cluster.local"]
    assert spec["usages"] == ["digital signature", "server auth"]
    assert spec["privateKey"]["rotationPolicy"] == "Always"
    # The Issuer and Certificate before the pods that mount the Secret.
    kinds = [m["kind"] for m in gateway_objects(load(TLS))]
    assert kinds.index("Issuer") < kinds.index("Certificate") < kinds.index("Deployment")
    for manifest in (issuer, certificate):
        assert_valid_cert_manager(manifest)


def test_tls_from_a_named_issuer_adds_the_written_names():
    objects = compile_gateway(load({"tls": {
        "enabled": True, "issuer": {"name": "internal-ca"}, "dnsNames": ["llm.example.com"],
        "allowedDomains": ["serving.svc", "serving.svc.cluster.local", "example.com"], "secretName": "gw-cert"}}))
    assert objects.issuer is None
    spec = objects.certificate["spec"]
    assert spec["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert spec["dnsNames"][-1] == "llm.example.com" and spec["secretName"] == "gw-cert"
    assert_valid_cert_manager(objects.certificate)
    assert [r["crds"] for r in components.compile.gateway.required_crds(objects)] == [
        ["certificates.cert-manager.io", "clusterissuers.cert-manager.io"]]


def test_the_cert_manager_check_refuses_a_misspelt_field():
    """Guards the guard: the CRD schema must reject an unknown field, or the checks above prove nothing."""
    certificate = copy.deepcopy(compile_gateway(load(TLS)).certificate)
    certificate["spec"]["dnsName"] = ["x"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(certificate, cert_manager_schema("Certificate"))


def test_tls_mounts_the_secret_read_only_and_serves_https_on_the_client_port():
    objects = compile_gateway(load(TLS))
    spec = objects.deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "llm-router-gateway-tls"
    assert volume["secret"]["defaultMode"] == 0o440 and spec["securityContext"]["fsGroup"] == 101
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "tls"]
    assert mount == {"name": "tls", "mountPath": "/etc/llm-gateway/tls", "readOnly": True}
    assert [p["name"] for p in container["ports"]] == ["https", "health"]
    # Probes and scraping stay plain, on the health port.
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert objects.service["spec"]["ports"] == [
        {"name": "https", "port": 8000, "targetPort": "https", "protocol": "TCP", "appProtocol": "https"}]
    stack = load(TLS)
    assert endpoint_url(stack) == "https://llm-router-gateway.serving.svc.cluster.local:8000"
    conf = objects.config_map["data"]["nginx.conf"]
    assert re.search(r"^\s*listen 8080 ssl;$", conf, re.M) and "ssl_protocols TLSv1.2 TLSv1.3;" in conf
    assert "ssl_certificate $gw_tls_dir/tls.crt;" in conf and "default /etc/llm-gateway/tls;" in conf
    assert re.search(r"^\s*listen 8081;$", conf, re.M)  # the health port: no ssl
    for manifest in gateway_objects(stack):
        if not manifest["apiVersion"].startswith("cert-manager.io/"):
            assert_valid_kubernetes(manifest)
    # Without TLS: none of it, and the pods keep their identity (no fsGroup).
    plain = compile_gateway(load({}))
    assert plain.certificate is None and plain.issuer is None
    assert "fsGroup" not in plain.deployment["spec"]["template"]["spec"]["securityContext"]
    assert " ssl" not in plain.config_map["data"]["nginx.conf"].split("listen 8080")[1].split("\n")[0]


def test_tls_from_an_existing_secret_renders_no_cert_manager_object():
    objects = compile_gateway(load({"tls": {"enabled": True, "existingSecret": "gw-tls"}}))
    assert objects.certificate is None and objects.issuer is None
    (volume,) = [v for v in objects.deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "gw-tls"
    assert components.compile.gateway.required_crds(objects) == []


def test_the_gpu_cluster_stack_serves_its_gateway_over_tls_from_the_internal_ca():
    stack = load_stack_config(read_stack_file(ROOT / "stacks" / "Pulumi.gpu-cluster.yaml"))
    objects = compile_gateway(stack)
    assert objects.certificate["spec"]["issuerRef"] == {"name": "internal-ca", "kind": "ClusterIssuer",
                                                        "group": "cert-manager.io"}
    assert_valid_cert_manager(objects.certificate)
    assert endpoint_url(stack).startswith("https://llm-router-gateway.llm-serving.svc.cluster.local:8000")
