"""The `router.gateway` section: the OpenAI front door in front of the request router.

Stargate is a backend router meant to sit behind a gateway that owns public authentication,
the model allow-list, ``x-request-id``, ``x-input-tokens`` and the streaming body rule
(``docs/api-gateway-contract.md`` of the Stargate sources). We publish no images, so the gateway
is a stock, pinned nginx image with its njs module, configured only by files we render
(``components.compile.gateway``). This module holds its typed settings and their checks.

API keys: the Secret named by ``apiKeys.secretName`` holds, under ``apiKeys.secretKey``, one line
per key: ``<sha256 hex of the key> <tenant>``. Only hashes are stored; the gateway hashes the
bearer token of each request and looks it up (re-reading the mounted file, so a rotated Secret
takes effect without a restart). Tenants, their routing keys, models and rate limits are config.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from . import kube, values
from .types import DnsName, Domain, Image, NonRootUid, PositiveQuantity, Strict, TlsIssuer, TlsSection, Toleration
from .values import Problem

# The official nginx image ships ngx_http_js_module (njs) at /usr/lib/nginx/modules. Tag only:
# its digest could not be verified from here, and a fabricated digest would never pull. 1.26.3
# (stable line) carries njs 0.8.9 (its Dockerfile: NGINX_VERSION 1.26.3, NJS_VERSION 0.8.9).
DEFAULT_IMAGE = "docker.io/library/nginx:1.26.3"
# The official image's unprivileged user (uid/gid 101, `nginx`).
DEFAULT_UID = 101

# The memory bound of a replica (docs/gateway.md, "The memory bound"), what `validate` checks:
#   GATEWAY_BASE_BYTES                         nginx at rest and its shared zones (~25 MiB measured)
#   + inFlight.maxRequests x REQUEST_BYTES      each open request: its njs VMs, nginx's buffers, the
#                                               first STREAM_READ_BYTES of a stream read (~0.3-0.6 MiB)
#   + inFlight.maxBodyBytes x BODY_FACTOR       the bodies open: the scan's UTF-8 check keeps ~1x
#   + inFlight.maxFolds x (FOLD_BYTES_PER_STREAM_BYTE x maxResponseBytes + FOLD_BODY_COPIES x maxBodyBytes)
# njs frees nothing a request allocates before the request ends, so a folded answer costs what its
# whole stream allocates: measured ~17 bytes per stream byte with token-sized events, ~19 through
# the fold server; its body is held as the file's bytes, the rewritten body, its text and nginx's
# copy (tests/gateway/test_gateway_memory.py).
FOLD_BYTES_PER_STREAM_BYTE = 20
FOLD_BODY_COPIES = 4
GATEWAY_BASE_BYTES = 64 * 1024 * 1024
REQUEST_BYTES = 1024 * 1024
BODY_FACTOR = 1.25
# The /tmp emptyDir (request bodies, spooled as they arrive): its sizeLimit, and what nginx keeps
# there beside the bodies (pid, resolver file) with room to spare. The bodies open are
# inFlight.maxBodyBytes, plus each fold's rewritten body at the fold server (maxBodyBytes + 64 KiB).
SCRATCH_BYTES = 256 * 1024 * 1024
SCRATCH_RESERVED_BYTES = 16 * 1024 * 1024
FOLD_BODY_EXTRA_BYTES = 64 * 1024
MIB = 1024 * 1024

GatewayName = Annotated[str, AfterValidator(values.check_router_name)]
Label = Annotated[str, AfterValidator(values.check_dns1123_label)]

# Headers the gateway writes for the router, or the router and pylon use internally: none of a
# caller's copies is forwarded (the router's x-request-id is always the gateway's own; a caller's
# plain-token x-request-id is only logged and echoed as x-client-request-id), so none may be
# chosen as the session header either.
TRUSTED_HEADERS = (
    "x-request-id", "x-model", "x-input-tokens", "x-routing-key", "x-routing-method",
    "x-cache-affinity-key", "x-priority", "x-request-slo-ms", "x-max-wait-ms",
    "x-stargate-max-wait-ms", "x-stargate-expected-queue-ms", "x-dynamo-request-priority",
    "x-dynamo-request-strict-priority",
)


def check_header_name(name: str) -> str:
    lowered = name.lower()
    if not lowered or any(not (c.isalnum() or c in "-_") for c in lowered):
        raise ValueError(f"'{name}' is not a header name; use letters, digits and '-', e.g. 'x-session-id'")
    if lowered in TRUSTED_HEADERS or lowered in ("authorization", "content-type", "content-length", "host"):
        raise ValueError(f"'{name}' is a header the gateway sets or consumes itself; choose another "
                         "name, e.g. 'x-session-id'")
    return lowered


# A request header name the platform lets clients use as a session id (lowercased).
HeaderName = Annotated[str, AfterValidator(check_header_name)]


class GatewayResourceAmounts(Strict):
    cpu: PositiveQuantity = Field(description="CPU.")
    memory: PositiveQuantity = Field(description="Memory.")


class GatewayResources(Strict):
    requests: GatewayResourceAmounts = Field(
        default_factory=lambda: GatewayResourceAmounts(cpu="100m", memory="64Mi"),
        description="What the scheduler reserves (default 100m/64Mi).")
    limits: GatewayResourceAmounts = Field(
        default_factory=lambda: GatewayResourceAmounts(cpu="1", memory="512Mi"),
        description="The ceiling (default 1 CPU/512Mi). The memory must hold the replica's bound, "
        "set by `inFlight`, `maxBodyBytes` and `maxResponseBytes` (docs/gateway.md, the memory bound).")

    @model_validator(mode="after")
    def _requests_within_limits(self) -> GatewayResources:
        values.check_requests_within_limits(self.requests, self.limits)
        return self


class RateLimit(Strict):
    """A tenant's limits, counted once for all gateway replicas (the gateway's limiter)."""

    requests_per_minute: Optional[int] = Field(
        None, ge=1, description="Requests a tenant may send per minute, across all gateway replicas "
        "however its connections land on them; beyond it: 429 with `Retry-After` (the time until the "
        "next request is admitted). Unset: no request limit.")
    burst: Optional[int] = Field(
        None, ge=0, description="Requests above the rate accepted at once (as nginx's `burst`: "
        "`burst + 1` simultaneous requests pass). Unset: one second's worth of requests, at least 1, "
        "so two simultaneous requests always pass.")
    tokens_per_minute: Optional[int] = Field(
        None, ge=1, description="Prompt + completion tokens a tenant may use per minute (from the "
        "usage the engine reports; a bucket of one minute's worth). A request is admitted while the "
        "bucket is not empty and charged its usage when it ends; once empty: 429 with `Retry-After` "
        "(the time until it refills above zero). Unset: no token limit.")

    @model_validator(mode="after")
    def _something_limited(self) -> RateLimit:
        if self.requests_per_minute is None and self.tokens_per_minute is None:
            raise values.Problems([Problem("requestsPerMinute", "rateLimit limits nothing; set requestsPerMinute "
                                           "and/or tokensPerMinute, or remove rateLimit")])
        if self.burst is not None and self.requests_per_minute is None:
            raise values.Problems([Problem("burst", "burst applies to requestsPerMinute, which is unset; set "
                                           "requestsPerMinute or remove burst")])
        return self

    def resolved_burst(self) -> int:
        if self.burst is not None:
            return self.burst
        return max(1, -(-(self.requests_per_minute or 0) // 60))


class Tenant(Strict):
    name: Label = Field(description="Tenant name, as written after the key hash in the keys Secret.")
    routing_key: Optional[str] = Field(
        None, pattern=r"^[A-Za-z0-9._:-]{1,128}$",
        description="`x-routing-key` sent to the router for this tenant's requests (its routing "
        "scope: only workers registered under this key serve them); unset: unscoped (no header).")
    models: Optional[tuple[str, ...]] = Field(
        None, description="Models this tenant may call (others answer 404 model_not_found); unset: "
        "every model the gateway fronts.")
    rate_limit: Optional[RateLimit] = Field(None, description="Request and token limits; unset: none.")


class ApiKeys(Strict):
    secret_name: Label = Field(
        description="Existing Secret holding the key hashes: lines `<sha256 hex of key> <tenant>` "
        "(`printf %s \"$KEY\" | sha256sum`). The gateway re-reads it per request, so rotation needs "
        "no restart.")
    secret_key: str = Field("keys", pattern=r"^[-._a-zA-Z0-9]+$", description="Key inside the Secret.")
    tenants: tuple[Tenant, ...] = Field(
        min_length=1, description="The tenants keys map to; a key naming another tenant is refused (401).")

    @model_validator(mode="after")
    def _unique(self) -> ApiKeys:
        seen: set[str] = set()
        problems = []
        for index, tenant in enumerate(self.tenants):
            if tenant.name in seen:
                problems.append(Problem(f"tenants.{index}.name", f"tenant '{tenant.name}' is listed twice; "
                                        "merge the entries"))
            seen.add(tenant.name)
        if problems:
            raise values.Problems(problems)
        return self


class Affinity(Strict):
    """Where `x-cache-affinity-key` comes from; the router's load balancer uses it for
    cache-affinity algorithms (a model configured for another algorithm ignores it)."""

    enabled: bool = Field(
        True, description="Send `x-cache-affinity-key`: a hash of the conversation's leading "
        "messages (system/developer messages up to and including the first user message), so every "
        "turn of one chat carries the same key.")
    max_leading_messages: int = Field(
        4, ge=1, le=64, description="At most this many leading messages enter the hash.")
    session_header: Optional[HeaderName] = Field(
        None, description="A request header the platform allows as a session id (e.g. "
        "`x-session-id`); when a request carries it, the key is a hash of tenant and its value "
        "instead. Never forwarded as is.")


class Hold(Strict):
    """Requests for a model the router has no server for, held at the gateway until one registers."""

    timeout_seconds: int = Field(
        0, ge=0, le=3600, description="Hold a request whose model has no registered server (the "
        "router's `404 no_eligible_candidates`: the model asleep at zero replicas, or all its pods "
        "restarting) for up to this long, and send it on the moment the router lists the model (polled "
        "every 250 ms); past it, or past the request's own deadline: 503 with `Retry-After`. Held "
        "requests are counted per model (`gateway_held_requests`, the demand a scaler can wake the "
        "model on). 0: not held, the 503 is immediate. Unscoped tenants only: the router lists the "
        "models of unscoped servers, so a request with a `routingKey` is not held.")
    max_per_model: int = Field(
        16, ge=1, le=4096, description="Most requests held at once for one model, per gateway replica; "
        "beyond it: 503 with `Retry-After` at once.")
    max_total: int = Field(
        32, ge=1, le=4096, description="Most requests held at once for all models, per gateway replica "
        "(each is an open request of `inFlight`: its body in /tmp); beyond it: 503 with `Retry-After` at once.")

    @model_validator(mode="after")
    def _per_model_within_total(self) -> Hold:
        if self.max_per_model > self.max_total:
            raise values.Problems([Problem("maxPerModel", f"{self.max_per_model} is more than maxTotal "
                                           f"({self.max_total}), which would bound it first; lower maxPerModel "
                                           f"to at most {self.max_total} or raise maxTotal")])
        return self


class InFlight(Strict):
    """What one gateway replica holds at once. Each tenant gets its share of each budget (the
    budget over `apiKeys.tenants`, at least one request, one `maxBodyBytes` body and one fold;
    without keys, all callers share it), taken before its request's body is read: one tenant at
    its share leaves the others theirs. The replica's budget holds too, so together they bound its
    memory and /tmp (docs/gateway.md, "The memory bound"); `validate` refuses values whose bound
    exceeds `resources.limits.memory` or the /tmp volume."""

    max_requests: int = Field(
        128, ge=1, le=65536, description="Requests open at once per replica (streams, folded calls, "
        "held calls, model lists); a tenant's share is this over the tenants. Beyond it: 429 "
        "`too_many_requests_in_flight` for the tenant (503 without keys), before the body is read.")
    max_body_bytes: int = Field(
        64 * 1024 * 1024, ge=1024 * 1024, le=16 * 1024 * 1024 * 1024,
        description="Bytes of request bodies open at once per replica (each request counts its "
        "`Content-Length`, or `maxBodyBytes` without one): they lie in the /tmp volume for the "
        "request's life. A tenant's share is this over the tenants, at least one `maxBodyBytes` body.")
    max_folds: int = Field(
        2, ge=1, le=4096, description="Non-streaming answers assembled at once per replica (each may "
        "hold about 20 x `maxResponseBytes` while it is folded); a tenant's share is this over the "
        "tenants. Beyond it: 429 (503 without keys); streaming calls are not counted.")


class GatewayTls(TlsSection):
    """TLS on the client port (8000): nginx serves the certificate of a cert-manager Certificate
    (or an existing Secret) for the gateway Service's names; the health/metrics port stays plain."""

    enabled: bool = Field(
        False,
        description="Serve HTTPS on the client port (TLSv1.2 and TLSv1.3 only; plain HTTP there is "
        "refused) and rename the Service port `https`. Off by default, like `router.tls`: it needs "
        "cert-manager (or `existingSecret`), and clients must trust the issuer's CA and call "
        "`https://`. Turn it on before the gateway is reached from outside the cluster, or from "
        "pods that are not trusted to see the API keys in transit.",
    )
    existing_secret: Optional[Label] = Field(
        None,
        description="Serve this existing `kubernetes.io/tls` Secret (keys `tls.crt`, `tls.key`; "
        "`tls.crt` with the intermediates) instead of issuing a cert-manager Certificate; you own "
        "its names, issuance and renewal.",
    )
    issuer: Optional[TlsIssuer] = Field(
        None, description="Issuer of the certificate; unset: a self-signed Issuer is created for the "
        "gateway (clients then trust the Secret's `ca.crt`, the certificate itself).")
    dns_names: tuple[DnsName, ...] = Field(
        (),
        description="Names on the certificate besides the gateway Service's in-cluster names "
        "(`<name>.<ns>.svc`, `<name>.<ns>.svc.cluster.local`, always present), e.g. the public "
        "name of a `LoadBalancer`.",
    )
    allowed_domains: tuple[Domain, ...] = Field(
        (),
        description="Domains the certificate may name (each with its subdomains); a name outside "
        "them, the Service's included, is refused. Unset: the stack namespace's in-cluster "
        "domains (`<ns>.svc`, `<ns>.svc.cluster.local`).",
    )
    secret_name: Optional[Label] = Field(
        None, description="Secret the certificate is stored in; unset: `<gateway name>-tls`.")


