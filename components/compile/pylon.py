"""The pylon sidecar that makes a model routable, and the router's side of worker authentication.

Pure: typed config in, wire-shape dicts out.

How a model becomes routable (NVIDIA llm-request-router, "Stargate"): the router never looks for
model Services. The pylon in each model pod calls ``WatchStargates`` on ``--stargate-address``
(the backend router when it runs, otherwise the router's own Service), gets one entry per router
pod, opens a ``RegisterInferenceServer`` stream to each, and dials a QUIC reverse tunnel back;
the router then forwards requests over the tunnel and pylon sends them to the engine on
loopback.

Flags follow the pylon CLI of chart 0.16.2's source, devilkun/nvcf@e07119fa
``src/libraries/rust/stargate/crates/pylon/src/main.rs`` (clap ``Args``) and ``startup.rs``:
- ``--upstream-http-base-url`` is required; ``--model-name`` is repeatable (without it pylon
  discovers models through Dynamo's API, which vLLM and NIM do not serve);
- ``--backend-connectivity`` defaults to ``direct`` (the router dials pylon): reverse is what the
  router renders (``--backend-connectivity=reverse``), and both sides must agree;
- ``--upstream-health-wait-ms`` (default 60000) bounds how long startup waits for the engine's
  health path before pylon exits; a model loading for many minutes would crash-loop its pylon,
  so the wait is the platform's startup budget;
- the only HTTP server pylon runs is its Prometheus endpoint, ``/metrics`` on
  ``--metrics-port`` (default 9089, ``pylon-lib/src/stats/metrics.rs``): it is up before the
  engine wait starts, so it is the liveness and readiness probe;
- ``--auth-token-file`` is re-read on every use (token rotation), ``--cluster-id`` defaults to
  ``--inference-server-id``;
- ``--tls-cert-path`` is the trust anchor for the router's QUIC identity in reverse mode;
  ``--quic-insecure`` skips that check (the router self-signs when it has no certificate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contract.names import PYLON_CONTAINER

from ..config.model import ModelConfig
from ..config.router import RouterConfig, resolve_topology
from ..config.router_names import backend_name, tls_secret_name
from ..config.stack import StackConfig, fronted_models
from . import common

METRICS_PORT = 9089  # pylon main.rs --metrics-port default
METRICS_PORT_NAME = "pylon-metrics"
# The router's backend-facing gRPC port (WatchStargates, RegisterInferenceServer) and the backend
# router's: 50071 in chart 0.16.2 values.yaml (service.grpcPort, backendRouter.service.grpcPort).
ROUTER_GRPC_PORT = 50071

TOKEN_VOLUME = "pylon-worker-token"
TOKEN_DIR = "/var/run/stargate/worker-token"
TOKEN_FILE = f"{TOKEN_DIR}/token"
ROUTER_CA_VOLUME = "pylon-router-ca"
ROUTER_CA_DIR = "/etc/stargate/router-ca"
ROUTER_CA_FILE = f"{ROUTER_CA_DIR}/ca.crt"

AUTH_FILE_VOLUME = "worker-auth"
AUTH_FILE_DIR = "/etc/stargate/worker-auth"
AUTH_FILE = f"{AUTH_FILE_DIR}/worker-auth.yaml"


def is_fronted(model: ModelConfig, stack: StackConfig) -> bool:
    """Whether ``model``'s pods carry a pylon: the router fronts it and pylons are configured."""
    router = stack.router
    if router is None or router.pylon is None:
        return False
    return model.served_name in fronted_models(router, [m.name for m in stack.models])


def _in_cluster(service: str, namespace: str) -> str:
    return f"{service}.{namespace}.svc.cluster.local"


def backend_grpc_uri(router: RouterConfig, namespace: str) -> str:
    """The backend router's gRPC URI: what the router hands pylons as ``--grpc-pylon-dial-addr``
    and, when the backend router runs, what pylons call ``WatchStargates`` on. An explicit
    ``http://`` URI (chart 0.16.2 _helpers.tpl backendRouterGrpcDialAddress default)."""
    return f"http://{_in_cluster(backend_name(router), namespace)}:{ROUTER_GRPC_PORT}"


