"""Stargate's and stargate-k8s-router's command lines, per release line (``router.release``).

``chart-0.16`` is chart 0.16.2's render, flag for flag. ``public-0.4`` (the public Stargate 0.4.0
build, NVIDIA/nvcf@fadc0f8) is the same render without the flags that build does not define
(``components.config.router_release``: the router's readiness gate, the backend router's
``--advertised-grpc-port``, ``--grpc-pylon-dial-addr``, ``--watch-heartbeat-ms`` and
``--shutdown-drain-timeout-ms``); every flag it keeps is in that build's CLI, and the conformance
suite (``tests/conformance``) starts the real binaries with it.

Source of every flag: devilkun/nvcf@e07119fa, chart 0.16.2, ``templates/deployment.yaml`` (the
router's ``args``) and ``templates/backend-router.yaml`` (the backend router's). Values the chart
takes from ``values.yaml`` are the chart's defaults unless our config exposes them (drain
timeout, TLS). The chart's NVCF-specific worker-auth endpoint, Vault and OpenTelemetry flags are
left out: they point at NVCF services a plain cluster does not have.

Worker auth is the one place the render goes beyond 0.16.2's flag set: ``workerAuth.mode: token``
adds ``--worker-auth-file`` (``components.compile.pylon.router_worker_auth``), a flag of newer
Stargate images; validation (``components.config.pylon``) refuses token mode for a router image
tagged 0.16.x or older, so a 0.16.2 stack never renders a flag its binary would reject.
``mode: open`` adds nothing, which is how 0.16.2 runs open.
"""

from __future__ import annotations

from ...config.router import Topology
from ...config.router_names import advertised_hostname
from ...config.router_release import RELEASES, flag_name
from ...config.stack import StackConfig
from ..pylon import backend_grpc_uri, router_worker_auth
from .lb import lb_args
from .names import (
    BACKEND_GRPC_PORT,
    BACKEND_HEALTH_PORT,
    BACKEND_QUIC_PORT,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    QUIC_PORT,
    TLS_CERT,
    TLS_KEY,
    RouterNames,
    in_cluster,
)

# chart 0.16.2 values.yaml defaults the template always renders.
WATCH_HEARTBEAT_MS = 5000          # discovery.watchHeartbeatMs
READINESS_WARMUP_MS = 60000        # readiness.warmupMs
STABILIZATION_INTERVAL_MS = 1000   # readiness.stabilizationSampleIntervalMs
STABILIZATION_WINDOW = 5           # readiness.stabilizationWindow
QUIC_CONNECT_TIMEOUT_MS = 2000     # transport.quicConnectTimeoutMs
QUIC_REQUEST_TIMEOUT_MS = 30000    # transport.quicRequestTimeoutMs
REVERSE_CONNECT_TIMEOUT_MS = 10000  # transport.reverseTunnelConnectTimeoutMs


def reverse_dial_addr(names: RouterNames, namespace: str) -> str:
    """host:port pylons open the QUIC tunnel to, through the backend router (no scheme)."""
    return f"{in_cluster(names.backend, namespace)}:{BACKEND_QUIC_PORT}"


def tls_args(stack: StackConfig) -> list[str]:
    if stack.router.tls.enabled:
        return [f"--tls-cert-path={TLS_CERT}", f"--tls-key-path={TLS_KEY}"]
    # The chart's default (tls.quicInsecure: true): without a mounted identity Stargate self-signs
    # and pylons skip verification; with one, verification is on.
    return ["--quic-insecure"]


def for_release(stack: StackConfig, args: list[str], lacks: tuple[str, ...]) -> list[str]:
    """``args`` without the flags of the chart render that the stack's release line lacks."""
    if not lacks:
        return args
    return [arg for arg in args if flag_name(arg) not in lacks]


def router_args(stack: StackConfig, names: RouterNames, topology: Topology) -> list[str]:
    lacks = RELEASES[stack.router.release].router_lacks
    return for_release(stack, chart_router_args(stack, names, topology), lacks)


