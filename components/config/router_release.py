"""`router.release`: which Stargate release line the router runs, and so which flags it accepts.

Two lines are rendered:

- ``chart-0.16``: llm-request-router chart 0.16.2 (Stargate 0.16.2, the public fork
  devilkun/nvcf@e07119fa). The render this project has always produced; the default, so a stack
  written before this setting existed renders exactly as before. Its flags are the chart's
  (``templates/deployment.yaml``, ``templates/backend-router.yaml``); the full CLI of that build
  is not available here, so ``router.args`` is not checked against it.
- ``public-0.4``: the newest public NVIDIA/nvcf commit fadc0f8 (Stargate workspace 0.4.0), the
  build the conformance suite runs (``tests/conformance``). Its command lines are known in full
  (clap ``Args`` of ``crates/stargate/src/main.rs``, ``crates/stargate-k8s-router/src/main.rs``
  and ``crates/pylon/src/main.rs``), so every flag in ``router.args`` and ``router.pylon.args``
  is checked against them. It lacks the chart 0.16 readiness flags on the router and the backend
  router's ``--advertised-grpc-port``, ``--grpc-pylon-dial-addr``, ``--watch-heartbeat-ms`` and
  ``--shutdown-drain-timeout-ms`` (clap refuses them: "unexpected argument"); it has no
  ``--worker-auth-file`` (only NVCF's ``--worker-auth-endpoint``; without it any worker is
  accepted).

The line is a setting, not read from the image tag: tags do not tell the lines apart (the public
workspace is versioned 0.4.0 while NVCF's catalog and charts tag images 0.3.x, 0.11.x, 0.16.x and
0.18.x; a mirror may retag anything).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

RouterRelease = Literal["chart-0.16", "public-0.4"]
DEFAULT_RELEASE: RouterRelease = "chart-0.16"


@dataclass(frozen=True)
class ReleaseLine:
    name: str
    describes: str
    # Flags the chart 0.16.2 render carries that this line's binaries refuse.
    router_lacks: tuple[str, ...] = ()
    backend_lacks: tuple[str, ...] = ()
    # The line's complete flag sets, where known (None: unknown, extra args are not checked).
    router_flags: Optional[frozenset[str]] = None
    backend_flags: Optional[frozenset[str]] = None
    pylon_flags: Optional[frozenset[str]] = None
    # `--worker-auth-file` (workerAuth.mode: token): False where the line is known to lack it;
    # None where the image tag decides (components.config.pylon.worker_auth_file_problem).
    worker_auth_file: Optional[bool] = None


# The readiness gate of chart 0.16.2 (values.yaml readiness.*), on the router only.
READINESS_FLAGS = (
    "--readiness-warmup-ms", "--readiness-stabilization-sample-interval-ms",
    "--readiness-stabilization-window",
)
# chart 0.16.2's backend-router flags that stargate-k8s-router at fadc0f8 does not define: it
# learns the router pods' gRPC port from the EndpointSlices' `grpc` port, and the router pod it
# forwards WatchStargates to hands pylons their dial addresses (the router's own
# --grpc-pylon-dial-addr / --reverse-tunnel-pylon-dial-addr).
BACKEND_CHART_ONLY = (
    "--advertised-grpc-port", "--grpc-pylon-dial-addr", "--watch-heartbeat-ms",
    "--shutdown-drain-timeout-ms",
)

# NVIDIA/nvcf@fadc0f8 src/libraries/rust/stargate/crates/stargate/src/main.rs, clap `Args`.
PUBLIC_ROUTER_FLAGS = frozenset((
    "--stargate-id", "--listen-addr", "--model-discovery-listen-addr", "--http-listen-addr",
    "--advertise-addr", "--stargate-discovery-dns-name", "--remote-stargate-url",
    "--grpc-pylon-dial-addr", "--advertised-hostname-template", "--pod-name", "--pod-namespace",
    "--disable-dns-discovery", "--enable-dev-peer-forwarding", "--dns-poll-ms",
    "--dns-resolver-ttl-ms", "--watch-heartbeat-ms", "--registration-update-idle-timeout-ms",
    "--registration-update-max-idle-timeout-ms", "--shutdown-drain-timeout-ms",
    "--quic-connect-timeout-ms", "--quic-request-timeout-ms", "--direct-quic-connections",
    "--proxy-max-connect-retries", "--proxy-max-request-retries", "--proxy-max-replay-body-bytes",
    "--proxy-require-pylon-retry-signal", "--proxy-retry-budget-header", "--tls-cert-path",
    "--tls-key-path", "--quic-insecure", "--lb-config-path", "--otel-endpoint",
    "--otel-service-name", "--metrics-port", "--metrics-prefix", "--backend-connectivity",
    "--reverse-tunnel-listen-addr", "--reverse-tunnel-pylon-dial-addr",
    "--reverse-tunnel-connect-timeout-ms", "--tunnel-protocol", "--worker-auth-endpoint",
    "--secrets-path", "--secrets-json-path", "--oauth2-provider-host",
))
# ... crates/stargate-k8s-router/src/main.rs, clap `Args`.
PUBLIC_BACKEND_FLAGS = frozenset((
    "--listen-addr", "--reverse-tunnel-listen-addr", "--health-listen-addr", "--target-namespace",
    "--target-service-name", "--advertised-hostname-template", "--grpc-port-name",
    "--quic-port-name", "--connect-timeout-ms", "--relay-idle-timeout-ms", "--relay-keep-alive-ms",
    "--tls-cert-path", "--tls-key-path", "--quic-insecure", "--tunnel-protocol",
    "--upstream-tls-cert-path",
))
# ... crates/pylon/src/main.rs, clap `Args`.
PUBLIC_PYLON_FLAGS = frozenset((
    "--upstream-http-base-url", "--quic-listen-addr", "--model-name", "--model-discovery-provider",
    "--model-discovery-poll-interval-ms", "--model-discovery-request-timeout-ms",
    "--stargate-address", "--inference-server-id", "--cluster-id", "--tls-cert-path",
    "--tls-key-path", "--quic-insecure", "--backend-connectivity", "--tunnel-protocol",
    "--disable-bringup", "--upstream-health-path", "--upstream-health-wait-ms", "--do-calibration",
    "--initial-input-tps", "--active-canary-interval-ms", "--canary-max-generation-threshold",
    "--calibration-requests", "--calibration-prompt-units", "--calibration-max-concurrency",
    "--bringup-canary-timeout-ms", "--bringup-calibration-timeout-ms", "--kv-cache-stats-path",
    "--engine-stats-stream", "--engine-stats-stream-path", "--benchmark-pin-input-tps",
    "--min-update-interval-ms", "--auth-token", "--auth-token-file", "--metrics-host",
    "--metrics-port", "--otel-endpoint", "--otel-service-name",
    "--pylon-retryable-upstream-status-codes", "--pylon-require-upstream-retry-header",
    "--pylon-upstream-retry-header", "--pylon-propagate-retry-after",
    "--pylon-local-connect-failures-retryable", "--pylon-queue-mismatch-retry-enabled",
    "--pylon-queue-mismatch-min-delta-ms", "--pylon-queue-mismatch-tolerance-factor",
    "--pylon-queue-mismatch-retry-after-ms", "--pylon-upstream-backend", "--pylon-priority-ceiling",
    "--collect-quality-metrics", "--collect-quality-metrics-min-tokens",
    "--quality-output-tokens-threshold-min", "--quality-output-compression-threshold-max",
    "--quality-output-degeneracy-threshold-min", "--quality-output-repetition-1gram-threshold-min",
    "--quality-output-repetition-2gram-threshold-min",
    "--quality-output-repetition-3gram-threshold-min", "--quality-median-logprob-threshold-max",
))

RELEASES: dict[str, ReleaseLine] = {
    "chart-0.16": ReleaseLine(
        name="chart-0.16",
        describes="llm-request-router chart 0.16.2 (Stargate 0.16.2)",
    ),
    "public-0.4": ReleaseLine(
        name="public-0.4",
        describes="the public Stargate 0.4.0 build (NVIDIA/nvcf@fadc0f8)",
        router_lacks=READINESS_FLAGS,
        backend_lacks=BACKEND_CHART_ONLY,
        router_flags=PUBLIC_ROUTER_FLAGS,
        backend_flags=PUBLIC_BACKEND_FLAGS,
        pylon_flags=PUBLIC_PYLON_FLAGS,
        worker_auth_file=False,
    ),
}


def line(name: str) -> ReleaseLine:
    return RELEASES[name]


def flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def unknown_flags(args: tuple[str, ...], known: Optional[frozenset[str]]) -> list[tuple[int, str]]:
    """(index, flag) of every ``--flag`` in ``args`` the line's binary does not define."""
    if known is None:
        return []
    return [(index, flag_name(arg)) for index, arg in enumerate(args)
            if arg.startswith("--") and flag_name(arg) not in known]