class GatewayConfig(Strict):
    """The OpenAI-compatible front door (nginx + njs) clients call instead of the router."""

    enabled: bool = Field(
        True, description="Deploy the gateway. Off: no gateway objects, and the router's HTTP port "
        "keeps accepting any client (which must then send the contract headers itself).")
    name: Optional[GatewayName] = Field(None, description="Name of its Deployment and Service; unset: `<router name>-gateway`.")
    image: Image = Field(
        DEFAULT_IMAGE, description="nginx image with ngx_http_js_module (the official image ships it), "
        "fully qualified and pinned.")
    replicas: int = Field(2, ge=1, description="Gateway replicas (more than one: PDB and node spread).")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="Type of the gateway's Service (port 8000). `LoadBalancer` exposes it "
        "outside the cluster: set `apiKeys` then, and `tls` (or terminate TLS in front of it).")
    service_annotations: dict[str, str] = Field(
        default_factory=dict, description="Annotations of the gateway's Service (e.g. a cloud load "
        "balancer's settings).")
    uid: NonRootUid = Field(DEFAULT_UID, description="uid and gid of the gateway pods (the official image's `nginx` user).")
    worker_processes: int = Field(2, ge=1, le=64, description="nginx worker processes per pod.")
    resources: GatewayResources = Field(default_factory=GatewayResources, description="Requests and limits.")
    node_selector: kube.Labels = Field(
        default_factory=dict, description="Node labels the gateway's pods (and its limiter's) must carry, "
        "as a model's `nodeSelector`; unset: any node the scheduler picks.")
    tolerations: tuple[Toleration, ...] = Field(
        (), description="Taints the gateway's pods (and its limiter's) tolerate, as a model's "
        "`tolerations`; unset: none.")
    max_body_bytes: int = Field(
        4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
        description="Largest request body accepted (413 beyond); spooled to the /tmp volume as it "
        "arrives, counted against `inFlight.maxBodyBytes`.")
    # 4 MiB: about 19,000 tokens of vLLM's token-sized events; at ~20 bytes held per stream byte,
    # five maximal answers at once fit the default 512Mi beside nginx's own 64Mi (at the former
    # 16 MiB default: one).
    max_response_bytes: int = Field(
        4 * 1024 * 1024, ge=64 * 1024, le=512 * 1024 * 1024,
        description="Largest upstream stream a non-streaming answer is assembled from (about 19,000 "
        "tokens at the default 4 MiB); beyond it the answer is a 502 `response_too_large`: use "
        "`stream: true`. While it is assembled the gateway holds about 20 bytes per stream byte, for "
        "each of `inFlight.maxFolds` answers (the memory bound, docs/gateway.md).")
    request_timeout_seconds: int = Field(
        600, ge=1, le=86400, description="Deadline of a request; a client's shorter deadline "
        "(`x-stainless-read-timeout`, which the OpenAI SDKs send) wins. It becomes `x-stargate-max-wait-ms`.")
    retry_after_seconds: int = Field(
        2, ge=1, le=3600, description="`Retry-After` of a 503 (router down or no serving target).")
    models: Optional[tuple[str, ...]] = Field(
        None, description="Models the gateway admits (`x-model`); unset: every model the router fronts. "
        "A model admitted admits its LoRA adapters (asked for by name).")
    api_keys: Optional[ApiKeys] = Field(
        None, description="Require API keys (401 without a valid one); unset: open. Set, the router's "
        "HTTP port admits only the gateway pods (its NetworkPolicy is rendered even with "
        "`platform.networkPolicy` off), so no pod can call the router directly and skip the keys.")
    affinity: Affinity = Field(default_factory=Affinity, description="`x-cache-affinity-key` for prefix-cache-aware routing.")
    tls: GatewayTls = Field(default_factory=GatewayTls, description="HTTPS on the client port from a cert-manager issuer.")
    hold: Hold = Field(default_factory=Hold, description="Requests held while their model has no server (scale to zero, restarts).")
    in_flight: InFlight = Field(default_factory=InFlight, description="What one replica holds at once, each "
                                "tenant its share: the memory and /tmp bound.")

    @model_validator(mode="after")
    def _exposed_needs_keys(self) -> GatewayConfig:
        if self.service_type != "ClusterIP" and self.api_keys is None:
            raise values.Problems([Problem("serviceType", f"{self.service_type} exposes the gateway outside the "
                                    "cluster, and without apiKeys anyone reaching it can use every model; "
                                    "set apiKeys, or keep serviceType: ClusterIP")])
        return self

    def memory_bound(self, folds: Optional[int] = None) -> int:
        """The most memory a replica can hold (bytes): the formula above, with ``folds`` in place
        of inFlight.maxFolds."""
        f = self.in_flight.max_folds if folds is None else folds
        return int(GATEWAY_BASE_BYTES + self.in_flight.max_requests * REQUEST_BYTES
                   + self.in_flight.max_body_bytes * BODY_FACTOR + f * self._fold_bytes())

    def _fold_bytes(self) -> int:
        return FOLD_BYTES_PER_STREAM_BYTE * self.max_response_bytes + FOLD_BODY_COPIES * self.max_body_bytes

    def scratch_bound(self) -> int:
        """The most the /tmp volume can hold (bytes): the bodies open and each fold's rewritten body."""
        return (self.in_flight.max_body_bytes
                + self.in_flight.max_folds * (self.max_body_bytes + FOLD_BODY_EXTRA_BYTES) + SCRATCH_RESERVED_BYTES)

    @model_validator(mode="after")
    def _bound_fits_the_pod(self) -> GatewayConfig:
        limit = values.parse_quantity(self.resources.limits.memory)
        bound = self.memory_bound()
        problems: list[Problem] = []
        if bound > limit:
            needed = -(-bound // MIB)
            without_folds = self.memory_bound(folds=0)
            folds = int((limit - without_folds) // self._fold_bytes()) if limit > without_folds else 0
            formula = (f"64Mi + inFlight.maxRequests ({self.in_flight.max_requests}) x 1Mi + 1.25 x inFlight.maxBodyBytes "
                       f"({self.in_flight.max_body_bytes}) + inFlight.maxFolds ({self.in_flight.max_folds}) x "
                       f"(20 x maxResponseBytes ({self.max_response_bytes}) + 4 x maxBodyBytes ({self.max_body_bytes}))"
                       f" = {needed}Mi, over resources.limits.memory ({self.resources.limits.memory})")
            # The largest maxResponseBytes whose folds fit beside the rest.
            per_fold = (limit - without_folds) / self.in_flight.max_folds - FOLD_BODY_COPIES * self.max_body_bytes
            fits = int(per_fold // FOLD_BYTES_PER_STREAM_BYTE) if per_fold > 0 else 0
            if folds >= 1:
                problems.append(Problem("inFlight.maxFolds", (
                    f"a replica could hold {formula}, and be OOM-killed with every tenant's open streams; lower "
                    f"inFlight.maxFolds to at most {folds}, lower inFlight.maxRequests or inFlight.maxBodyBytes, "
                    f"or raise router.gateway.resources.limits.memory to at least {needed}Mi")))
            elif fits < 64 * 1024:
                problems.append(Problem("resources.limits.memory", (
                    f"a replica could hold {formula}, and be OOM-killed with every tenant's open streams; raise "
                    f"router.gateway.resources.limits.memory to at least {needed}Mi, or lower inFlight.maxRequests, "
                    "inFlight.maxBodyBytes or maxBodyBytes")))
            else:
                problems.append(Problem("maxResponseBytes", (
                    f"{self.max_response_bytes} bytes: one non-streaming answer that size holds about "
                    f"{FOLD_BYTES_PER_STREAM_BYTE} x its stream in the gateway, and a replica could hold {formula}, "
                    f"so it would be OOM-killed with every tenant's open streams; lower maxResponseBytes to at most "
                    f"{fits}, lower inFlight.maxRequests or inFlight.maxBodyBytes, or raise "
                    f"router.gateway.resources.limits.memory to at least {needed}Mi")))
        scratch = self.scratch_bound()
        if scratch > SCRATCH_BYTES:
            room = SCRATCH_BYTES - SCRATCH_RESERVED_BYTES - self.in_flight.max_folds * (self.max_body_bytes + FOLD_BODY_EXTRA_BYTES)
            problems.append(Problem("inFlight.maxBodyBytes", (
                f"{self.in_flight.max_body_bytes} bytes of bodies open, with inFlight.maxFolds "
                f"({self.in_flight.max_folds}) rewritten bodies of up to maxBodyBytes ({self.max_body_bytes}) and "
                f"nginx's 16Mi, is {-(-scratch // MIB)}Mi, over the /tmp volume's {SCRATCH_BYTES // MIB}Mi (the "
                f"kubelet would evict the pod); lower inFlight.maxBodyBytes to at most {max(0, room)}, or lower "
                "inFlight.maxFolds or maxBodyBytes")))
        if problems:
            raise values.Problems(problems)
        return self

    @model_validator(mode="after")
    def _hold_within_the_deadline(self) -> GatewayConfig:
        if self.hold.timeout_seconds > self.request_timeout_seconds:
            raise values.Problems([Problem("hold.timeoutSeconds", (
                f"{self.hold.timeout_seconds}s is longer than requestTimeoutSeconds "
                f"({self.request_timeout_seconds}s), the deadline a held request also counts against; lower "
                f"hold.timeoutSeconds to at most {self.request_timeout_seconds} or raise requestTimeoutSeconds"))])
        return self

    def resolved_name(self, router_name: str) -> str:
        return self.name or f"{router_name}-gateway"

    def tls_secret(self, router_name: str) -> Optional[str]:
        """The Secret nginx serves from, None without TLS: ``existingSecret``, else the
        Certificate's ``secretName``, else ``<name>-tls``."""
        tls = self.tls
        if not tls.enabled:
            return None
        return tls.existing_secret or tls.secret_name or f"{self.resolved_name(router_name)}-tls"

    def service_dns_names(self, router_name: str, namespace: str) -> tuple[str, ...]:
        """The gateway Service's in-cluster names, always on its certificate."""
        name = self.resolved_name(router_name)
        return (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local")

    def tls_dns_names(self, router_name: str, namespace: str) -> tuple[str, ...]:
        """Every name on the gateway's Certificate: the Service's, then the written ones."""
        service = self.service_dns_names(router_name, namespace)
        return service + tuple(n for n in self.tls.dns_names if n not in service)

    def tls_allowed_domains(self, namespace: str) -> tuple[str, ...]:
        return self.tls.allowed_domains or (f"{namespace}.svc", f"{namespace}.svc.cluster.local")

    def object_names(self, router_name: str) -> tuple[str, ...]:
        """Its Services' names: the gateway's, the limiter's and the metrics Service's."""
        name = self.resolved_name(router_name)
        return (name, f"{name}-limiter", f"{name}-metrics")


def gateway_problems(gateway: GatewayConfig, fronted: tuple[str, ...]) -> list[Problem]:
    """Checks against the router's fronted models (paths relative to `router.gateway`)."""
    problems: list[Problem] = []
    known = set(fronted)
    for index, name in enumerate(gateway.models or ()):
        if name not in known:
            problems.append(Problem(f"models.{index}", f"'{name}' is not a model the router fronts "
                                    f"({', '.join(fronted) or 'none'}); remove it or add it to router.models"))
    admitted = set(gateway.models) if gateway.models is not None else known
    for t_index, tenant in enumerate(gateway.api_keys.tenants if gateway.api_keys else ()):
        for m_index, name in enumerate(tenant.models or ()):
            if name not in admitted:
                problems.append(Problem(
                    f"apiKeys.tenants.{t_index}.models.{m_index}",
                    f"'{name}' is not a model the gateway admits ({', '.join(sorted(admitted)) or 'none'}); "
                    "remove it or add it to gateway.models"))
    return problems


def admitted_models(gateway: GatewayConfig, fronted: tuple[str, ...]) -> tuple[str, ...]:
    if gateway.models is None:
        return fronted
    wanted = set(gateway.models)
    return tuple(name for name in fronted if name in wanted)