def stargate_address(router: RouterConfig, namespace: str) -> str:
    """``--stargate-address``: where pylons call ``WatchStargates``. The one definition:
    ``components.compile.router.pylon_address`` is this function.

    With the backend router, its Service (it answers with one entry per router pod, read from the
    router's headless EndpointSlices, and forwards each registration by ``:authority``); without
    it, the router's own Service, whose pod lists its peers (or itself). An explicit ``http://``
    URI: pylon reuses its TLS trust for gRPC only for ``https://`` seeds (startup.rs
    ``load_grpc_tls_ca_cert``), and the chart's gRPC listener is plaintext.
    """
    if resolve_topology(router).backend_router:
        return backend_grpc_uri(router, namespace)
    return f"http://{_in_cluster(router.name, namespace)}:{ROUTER_GRPC_PORT}"


def cluster_id(router: RouterConfig) -> str:
    auth = router.worker_auth
    return (auth.cluster_id if auth and auth.cluster_id else router.name)


@dataclass(frozen=True)
class PylonSidecar:
    """The container and the pod volumes it mounts (added to the model pod's volumes)."""

    container: dict
    volumes: list[dict] = field(default_factory=list)


def pylon_args(model: ModelConfig, stack: StackConfig) -> list[str]:
    router = stack.router
    pylon, auth = router.pylon, router.worker_auth
    args = [
        # vLLM/NIM serve on this port in the same pod; loopback never leaves it.
        f"--upstream-http-base-url=http://127.0.0.1:{common.SERVER_PORT}",
        f"--stargate-address={stargate_address(router, stack.platform.namespace)}",
        # The ids the engine answers to: vLLM's --served-model-name and NIM's NIM_SERVED_MODEL_NAME
        # are the model's name (components.compile.engines); each LoRA adapter is asked for by its
        # own name, which vLLM's filesystem resolver serves in every pod of the model
        # (components.compile.server), so the router must route that id to this pylon too.
        *(f"--model-name={name}" for name in (model.name, *(a.name for a in model.lora.adapters))),
        "--inference-server-id=$(POD_NAME)",
        "--backend-connectivity=reverse",
        f"--metrics-port={METRICS_PORT}",
        f"--upstream-health-path={model.health_path}",
        f"--upstream-health-wait-ms={stack.platform.startup_timeout_seconds * 1000}",
        f"--initial-input-tps={pylon.initial_input_tps:g}",
        f"--pylon-upstream-backend={pylon.upstream_backend}",
        # vLLM and NIM serve no pylon stats stream; `off` uses the OpenAI-usage fallback directly.
        "--engine-stats-stream=off",
    ]
    if auth.mode == "token":
        args += [f"--auth-token-file={TOKEN_FILE}", f"--cluster-id={cluster_id(router)}"]
    if router.tls.enabled:
        args.append(f"--tls-cert-path={ROUTER_CA_FILE}")
    else:
        # The router has no certificate and self-signs (chart 0.16.2 quicInsecure default).
        args.append("--quic-insecure")
    return args + list(pylon.args)


