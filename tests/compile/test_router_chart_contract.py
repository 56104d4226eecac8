"""What NVIDIA's llm-request-router chart renders, checked against our render, topology by topology.

The facts come from the chart's own render checks and templates, at ONE version:
chart 0.16.2 (Stargate 0.16.2) in the public fork devilkun/nvcf at
e07119fa60cd543fec61d30b52b6311162a53e89, directory deploy/helm/llm-request-router/. Each fact
names its file:
- MR  = scripts/check-multi-replica-render.sh
- BR  = scripts/check-backend-router-render.sh
- PKI = scripts/check-pki-render.sh
- DEP = llm-request-router/templates/deployment.yaml
- BRT = llm-request-router/templates/backend-router.yaml (+ backend-router-rbac.yaml, -servicemonitor.yaml)
- VAL = llm-request-router/values.yaml
- HLP = llm-request-router/templates/_helpers.tpl
The headless Service's port names and protocols are from NVIDIA/nvcf@df59708
templates/headless-service.yaml (HS); DK's own copy is not in the public index, and MR asserts
it has no http port, which we follow.

The router is named like the chart's fullname and deployed to the checks' namespace, so the
expected strings read exactly as the chart's checks write them. The checks are shell greps over
`helm template`; these are the same assertions, as data compared with our objects.
"""

from __future__ import annotations

import pytest

from components.compile.plan import router_plan
from components.compile.router import compile_router
from components.config import ConfigError, load_stack_config
from tests.support.builders import model

NS = "nvcf"
NAME = "llm-request-router"
HEADLESS = f"{NAME}-headless"
BACKEND = f"{NAME}-backend-router"
IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
PER_POD_TEMPLATE = f"{{pod_name}}.{HEADLESS}.{NS}.svc.cluster.local"
BACKEND_GRPC_DIAL = f"http://{BACKEND}.{NS}.svc.cluster.local:50071"
BACKEND_QUIC_DIAL = f"{BACKEND}.{NS}.svc.cluster.local:50072"


def stack_of(**router):
    return load_stack_config({
        "platform": {"namespace": NS}, "models": [model("chat")],
        "router": {"name": NAME, "image": IMAGE, **router},
    })


def render(**router):
    return compile_router(stack_of(**router))


def spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def args(workload: dict) -> list[str]:
    return spec(workload)["containers"][0]["args"]


def ports(service: dict) -> dict[str, tuple[int, str]]:
    return {p["name"]: (p["port"], p["protocol"]) for p in service["spec"]["ports"]}


# Every topology the chart supports, as our config spells it (MR renders each).
TOPOLOGIES = {
    "single-deployment": dict(replicas=1),
    "deployment+backend": dict(replicas=3),
    "statefulset-dns": dict(replicas=3, workload={"kind": "StatefulSet"}),
    "statefulset": dict(replicas=1, workload={"kind": "StatefulSet"}, dnsDiscovery=False),
}

