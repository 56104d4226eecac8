"""The backend router (stargate-k8s-router) on the simulated cluster's real API server, with TLS
from a CA issuer.

The router "pod" runs on loopback; the test publishes it the way the EndpointSlice controller
would, as an EndpointSlice of the router's headless Service in a fresh namespace (address
127.0.0.1, named ports grpc/TCP and quic/UDP, targetRef = the pod's name). The backend router
watches that Service's slices with the cluster's kubeconfig and forwards pylons' registrations
(by gRPC :authority) and tunnels (by QUIC SNI) to the pod the name carries.

TLS is what ``router.tls`` with a CA issuer mounts (``stacks/Pulumi.gpu-cluster.yaml``: ClusterIssuer
internal-ca): a leaf signed by a CA for the Certificate's rendered dnsNames, the leaf alone in
tls.crt and the CA in ca.crt (cert-manager's CA issuer). Router pods serve the leaf; pylons trust
ca.crt; the backend router gets the chain its rendered sidecar assembles.
"""

from __future__ import annotations

import time

import pytest

from components.compile.router import compile_router
from testkit.stargate import chat_body, http, make_ca_issued_tls, stack_config

# The backend router watches the simulated cluster's EndpointSlices (tests/tiers.py).
pytestmark = pytest.mark.cluster

CA_ISSUER = {"enabled": True, "issuer": {"kind": "ClusterIssuer", "name": "internal-ca"}}


def ca_issued(tmp_path, namespace: str):
    """The Secret cert-manager's CA issuer writes for the rendered Certificate's names."""
    certificate = compile_router(stack_config({"replicas": 2, "tls": CA_ISSUER}, namespace=namespace)).certificate
    return make_ca_issued_tls(tmp_path / "pki", certificate["spec"]["dnsNames"])


@pytest.fixture(autouse=True)
def _kubeconfig():
    import os

    if not os.environ.get("KUBECONFIG"):
        pytest.fail("the backend-router tests need the simulated cluster (KUBECONFIG); run them through scripts/test.sh")


def test_pylons_reach_the_router_through_the_backend_router(router_stack, cluster_namespace):
    stack = router_stack(backend=True, cluster=cluster_namespace)
    assert stack.backend.alive
    reply = stack.post("/v1/chat/completions", chat_body(stream=True))
    assert reply.status == 200 and reply.sse_data()[-1] == "[DONE]"
    assert "--quic-insecure" in stack.render.backend


def test_tls_from_a_ca_issuer_through_the_backend_router(router_stack, cluster_namespace, tmp_path):
    tls = ca_issued(tmp_path, cluster_namespace.namespace)
    stack = router_stack(router={"tls": CA_ISSUER}, backend=True, tls=tls, cluster=cluster_namespace)
    # Verification on: no --quic-insecure anywhere, the pylon trusts only the CA.
    for args in (stack.render.router, stack.render.backend, stack.render.pylon[stack.model]):
        assert "--quic-insecure" not in args
    reply = stack.post("/v1/chat/completions", chat_body(stream=True))
    assert reply.status == 200, reply.body
    assert reply.sse_data()[-1] == "[DONE]" and "engine-0" in reply.body.decode()


def test_without_the_chain_the_ca_issued_leaf_fails(router_stack, cluster_namespace, tmp_path, monkeypatch):
    """The control: the chart's way (the Secret's leaf-only tls.crt given to the backend router
    as is) gets no tunnel through, which is what the chain sidecar fixes."""
    from testkit import stargate as kit

    monkeypatch.setattr(kit.RouterStack, "start_backend_sidecars", lambda self: dict(self._paths))
    monkeypatch.setattr(kit.RouterStack, "wait_registered", lambda self, count: None)
    tls = ca_issued(tmp_path, cluster_namespace.namespace)
    stack = router_stack(router={"tls": CA_ISSUER}, backend=True, tls=tls, cluster=cluster_namespace)
    deadline = time.monotonic() + 25
    statuses = []
    while time.monotonic() < deadline:
        statuses.append(stack.post("/v1/chat/completions", chat_body(stream=True), timeout_s=10).status)
        time.sleep(1)
    assert 200 not in statuses, statuses
    assert stack.active_servers() == 0


def test_a_router_pod_that_leaves_the_slices_is_no_longer_handed_out(router_stack, cluster_namespace):
    """The backend router follows the API server: with the pod's slice gone its /readyz turns
    503 (no target), and back when the slice returns."""
    stack = router_stack(backend=True, cluster=cluster_namespace)
    health = f"http://127.0.0.1:{stack.backend_ports.health}/readyz"
    assert http("GET", health).status == 200
    from components.compile.router.names import RouterNames
    from testkit.stargate import wait_until

    slice_name = f"{RouterNames.of(stack.stack.router).headless}-{stack.router_pod}"
    cluster_namespace.delete_slice(slice_name)
    wait_until(lambda: http("GET", health, timeout_s=2).status == 503, 30, "readyz 503 without targets",
               context=stack.logs)
    stack.publish_router(ready=True)
    wait_until(lambda: http("GET", health, timeout_s=2).status == 200, 30, "readyz 200 with the pod back",
               context=stack.logs)