def backend_args(stack: StackConfig, names: RouterNames) -> list[str]:
    lacks = RELEASES[stack.router.release].backend_lacks
    return for_release(stack, chart_backend_args(stack, names), lacks)


def chart_router_args(stack: StackConfig, names: RouterNames, topology: Topology) -> list[str]:
    router, namespace = stack.router, stack.platform.namespace
    args = [
        "--stargate-id=$(POD_NAME)",
        f"--listen-addr=0.0.0.0:{GRPC_PORT}",
        f"--http-listen-addr=0.0.0.0:{HTTP_PORT}",
        f"--advertise-addr=$(POD_IP):{GRPC_PORT}",
        f"--stargate-discovery-dns-name={in_cluster(names.headless, namespace)}",
        "--pod-name=$(POD_NAME)",
        "--pod-namespace=$(POD_NAMESPACE)",
        f"--advertised-hostname-template={advertised_hostname(router, namespace)}",
    ]
    if not topology.dns_discovery:
        # A Deployment without backend router: Kubernetes may publish both pod-name and dashed-IP
        # SRV records for Deployment pods, so the chart keeps it to its own identity.
        args.append("--disable-dns-discovery")
    args += [
        f"--watch-heartbeat-ms={WATCH_HEARTBEAT_MS}",
        f"--shutdown-drain-timeout-ms={router.drain_timeout_ms}",
        f"--readiness-warmup-ms={READINESS_WARMUP_MS}",
        f"--readiness-stabilization-sample-interval-ms={STABILIZATION_INTERVAL_MS}",
        f"--readiness-stabilization-window={STABILIZATION_WINDOW}",
        f"--quic-connect-timeout-ms={QUIC_CONNECT_TIMEOUT_MS}",
        f"--quic-request-timeout-ms={QUIC_REQUEST_TIMEOUT_MS}",
        f"--metrics-port={METRICS_PORT}",
        "--backend-connectivity=reverse",
        f"--reverse-tunnel-listen-addr=0.0.0.0:{QUIC_PORT}",
    ]
    if topology.backend_router:
        args += [f"--grpc-pylon-dial-addr={backend_grpc_uri(router, namespace)}",
                 f"--reverse-tunnel-pylon-dial-addr={reverse_dial_addr(names, namespace)}"]
    elif router.replicas > 1:
        # Each pod hands pylons its own address for the tunnel.
        args.append(f"--reverse-tunnel-pylon-dial-addr=$(POD_IP):{QUIC_PORT}")
    args.append(f"--reverse-tunnel-connect-timeout-ms={REVERSE_CONNECT_TIMEOUT_MS}")
    args += lb_args(router)
    # Token mode: --worker-auth-file (the pod gets the Secret's volume in workload.py from the same
    # router_worker_auth call); open mode: nothing.
    return args + tls_args(stack) + router_worker_auth(router).args + list(router.args)


def chart_backend_args(stack: StackConfig, names: RouterNames) -> list[str]:
    router, namespace = stack.router, stack.platform.namespace
    return [
        f"--listen-addr=0.0.0.0:{BACKEND_GRPC_PORT}",
        f"--reverse-tunnel-listen-addr=0.0.0.0:{BACKEND_QUIC_PORT}",
        f"--health-listen-addr=0.0.0.0:{BACKEND_HEALTH_PORT}",
        f"--target-namespace={namespace}",
        # The headless Service publishes warming (not yet ready) pods, so pylons can register
        # with a router pod before its /readyz turns green.
        f"--target-service-name={names.headless}",
        f"--advertised-hostname-template={advertised_hostname(router, namespace)}",
        f"--advertised-grpc-port={GRPC_PORT}",
        f"--grpc-pylon-dial-addr={backend_grpc_uri(router, namespace)}",
        f"--watch-heartbeat-ms={WATCH_HEARTBEAT_MS}",
        f"--shutdown-drain-timeout-ms={router.drain_timeout_ms}",
        # It looks the headless Service's ports up by these names (TCP grpc, UDP quic).
        "--grpc-port-name=grpc",
        "--quic-port-name=quic",
        "--tunnel-protocol=raw-quic",
        *tls_args(stack),
    ]