# Flags every topology carries (DEP: always rendered; VAL defaults where a value is templated).
ALWAYS = [
    "--stargate-id=$(POD_NAME)",
    "--listen-addr=0.0.0.0:50071",
    "--http-listen-addr=0.0.0.0:8000",
    "--advertise-addr=$(POD_IP):50071",
    f"--stargate-discovery-dns-name={HEADLESS}.{NS}.svc.cluster.local",  # MR (StatefulSet), DEP
    "--pod-name=$(POD_NAME)",
    "--pod-namespace=$(POD_NAMESPACE)",
    "--watch-heartbeat-ms=5000",  # MR
    "--shutdown-drain-timeout-ms=30000",  # BR
    "--readiness-warmup-ms=60000",  # MR
    "--readiness-stabilization-sample-interval-ms=1000",  # MR
    "--readiness-stabilization-window=5",  # MR
    "--quic-connect-timeout-ms=2000",
    "--quic-request-timeout-ms=30000",
    "--metrics-port=9090",
    "--backend-connectivity=reverse",  # DEP: transport.reverseTunnelListenAddr is set by default
    "--reverse-tunnel-listen-addr=0.0.0.0:50072",
    "--reverse-tunnel-connect-timeout-ms=10000",
    "--quic-insecure",  # VAL tls.quicInsecure: true, without a TLS identity
]
# Per topology: flags that must be there, and flags that must not.
TOPOLOGY_FLAGS = {
    "single-deployment": (  # MR: single-replica direct Deployment; PKI single-replica template
        ["--disable-dns-discovery", f"--advertised-hostname-template={NAME}.{NS}.svc.cluster.local"],
        ["--grpc-pylon-dial-addr", "--reverse-tunnel-pylon-dial-addr"],
    ),
    "deployment+backend": (  # MR default render; BR zero-config render
        [f"--advertised-hostname-template={PER_POD_TEMPLATE}", f"--grpc-pylon-dial-addr={BACKEND_GRPC_DIAL}",
         f"--reverse-tunnel-pylon-dial-addr={BACKEND_QUIC_DIAL}"],
        ["--disable-dns-discovery"],
    ),
    "statefulset-dns": (  # MR StatefulSet direct mode
        [f"--advertised-hostname-template={PER_POD_TEMPLATE}", "--reverse-tunnel-pylon-dial-addr=$(POD_IP):50072"],
        ["--disable-dns-discovery", "--grpc-pylon-dial-addr"],
    ),
    "statefulset": (  # DEP: discovery.disableDnsDiscovery with one replica, no backend router
        ["--disable-dns-discovery", f"--advertised-hostname-template={NAME}.{NS}.svc.cluster.local"],
        ["--grpc-pylon-dial-addr", "--reverse-tunnel-pylon-dial-addr"],
    ),
}


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_router_flags(topology):
    rendered = render(**TOPOLOGIES[topology])
    assert rendered.topology.name == topology
    found = args(rendered.workload)
    present, absent = TOPOLOGY_FLAGS[topology]
    for flag in ALWAYS + present:
        assert found.count(flag) == 1, f"{flag} missing or repeated in {found}"
    for prefix in absent:
        assert not [a for a in found if a.split("=", 1)[0] == prefix], f"{prefix} must not be passed"
    assert set(found) == set(ALWAYS + present), "a flag the chart does not render"


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_router_container_pod_and_rollout(topology):
    rendered = render(**TOPOLOGIES[topology])
    pod = spec(rendered.workload)
    (container,) = pod["containers"]
    # DEP: downward-API env, exactly these three.
    assert container["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    # DEP + VAL service.*: http 8000, grpc 50071, metrics 9090 (TCP), reverse 50072/UDP.
    assert {p["name"]: (p["containerPort"], p["protocol"]) for p in container["ports"]} == {
        "http": (8000, "TCP"), "grpc": (50071, "TCP"), "metrics": (9090, "TCP"), "reverse": (50072, "UDP")}
    # DEP: readiness /readyz every 2 s, liveness /healthz every 5 s, on the http port.
    assert container["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "http"}, "periodSeconds": 2}
    assert container["livenessProbe"] == {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5}
    # BR: grace = ceil(drain / 1000) + 5.
    assert pod["terminationGracePeriodSeconds"] == 35
    # VAL resources (our defaults).
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"},
                                      "limits": {"cpu": "1000m", "memory": "1Gi"}}
    workload = rendered.workload["spec"]
    if rendered.workload["kind"] == "Deployment":  # MR
        assert workload["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
        assert not {"serviceName", "podManagementPolicy", "updateStrategy"} & workload.keys()
    else:  # MR
        assert (workload["serviceName"], workload["podManagementPolicy"]) == (HEADLESS, "Parallel")
        assert workload["updateStrategy"]["type"] == "RollingUpdate" and "strategy" not in workload


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_services(topology):
    rendered = render(**TOPOLOGIES[topology])
    # MR: the request-facing Service exposes http 8000 and honours readiness.
    assert ports(rendered.service)["http"] == (8000, "TCP")
    assert not rendered.service["spec"].get("publishNotReadyAddresses")
    # MR + HS: the headless Service, always: not-ready addresses published, no http port, port
    # names exactly grpc/TCP and quic/UDP (the backend router looks them up by name, BRT args).
    headless = rendered.headless_service
    assert headless["metadata"]["name"] == HEADLESS
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert ports(headless) == {"grpc": (50071, "TCP"), "quic": (50072, "UDP")}
    assert {p["targetPort"] for p in headless["spec"]["ports"]} == {"grpc", "reverse"}


@pytest.mark.parametrize("topology", ["single-deployment", "statefulset-dns", "statefulset"])
def test_no_backend_router_objects_where_the_chart_renders_none(topology):
    # BR: a disabled backend router renders none of its objects; MR: a pinned StatefulSet does
    # not infer it.
    names = [m["metadata"]["name"] for m in router_plan(stack_of(**TOPOLOGIES[topology])).objects]
    assert not [n for n in names if n.startswith(BACKEND)]


def test_backend_router_deployment():
    rendered = render(**TOPOLOGIES["deployment+backend"])
    deployment = rendered.backend_deployment
    assert deployment["metadata"]["name"] == BACKEND and deployment["spec"]["replicas"] == 2  # BR
    pod = spec(deployment)
    (container,) = pod["containers"]
    assert container["image"] == IMAGE  # BRT: falls back to the main image
    assert container["command"] == ["/usr/local/bin/stargate-k8s-router"]  # BR
    assert container["args"] == [  # BRT, in its order; BR asserts the target, template, ports, dial
        "--listen-addr=0.0.0.0:50071",
        "--reverse-tunnel-listen-addr=0.0.0.0:50072",
        "--health-listen-addr=0.0.0.0:8080",
        f"--target-namespace={NS}",
        f"--target-service-name={HEADLESS}",
        f"--advertised-hostname-template={PER_POD_TEMPLATE}",
        "--advertised-grpc-port=50071",
        f"--grpc-pylon-dial-addr={BACKEND_GRPC_DIAL}",
        "--watch-heartbeat-ms=5000",
        "--shutdown-drain-timeout-ms=30000",
        "--grpc-port-name=grpc",
        "--quic-port-name=quic",
        "--tunnel-protocol=raw-quic",
        "--quic-insecure",
    ]
    assert {p["name"]: (p["containerPort"], p["protocol"]) for p in container["ports"]} == {
        "grpc": (50071, "TCP"), "quic": (50072, "UDP"), "health": (8080, "TCP")}
    assert container["readinessProbe"] == {"httpGet": {"path": "/readyz", "port": "health"}, "periodSeconds": 2}
    assert container["livenessProbe"] == {"httpGet": {"path": "/livez", "port": "health"}, "periodSeconds": 5}
    assert container["resources"] == {"requests": {"cpu": "250m", "memory": "256Mi"},
                                      "limits": {"cpu": "2", "memory": "1Gi"}}  # VAL
    assert pod["terminationGracePeriodSeconds"] == 35  # BR
    assert pod["serviceAccountName"] == BACKEND  # BR
    (term,) = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]  # BR
    assert term["weight"] == 100 and term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_backend_router_service_rbac_and_pdb():
    rendered = render(**TOPOLOGIES["deployment+backend"])
    service = rendered.backend_service
    assert service["spec"]["sessionAffinity"] == "ClientIP"  # BR
    assert ports(service) == {"grpc": (50071, "TCP"), "quic": (50072, "UDP"), "health": (8080, "TCP")}  # BRT
    assert service["spec"]["ports"][0]["appProtocol"] == "kubernetes.io/h2c"  # BRT
    assert rendered.backend_service_account["metadata"]["name"] == BACKEND  # BR
    role, binding = rendered.backend_role, rendered.backend_role_binding
    assert (role["kind"], role["metadata"]["name"]) == ("Role", f"{BACKEND}-endpointslice-reader")  # BR
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["get", "list", "watch"]}]  # BRT rbac
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": BACKEND, "namespace": NS}]  # BR
    pdb = rendered.backend_pod_disruption_budget
    assert pdb["spec"]["maxUnavailable"] == 1  # BR
    assert pdb["spec"]["selector"] == rendered.backend_deployment["spec"]["selector"]