def pylon_volumes(stack: StackConfig) -> tuple[list[dict], list[dict]]:
    """(pod volumes, pylon mounts). Whole-directory Secret mounts, never subPath: the kubelet
    updates a Secret volume in place, and pylon re-reads the token file on every use."""
    router = stack.router
    volumes: list[dict] = []
    mounts: list[dict] = []
    auth = router.worker_auth
    if auth.mode == "token":
        # 0444: the model pods have no fsGroup (a recursive chown of the weights on every start
        # would delay serving), so group-only modes would hide the file from pylon's non-root
        # user; only the pylon container mounts the volume.
        volumes.append({"name": TOKEN_VOLUME, "secret": {
            "secretName": auth.secret_name, "defaultMode": 0o444,
            "items": [{"key": auth.token_key, "path": "token"}],
        }})
        mounts.append({"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True})
    # The same Secret the router mounts its identity from (router.tls.existingSecret, the
    # Certificate's secretName, or <name>-tls).
    secret = tls_secret_name(router)
    if secret is not None:
        # cert-manager writes the issuing CA to ca.crt (the certificate itself for a
        # self-signed issuer): the trust anchor for the router pods' QUIC identity. An
        # existingSecret must carry ca.crt too (documented on the field): without the key the
        # kubelet cannot build the volume and the model pod stays in ContainerCreating, which the
        # model's status reports, rather than pylon silently trusting nothing.
        volumes.append({"name": ROUTER_CA_VOLUME, "secret": {
            "secretName": secret, "defaultMode": 0o444, "items": [{"key": "ca.crt", "path": "ca.crt"}],
        }})
        mounts.append({"name": ROUTER_CA_VOLUME, "mountPath": ROUTER_CA_DIR, "readOnly": True})
    return volumes, mounts


def pylon_sidecar(model: ModelConfig, stack: StackConfig) -> PylonSidecar:
    router = stack.router
    if router is None or router.pylon is None or router.worker_auth is None:
        raise ValueError(f"model '{model.name}': the stack configures no pylon (router.pylon)")
    pylon = router.pylon
    volumes, mounts = pylon_volumes(stack)
    def probe() -> dict:
        return {"httpGet": {"path": "/metrics", "port": METRICS_PORT_NAME}}

    container = {
        "name": PYLON_CONTAINER,
        "image": pylon.image,
        "args": pylon_args(model, stack),
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "ports": [{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": pylon.resources.cpu, "memory": pylon.resources.memory},
            "limits": {"cpu": pylon.resources.cpu_limit, "memory": pylon.resources.memory_limit},
        },
        "readinessProbe": {**probe(), "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 3},
        "livenessProbe": {**probe(), "periodSeconds": 15, "timeoutSeconds": 5, "failureThreshold": 3},
        # Same family of images as the router: same non-root identity, nothing written to disk.
        "securityContext": {
            **common.container_security_context(common.Identity(router.uid, router.gid)),
            "readOnlyRootFilesystem": True,
        },
    }
    if mounts:
        container["volumeMounts"] = mounts
    return PylonSidecar(container, volumes)


@dataclass(frozen=True)
class RouterWorkerAuth:
    """What the router container needs for ``workerAuth``: args, pod volumes, its mounts."""

    args: list[str] = field(default_factory=list)
    volumes: list[dict] = field(default_factory=list)
    mounts: list[dict] = field(default_factory=list)


def router_worker_auth(router: RouterConfig) -> RouterWorkerAuth:
    """The router's side of ``workerAuth``.

    ``token``: ``--worker-auth-file`` (env ``STARGATE_WORKER_AUTH_FILE``), a YAML file binding
    each cluster id to SHA-256 hashes of its bearer tokens; Stargate refuses to start when it is
    missing or invalid and re-reads it every 30 s, so a rotated Secret applies without a restart
    (NVIDIA/nvcf@38d452db ``src/libraries/rust/stargate/README.md``, "Worker authentication").
    That flag is newer than chart 0.16.2, whose Stargate (devilkun/nvcf@e07119fa
    ``crates/stargate/src/main.rs``) knows only ``--worker-auth-endpoint`` (NVCF's
    ``AuthLlmWorker`` gRPC call, which a plain cluster does not serve).

    Decision: everything else follows 0.16.2, but token mode is the only authenticator that works
    without NVCF, so it is rendered completely (this flag and volume on the router: wired in
    ``router.flags.router_args`` and ``router.workload``; token and cluster id on the pylon), and
    ``components.config.pylon`` refuses token mode when ``router.image`` is tagged 0.16.x or
    older, the versions known to reject the flag. A 0.16.2 router therefore runs ``open``.

    ``open``: no flag. Stargate 0.16.2 accepts any worker when no authenticator is configured
    (``crates/stargate/src/main/startup.rs`` there starts with ``OpenAuthenticator`` and replaces
    it only for ``--worker-auth-endpoint``); newer images refuse to start without
    ``--allow-open-worker-auth``, which 0.16.2 would reject as an unknown argument, so that flag
    is left to ``router.args`` for those images.
    """
    auth = router.worker_auth
    if auth is None or auth.mode == "open":
        return RouterWorkerAuth()
    return RouterWorkerAuth(
        args=[f"--worker-auth-file={AUTH_FILE}"],
        # 0440 with the router pod's fsGroup (chart podSecurityContext): group-readable only.
        volumes=[{"name": AUTH_FILE_VOLUME, "secret": {
            "secretName": auth.secret_name, "defaultMode": 0o440,
            "items": [{"key": auth.auth_file_key, "path": "worker-auth.yaml"}],
        }}],
        mounts=[{"name": AUTH_FILE_VOLUME, "mountPath": AUTH_FILE_DIR, "readOnly": True}],
    )