def test_drain_budget_rounds_up_before_the_exit_margin():
    rendered = render(replicas=3, drainTimeoutMs=30001)  # BR: 30001 ms -> 36 s on both workloads
    for workload in (rendered.workload, rendered.backend_deployment):
        assert spec(workload)["terminationGracePeriodSeconds"] == 36
        assert "--shutdown-drain-timeout-ms=30001" in args(workload)


def test_service_monitors():
    rendered = render(replicas=3, metrics={"serviceMonitor": True})
    router, backend = rendered.service_monitor, rendered.backend_service_monitor
    assert router["metadata"]["name"] == f"{NAME}-metrics"  # BRT servicemonitor.yaml
    assert router["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert ports(rendered.service)["metrics"] == (9090, "TCP")  # what the router's monitor scrapes
    assert (backend["metadata"]["name"], backend["metadata"]["namespace"]) == (f"{BACKEND}-metrics", NS)  # BR
    assert backend["spec"]["endpoints"] == [{"port": "health", "path": "/metrics", "interval": "30s"}]
    assert render(replicas=3).service_monitor is None


# --- TLS (PKI, BR) ----------------------------------------------------------------------------

def tls_parts(workload: dict) -> tuple[list, list]:
    pod = spec(workload)
    return ([v for v in pod.get("volumes", []) if v["name"] == "stargate-tls"],
            [m for m in pod["containers"][0].get("volumeMounts", []) if m["name"] == "stargate-tls"])


def test_no_tls_objects_by_default():
    rendered = render(**TOPOLOGIES["deployment+backend"])  # PKI pass 1
    assert rendered.certificate is None
    for workload in (rendered.workload, rendered.backend_deployment):
        assert tls_parts(workload) == ([], [])


@pytest.mark.parametrize("tls", [{"enabled": True}, {"enabled": True, "existingSecret": "stargate-quic-tls"}],
                         ids=["cert-manager", "existing-secret"])
def test_tls_identity_reaches_both_workloads(tls):
    rendered = render(replicas=3, tls=tls)
    secret = tls.get("existingSecret", f"{NAME}-tls")
    for workload in (rendered.workload, rendered.backend_deployment):
        found = args(workload)  # PKI pass 2, BR
        assert "--tls-cert-path=/etc/stargate/tls/tls.crt" in found
        assert "--tls-key-path=/etc/stargate/tls/tls.key" in found
        assert "--quic-insecure" not in found
    (volume,), (mount,) = tls_parts(rendered.workload)
    assert volume["secret"]["secretName"] == secret
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/stargate/tls", True)
    # Where we depart from the chart: the backend router reads the same Secret, but its
    # /etc/stargate/tls is the serving chain (tls.crt + ca.crt) a sidecar assembles, because the
    # real binary trusts only that file for its onward hop (tests/conformance/test_backend_router.py).
    backend = spec(rendered.backend_deployment)
    (volume,) = [v for v in backend["volumes"] if v["name"] == "stargate-tls"]
    assert volume["secret"]["secretName"] == secret
    (mount,) = backend["containers"][0]["volumeMounts"]
    assert (mount["name"], mount["mountPath"], mount["readOnly"]) == ("stargate-tls-chain", "/etc/stargate/tls", True)
    # VAL tls.mode existingSecret: no Certificate is rendered.
    assert (rendered.certificate is None) == ("existingSecret" in tls)


def test_certificate_covers_per_pod_names_with_the_backend_router():
    certificate = render(replicas=3, tls={"enabled": True}).certificate  # BR, HLP effectiveCertificateDnsNames
    assert f"*.{HEADLESS}.{NS}.svc.cluster.local" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["usages"][-1] == "server auth"  # VAL certificate.usages


def test_single_replica_certificate_names_the_advertised_service_host():
    names = render(tls={"enabled": True}).certificate["spec"]["dnsNames"]  # PKI single-replica
    assert f"{NAME}.{NS}.svc.cluster.local" in names
    assert not [n for n in names if n.startswith("*.")]


def test_written_names_that_miss_the_advertised_host_get_it_added():
    """HLP validateCertificateDnsNames fails such a render; we add the verified name instead (and
    hold it to allowedDomains), so the advertised host is always covered."""
    names = render(tls={"enabled": True, "dnsNames": [f"router.{NS}.svc.cluster.local"]}).certificate["spec"]["dnsNames"]
    assert names == [f"router.{NS}.svc.cluster.local", f"{NAME}.{NS}.svc.cluster.local"]
    covered = render(tls={"enabled": True, "dnsNames": [f"*.{NS}.svc.cluster.local"]}).certificate["spec"]["dnsNames"]
    assert covered == [f"*.{NS}.svc.cluster.local"]  # a one-label wildcard covers it (HLP)


# --- what the chart refuses (MR) --------------------------------------------------------------

@pytest.mark.parametrize("router, path", [
    (dict(replicas=2, backendRouter={"enabled": False}), "router.backendRouter.enabled"),
    (dict(replicas=3, workload={"kind": "StatefulSet"}, dnsDiscovery=False, backendRouter={"enabled": False}),
     "router.backendRouter.enabled"),
    (dict(workload={"kind": "DaemonSet"}), "router.workload.kind"),
], ids=["multi-deployment-without-backend", "multi-statefulset-without-discovery", "unknown-kind"])
def test_renders_the_chart_refuses_are_refused(router, path):
    with pytest.raises(ConfigError) as caught:
        render(**router)
    assert any(p.startswith(f"{path}: ") for p in caught.value.problems)
