"""The gateway's files: nginx.conf, the njs script and its settings module.

Pure: settings in, file texts out. ``render_files`` is also what the tests run on a real nginx
(1.26.3 with njs 0.8.9, the image's, from Debian trixie's packages) with loopback addresses in place of the in-cluster ones, so
the configuration that ships is the one that was exercised.

What nginx does and what the njs script does:
- nginx: listens, checks the API key before reading the body (``auth_request``: an unknown or
  missing key is answered 401 from the headers alone), streams bodies to a temp file through a
  small buffer, limits body size (413) and connections per address, sends its own
  ``$request_id`` as ``x-request-id`` (the caller's plain token only echoed as
  ``x-client-request-id``), asks the limiter (``limiter.py``) whether a limited tenant's request
  may pass (the same ``auth_request``: the counts are the limiter's, so they hold across
  replicas), proxies to
  the router with only the headers it sets (``proxy_pass_request_headers off``: every
  caller-supplied trusted or internal header is dropped by construction), hides the router's
  internal response headers, and turns its own errors into OpenAI error JSON;
- njs (``gateway.js``): API key -> tenant, body checks, ``x-model``, ``x-input-tokens``,
  ``x-cache-affinity-key``, ``x-stargate-max-wait-ms``; the non-streaming answer folded from
  the stream in a loopback fold server of the same nginx, which answers once the fold is done
  (so its status is the answer's) and ends the router call when the client leaves
  (``_fold_server``); ``/v1/models`` in OpenAI's list format.

nginx.conf is data: ``nginx_tree`` assembles it from one small function per concern (main and
events, client limits, logs, the script's variables, request ids, limits, the router upstream, the
API server's locations and errors, the health and charge servers) and ``nginx_syntax`` renders it,
quoting every argument the way nginx reads it back.

No retries: nginx's ``proxy_next_upstream`` is off, because the one upstream address is the
router Service and a request that reached it may have reached an engine (the contract forbids
blind retries after that); the router retries internally within ``x-stargate-max-wait-ms``.
A client that disconnects closes the upstream connection (``proxy_ignore_client_abort`` off),
which the router propagates through the tunnel.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Optional

from ...config.gateway import GatewayConfig
from . import limiter as lim
from . import nginx_syntax as syntax
from . import statuses
from .nginx_syntax import BLANK, Block, Node, block, comment, d
from .resolver import RESOLVER_FILE

CONFIG_DIR = "/etc/llm-gateway"
KEYS_DIR = f"{CONFIG_DIR}/keys"
# The TLS Secret's tls.crt and tls.key (router.gateway.tls), mounted read-only.
TLS_DIR = f"{CONFIG_DIR}/tls"
SCRATCH_DIR = "/tmp"
# The official image and Debian's package both install dynamic modules here.
JS_MODULE = "/usr/lib/nginx/modules/ngx_http_js_module.so"
# Request bodies go to a named temp file under the scratch dir as they arrive, through this much
# memory, so a slow upload holds this, not what it declares (nginx sizes the buffer from
# Content-Length up to client_body_buffer_size). The script reads the file once it is whole.
BODY_MEMORY_BUFFER = "16k"
# Open connections one client address may hold (limit_conn): the pre-auth bound on slow
# uploads and floods. In-cluster clients keep their pod address; behind a LoadBalancer that
# SNATs, set externalTrafficPolicy: Local so addresses stay the clients'.
EDGE_CONNECTIONS_PER_ADDRESS = 64
# Slow clients are cut: a request's headers, each gap in its body, and each gap while it reads
# the answer (nginx's timeouts are between two reads/writes, not for the whole transfer).
CLIENT_HEADER_TIMEOUT = "10s"
CLIENT_BODY_TIMEOUT = "15s"
SEND_TIMEOUT = "60s"
KEEPALIVE_TIMEOUT = "30s"
KEEPALIVE_REQUESTS = 1000
HTTP_PORT = 8080
HEALTH_PORT = 8081
HEALTH_PATH = "/healthz"
INTERNAL_PORT = 8082
# Loopback only: the fold server, where a non-streaming call is folded before its status is chosen.
FOLD_PORT = 8083
# The API server's answers to errors raised before nginx has a URI (_unparsed_error_locations).
BAD_REQUEST_URI = "/_gw/error/bad_request"
INTERNAL_ERROR_URI = "/_gw/error/internal"
# Prometheus text format, on the health port (never on the API port clients reach).
METRICS_PATH = "/metrics"

# TLSv1.2's suites (TLSv1.3 has its own, all AEAD): ECDHE key exchange, AEAD ciphers only.
TLS12_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
                 "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
# Shared by the workers: about 4,000 sessions per MiB.
TLS_SESSION_CACHE = "2m"

SCRIPT = "gateway.js"
# The modules gateway.js imports (by bare name, from js_path: the config directory).
MODULES = ("body.js", "usage.js", "fold.js", "admission.js", "pools.js", "metrics.js", "tenants.js", "split.js",
           "charges.js")
SETTINGS = "gateway_config.js"
NGINX_CONF = "nginx.conf"

# The contract headers the gateway sets for the router (api-gateway-contract.md, "Requests"), each
# from its own $request_id or a variable gateway.js sets: the only ones the router gets beside
# Host, Content-Type and Accept (proxy_pass_request_headers off). Each is one of the config's
# TRUSTED_HEADERS, which a session header may not name (a test holds the two together).
ROUTER_REQUEST_HEADERS = (
    ("x-request-id", "$request_id"), ("x-model", "$gw_model"), ("x-input-tokens", "$gw_input_tokens"),
    ("x-stargate-max-wait-ms", "$gw_max_wait"), ("x-routing-key", "$gw_routing_key"),
    ("x-cache-affinity-key", "$gw_affinity"),
)

# The fold server (_fold_server): the front server tells it the call's kind and the tenant the
# key resolved to (its subrequest has no key to resolve); it answers with the usage and the
# router's first-byte time for the front's metrics, which the front keeps from the client.
FOLD_HEADERS = {"kind": "x-gw-fold-kind", "tenant": "x-gw-fold-tenant", "promptUsed": "x-gw-fold-prompt-used",
                "completionUsed": "x-gw-fold-completion-used", "firstByte": "x-gw-fold-first-byte",
                # A held streaming call's wait (@gw_wait): when it ends at the latest (ms since the epoch).
                "holdUntil": "x-gw-hold-until"}
FOLD_ANSWER_HEADERS = tuple(FOLD_HEADERS[k] for k in ("promptUsed", "completionUsed", "firstByte"))
# The front's deadline for the fold server: the router's, and a little for the fold itself.
FOLD_EXTRA_SECONDS = 10
# The fold server's location where a held streaming call waits (_wait_locations).
WAIT_PATH = "/_gw/wait"
# How much of a stream the gateway reads for its usage (gateway.js, countStream): njs keeps what a
# body filter is given until the request ends, about three times the bytes read; past this the
# rest of the stream passes unread and its events are estimated from the bytes sent.
STREAM_READ_BYTES = 128 * 1024
# How often a held request asks the router whether its model is listed (router.gateway.hold): the
# most a wake adds to the first byte.
HOLD_POLL_MS = 250
# Holds per request: a request the router refuses again right after its model was listed (the
# server went away at once) is held once more; each hold is two of nginx's ten internal redirects.
HOLDS_PER_REQUEST = 2

# To and from the limiter (limiter.py names them).
LIMIT_TENANT, LIMIT_TOKENS, LIMIT_KIND = (lim.LIMITER_HEADERS[k] for k in ("tenant", "tokens", "limit"))

# Response headers the router adds or forwards that stay internal (api-gateway-contract.md,
# "Responses": the serving instance, its URL and cluster; the error code and retry metadata).
HIDDEN_RESPONSE_HEADERS = (
    "x-inference-server-id", "x-inference-server-url", "x-stargate-cluster-id", "x-stargate-error-code",
    "x-stargate-retryable", "x-stargate-retry-reason", "x-stargate-retry-after-ms",
    "x-stargate-upstream-retryable", "x-request-id", "server",
)


@dataclass(frozen=True)
class Tenant:
    name: str
    routing_key: Optional[str]
    models: Optional[tuple[str, ...]]
    # For all replicas together: the limiter counts them in one place.
    requests_per_minute: Optional[int]
    burst: int
    tokens_per_minute: Optional[int] = None

    @property
    def limited(self) -> bool:
        return bool(self.requests_per_minute or self.tokens_per_minute)


@dataclass(frozen=True)
class GatewaySettings:
    """Everything the files depend on, resolved (tests build it with loopback addresses)."""

    upstream: str                 # host:port of the router's HTTP port
    models: tuple[str, ...]       # what the gateway admits
    worker_processes: int = 2
    listen: str = str(HTTP_PORT)
    health_listen: str = str(HEALTH_PORT)
    # A loopback-only server the periodic token flush calls (ngx.fetch has no upstream blocks).
    internal_listen: str = f"127.0.0.1:{INTERNAL_PORT}"
    # The loopback fold server (non-streaming calls: _fold_server).
    fold_listen: str = f"127.0.0.1:{FOLD_PORT}"
    # host:port of the limiter's Service (set when a tenant has limits).
    limiter: Optional[str] = None
    max_body_bytes: int = 4 * 1024 * 1024
    max_response_bytes: int = 4 * 1024 * 1024
    timeout_seconds: int = 600
    retry_after_seconds: int = 2
    keys_file: Optional[str] = None
    tenants: tuple[Tenant, ...] = ()
    affinity: bool = True
    affinity_max_leading: int = 4
    session_header: Optional[str] = None
    config_dir: str = CONFIG_DIR
    scratch_dir: str = SCRATCH_DIR
    js_module: str = JS_MODULE
    # Edge limits before any key is known (not config: they bound the pod, not a tenant).
    connections_per_address: int = EDGE_CONNECTIONS_PER_ADDRESS
    # Where tls.crt and tls.key are (router.gateway.tls); None: the client port is plain HTTP.
    tls_dir: Optional[str] = None
    # router.gateway.hold: 0 holds nothing.
    hold_timeout_seconds: int = 0
    hold_max_per_model: int = 16
    hold_max_total: int = 32
    # Models that may sleep (autoscaling.minReplicas: 0): listed by /v1/models while asleep too,
    # when the router lists only models with a routable server.
    sleepers: tuple[str, ...] = ()
    # Models with a next revision (models[].next): model -> (the revision's router id, percent of
    # new conversations it gets).
    splits: tuple[tuple[str, str, int], ...] = ()
    # router.gateway.inFlight: what one replica holds at once, each tenant its share.
    in_flight_requests: int = 128
    in_flight_body_bytes: int = 64 * 1024 * 1024
    in_flight_folds: int = 2

    def in_flight(self) -> dict[str, int]:
        """The replica's budgets and each tenant's share of them (gateway.js, admitRequest): the
        budget over the tenants, so one tenant at its share leaves the others theirs; at least one
        request, one largest body and one fold (with more tenants than that, the replica's budget
        still holds: the last units go to whoever asks first)."""
        tenants = max(1, len(self.tenants)) if self.keys_file else 1
        return {"requests": self.in_flight_requests, "bodyBytes": self.in_flight_body_bytes,
                "folds": self.in_flight_folds, "tenantRequests": max(1, self.in_flight_requests // tenants),
                "tenantBodyBytes": max(min(self.max_body_bytes, self.in_flight_body_bytes), self.in_flight_body_bytes // tenants),
                "tenantFolds": max(1, self.in_flight_folds // tenants)}

    @classmethod
    def of(cls, gateway: GatewayConfig, upstream: str, models: tuple[str, ...],
           limiter: Optional[str] = None, adapters: Optional[Mapping[str, tuple[str, ...]]] = None,
           sleepers: tuple[str, ...] = (), splits: tuple[tuple[str, str, int], ...] = ()) -> GatewaySettings:
        """``adapters``: model -> its LoRA adapters' names. A client asks for an adapter by its
        name (the router routes it to the model's pylons, which register it): admitting a model
        admits its adapters, for the gateway and for a tenant that lists the model."""
        keys = gateway.api_keys

        def served(names: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(n for name in names for n in (name, *(adapters or {}).get(name, ())))

        tenants = tuple(
            Tenant(t.name, t.routing_key, served(t.models) if t.models is not None else None,
                   t.rate_limit.requests_per_minute if t.rate_limit else None,
                   t.rate_limit.resolved_burst() if t.rate_limit else 0,
                   t.rate_limit.tokens_per_minute if t.rate_limit else None)
            for t in (keys.tenants if keys else ()))
        return cls(
            limiter=limiter if any(t.limited for t in tenants) else None,
            upstream=upstream, models=served(models), worker_processes=gateway.worker_processes,
            max_body_bytes=gateway.max_body_bytes, max_response_bytes=gateway.max_response_bytes,
            timeout_seconds=gateway.request_timeout_seconds, retry_after_seconds=gateway.retry_after_seconds,
            keys_file=f"{KEYS_DIR}/{keys.secret_key}" if keys else None, tenants=tenants,
            affinity=gateway.affinity.enabled, affinity_max_leading=gateway.affinity.max_leading_messages,
            session_header=gateway.affinity.session_header,
            tls_dir=TLS_DIR if gateway.tls.enabled else None,
            hold_timeout_seconds=gateway.hold.timeout_seconds, hold_max_per_model=gateway.hold.max_per_model,
            hold_max_total=gateway.hold.max_total, sleepers=tuple(n for n in sleepers if n in models),
            splits=tuple(split for split in splits if split[0] in models),
            in_flight_requests=gateway.in_flight.max_requests, in_flight_body_bytes=gateway.in_flight.max_body_bytes,
            in_flight_folds=gateway.in_flight.max_folds,
        )


@cache
def script(name: str = SCRIPT) -> str:
    """gateway.js (or one of the MODULES it imports), shipped beside this module."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def settings_module(s: GatewaySettings) -> str:
    """gateway_config.js: the settings the script imports (generated, JSON in an ES module)."""
    settings = {
        "models": list(s.models),
        "apiKeys": {"file": s.keys_file} if s.keys_file else None,
        "tenants": {t.name: {"routingKey": t.routing_key, "models": list(t.models) if t.models is not None else None,
                             "tokenLimited": bool(t.tokens_per_minute)}
                    for t in s.tenants},
        "affinity": ({"maxLeadingMessages": s.affinity_max_leading, "sessionHeader": s.session_header}
                     if s.affinity else None),
        "timeoutMs": s.timeout_seconds * 1000,
        "retryAfterSeconds": s.retry_after_seconds,
        "maxResponseBytes": s.max_response_bytes,
        "maxBodyBytes": s.max_body_bytes,
        "inFlight": s.in_flight(),
        # Each error answer's status and type by its code (statuses.py): the script's refuse().
        "answers": statuses.settings(),
        "streamReadBytes": STREAM_READ_BYTES,
        "internalListen": s.internal_listen,
        "limiterHeaders": lim.LIMITER_HEADERS,
        # The fold server's (the front's request id is how it knows its front request).
        "foldHeaders": {**FOLD_HEADERS, "requestId": ROUTER_REQUEST_HEADERS[0][0]},
        # The contract headers by the variable they are sent from ($gw_model -> model): the fold
        # server reads the front's copies.
        "routerHeaders": {value.removeprefix("$gw_").removeprefix("$"): name for name, value in ROUTER_REQUEST_HEADERS},
        "hold": ({"timeoutMs": s.hold_timeout_seconds * 1000, "maxPerModel": s.hold_max_per_model,
                  "maxTotal": s.hold_max_total, "pollMs": HOLD_POLL_MS, "perRequest": HOLDS_PER_REQUEST}
                 if s.hold_timeout_seconds else None),
        "sleepers": list(s.sleepers),
        # Written only when a model has a next revision: other stacks' files (and their config
        # hash, which rolls the gateway) stay as they were.
        **({"splits": {model: {"revision": revision, "percent": percent} for model, revision, percent in s.splits},
            # The conversation key the split hashes is affinity's, computed with these settings
            # when affinity itself is off.
            "splitKey": {"maxLeadingMessages": s.affinity_max_leading, "sessionHeader": s.session_header}}
           if s.splits else {}),
    }
    return ("// Generated by llm-serving from the stack's router.gateway settings; do not edit.\n"
            f"export default {json.dumps(settings, indent=2, sort_keys=True)};\n")


def _error_json(code: str, message: str) -> str:
    """One of the gateway's own error answers (statuses.py: its type and status by code)."""
    return json.dumps({"error": {"message": message, "type": statuses.answer(code).type, "param": None, "code": code}})


def _busy_json(s: GatewaySettings, what: str) -> str:
    """A full in-flight budget: the tenant's share (429), or without keys the replica's (503)."""
    if s.keys_file:
        return _error_json("too_many_requests_in_flight", f"Too many {what} for your API key on this gateway "
                           "replica at once (its share); retry when some have ended.") + "\n"
    return _error_json("service_unavailable", f"The gateway replica has too many {what} at once; retry later.") + "\n"


def _ids() -> list[Node]:
    """Every answer the gateway writes itself carries the request's ids."""
    return [d("add_header", "x-request-id", "$request_id", "always"),
            d("add_header", "x-client-request-id", "$gw_client_request_id", "always")]


def _error_location(name: str, code: str, body: str, *headers: Node) -> Block:
    """A named location answering one of the gateway's own errors as OpenAI error JSON, with the
    status statuses.py gives its code."""
    return block("location", name, body=[_ids(), headers, d("return", statuses.answer(code).status, body + "\n")])


def _to_limiter() -> list[Node]:
    """A call to the limiter: headers only, no body, short timeouts (it fails open)."""
    return [d("proxy_http_version", "1.1"), d("proxy_set_header", "Connection", ""),
            d("proxy_pass_request_headers", "off"), d("proxy_pass_request_body", "off"),
            d("proxy_set_header", "Content-Length", ""), d("proxy_connect_timeout", "1s"),
            d("proxy_read_timeout", "1s"), d("proxy_send_timeout", "1s")]


def _limited(s: GatewaySettings) -> list[Tenant]:
    limited = [t for t in s.tenants if t.limited]
    if limited and not s.limiter:
        raise ValueError("tenants with rateLimit need the limiter's address (GatewaySettings.limiter)")
    return limited


def _counted(s: GatewaySettings) -> bool:
    return any(t.tokens_per_minute for t in _limited(s))


def _limiter_http(s: GatewaySettings) -> list[Node]:
    """http-level parts for the limits: who is limited, the 429 texts, the limiter upstream."""
    limited = _limited(s)
    if not limited:
        return []
    requests = _error_json("rate_limit_exceeded", "Rate limit reached for your API key (requests per minute); "
                           "retry after the time in Retry-After.")
    tokens = _error_json("rate_limit_exceeded", "Token limit reached for your API key (tokens per minute); retry "
                         "after the time in Retry-After.")
    out: list[Node] = [
        BLANK,
        comment("Tenants with limits ask the limiter; the others pass without a call."),
        block("map", "$gw_tenant", "$gw_limited", body=[
            [syntax.map_entry(t.name, "1") for t in limited],
            d("default", ""),
        ]),
        block("map", "$gw_limit_kind", "$gw_limited_body", body=[
            d("tokens", tokens),
            d("default", requests),
        ]),
        block("upstream", "gw_limiter", body=[d("server", s.limiter), d("keepalive", 16)]),
    ]
    if _counted(s):
        out += [
            comment("Token usage read from answers, per tenant, not yet charged at the limiter: the next check\n"
                    "of that tenant from this replica carries it, and a periodic flush sends the rest."),
            d("js_shared_dict_zone", "zone=gw_pending:1m", "type=number"),
            d("js_set", "$gw_charge", "gw.takeCharge"),
        ]
    return out


def _limiter_locations(s: GatewaySettings) -> list[Node]:
    """The API server's locations that ask the limiter (none when no tenant has limits)."""
    if not _limited(s):
        return []
    return [
        comment("Limits: the limiter answers 204 (admitted) or 403 with Retry-After (limited). When it is\n"
                "down or slow, the request is admitted (fail open: docs/gateway.md, Limits)."),
        block("location", "=", "/_gw/limit", body=[
            d("internal"),
            comment("The key first (limits exist only with keys): unknown or missing is 401, unread."),
            block("if", "$gw_tenant", "=", "", body=[d("return", 401)]),
            block("if", "$gw_limited", "=", "", body=[d("return", 204)]),
            d("proxy_pass", "http://gw_limiter/check"),
            _to_limiter(),
            d("proxy_set_header", LIMIT_TENANT, "$gw_tenant"),
            d("proxy_set_header", LIMIT_TOKENS, "$gw_charge") if _counted(s) else None,
            d("error_page", 500, 502, 503, 504, "=", "@gw_limit_open"),
        ]),
        block("location", "@gw_limit_open", body=[d("return", 204)]),
        _error_location("@gw_rate_limited", "rate_limit_exceeded", "$gw_limited_body",
                        d("add_header", "Retry-After", "$gw_limit_retry", "always")),
    ]


def _charge_server(s: GatewaySettings) -> list[Node]:
    """Loopback only: where the periodic flush of token usage goes (when tokens are counted)."""
    if not _counted(s):
        return []
    return _loopback_server(
        "Loopback only: the periodic flush of token usage to the limiter (ngx.fetch cannot use an\n"
        "upstream block, so it calls this server, which can).", s.internal_listen, [
            block("location", "=", "/_gw/charge", body=[
                d("proxy_pass", "http://gw_limiter/charge"),
                _to_limiter(),
                [d("proxy_set_header", header, lim.header_variable("http", header))
                 for header in (LIMIT_TENANT, LIMIT_TOKENS)],
            ]),
            block("location", "/", body=[d("return", 404)]),
        ])


def _loopback_server(why: str, listen: str, body: list) -> list[Node]:
    """A server of the gateway's own on a loopback address (nothing outside the pod reaches it),
    not logged (the API server logs and counts the requests it serves for)."""
    return [BLANK, comment(why), block("server", body=[d("listen", listen), d("access_log", "off"), body])]


def _main(s: GatewaySettings) -> list[Node]:
    tmp = s.scratch_dir
    return [
        comment("Generated by llm-serving (router.gateway); see components/compile/gateway/nginx.py."),
        d("load_module", s.js_module),
        d("worker_processes", s.worker_processes),
        d("daemon", "off"),
        d("pid", f"{tmp}/nginx.pid"),
        d("error_log", "stderr", "warn"),
        BLANK,
        block("events", body=[d("worker_connections", 4096)]),
        BLANK,
    ]


def _temp_paths(tmp: str) -> list[Node]:
    return [d(f"{kind}_temp_path", f"{tmp}/{path}")
            for kind, path in (("client_body", "client_body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"),
                               ("uwsgi", "uwsgi"), ("scgi", "scgi"))]


def _client_limits(s: GatewaySettings) -> list[Node]:
    """Body size and buffering, header buffers, the slow-client timeouts, connections per address."""
    return [
        comment("Larger bodies get 413; beyond a small memory buffer a body streams to a temp file."),
        d("client_max_body_size", s.max_body_bytes),
        d("client_body_buffer_size", BODY_MEMORY_BUFFER),
        d("client_body_in_file_only", "clean"),
        d("client_header_buffer_size", "4k"),
        d("large_client_header_buffers", 4, "16k"),
        d("client_header_timeout", CLIENT_HEADER_TIMEOUT),
        d("client_body_timeout", CLIENT_BODY_TIMEOUT),
        d("send_timeout", SEND_TIMEOUT),
        d("keepalive_timeout", KEEPALIVE_TIMEOUT),
        d("keepalive_requests", KEEPALIVE_REQUESTS),
        d("reset_timedout_connection", "on"),
        d("limit_conn_zone", "$binary_remote_addr", "zone=gw_address:1m"),
        d("limit_conn_status", 429),
    ]


# The access log: one JSON object per request (nginx joins the parts).
ACCESS_LOG_FORMAT = (
    '{"time":"$time_iso8601","request_id":"$request_id",',
    '"client_request_id":"$gw_client_request_id","method":"$request_method",',
    '"uri":"$uri","status":$status,"tenant":"$gw_tenant","model":"$gw_model","bytes":$bytes_sent,',
    '"request_time":$request_time,"upstream_status":"$upstream_status",',
    '"upstream_first_byte":"$upstream_header_time"}',
)


def _logs() -> list[Node]:
    return [
        BLANK,
        d("log_format", "gw", "escape=json", *ACCESS_LOG_FORMAT, wrap_from=3),
        d("access_log", "/dev/stdout", "gw"),
        comment("Metrics (gateway.js, observe): a log format whose only variable runs the counting, so it\n"
                "runs once per request when status and times are final. The line written is empty."),
        d("log_format", "gw_metrics", "$gw_observe"),
        d("access_log", "/dev/null", "gw_metrics"),
    ]


def _script(s: GatewaySettings) -> list[Node]:
    """The njs script and the variables it sets for nginx."""
    return [
        BLANK,
        d("js_path", s.config_dir),
        d("js_import", "gw", "from", SCRIPT),
        d("js_set", "$gw_tenant", "gw.tenant"),
        [d("js_var", f"$gw_{name}") for name in
         ("model", "input_tokens", "max_wait", "routing_key", "affinity", "body", "kind", "fold")],
        comment("The folded answer and its status, from the fold's filters to foldAnswer."),
        [d("js_var", f"$gw_{name}") for name in ("answer", "answer_status")],
        comment("Front requests of non-streaming calls whose client left (their fold requests end\n"
                "themselves). Full (a flood of clients leaving): the oldest marks go first."),
        # A mark outlives the longest fold (the deadline and the fold's own extra).
        d("js_shared_dict_zone", "zone=gw_gone:1m", "type=number", f"timeout={s.timeout_seconds + 60}s", "evict"),
        comment("Usage read from answers (countStream / foldCounted) for the metrics and token limits."),
        [d("js_var", f"$gw_{name}") for name in ("prompt_used", "completion_used", "events_seen")],
        d("js_set", "$gw_observe", "gw.observe"),
        comment("What the replica holds at once, per tenant and in all (gateway.js, admitRequest): taken in the\n"
                "rewrite phase of the API locations, given back in the log phase."),
        d("js_shared_dict_zone", "zone=gw_admit:1m", "type=number"),
        d("js_set", "$gw_admit", "gw.admitRequest"),
        [d("js_var", f"$gw_{name}") for name in ("admitted", "busy", "fold_admitted")],
        block("map", "$gw_busy", "$gw_busy_body", body=[
            d("bodyBytes", _busy_json(s, "bytes of request bodies open")),
            d("default", _busy_json(s, "requests open")),
        ]),
        d("js_shared_dict_zone", "zone=gw_metrics:4m", "type=number"),
        _hold_zone(s),
    ]


def _hold_zone(s: GatewaySettings) -> list[Node]:
    if not s.hold_timeout_seconds:
        return []
    return [comment("Requests held now, per model and in all (router.gateway.hold): the bounds, and the demand\n"
                    "the metrics show. $gw_holds: how often this request was held."),
            d("js_shared_dict_zone", "zone=gw_held:256k", "type=number"),
            d("js_var", "$gw_holds"), d("js_var", "$gw_hold_until"),
            comment("A named location's proxy_pass takes a URI only through a variable (@gw_wait)."),
            block("map", "", "$gw_wait_path", body=[d("default", WAIT_PATH)])]


def _client_request_id() -> list[Node]:
    return [
        BLANK,
        comment("The id the router gets (its global request id and pylon's admission key) is always the\n"
                "gateway's own $request_id: a caller's would let two tenants share one. The caller's id,\n"
                "when a plain token, is kept for correlation: logged and echoed as x-client-request-id."),
        block("map", "$http_x_request_id", "$gw_client_request_id", body=[
            d("~^[A-Za-z0-9._:-]{1,128}$", "$http_x_request_id"),
            d("default", ""),
        ]),
    ]


# The paths the gateway serves, each exactly as a client must send it (the raw request line, not
# nginx's normalised $uri: `/v1//chat/completions` or `/v1/x/../chat/completions` would match a
# location after normalisation). What reaches the router is the path itself, never the caller's
# text or query.
API_PATHS = ("/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/models")


def _canonical_path() -> list[Node]:
    return [
        BLANK,
        comment("$gw_path: the canonical path the request line names exactly (a query is allowed and dropped);\n"
                "empty for any other form, which the script answers 404 (gateway.js, canonical)."),
        block("map", "$request_uri", "$gw_path", body=[
            [d(f"~^{path}(?:\\?|$)", path) for path in API_PATHS],
            d("default", ""),
        ]),
    ]


def _router_upstream(s: GatewaySettings) -> list[Node]:
    return [
        BLANK,
        comment("HTTP/1.0 to the router, one connection per request: its answer then ends when it closes the\n"
                "connection. Over HTTP/1.1 its chunked stream ends with a terminator the router writes after\n"
                "the last event without TCP_NODELAY (the public build sets none), which Nagle holds until the\n"
                "receiver's delayed ACK: ~40 ms added to most non-streaming answers, measured by\n"
                "bench/gateway.py (2026-12-01: fold median 55 ms over HTTP/1.1, 8-15 ms over HTTP/1.0)."),
        comment("The router by name in a variable, so nginx resolves it per request (cached for valid=)\n"
                "and follows a re-created Service; an upstream block would resolve it once at start. The\n"
                "resolver line (the pod's nameservers) is written at container start (resolver.py)."),
        d("include", f"{s.scratch_dir}/{RESOLVER_FILE}"),
        d("resolver_timeout", "2s"),
        block("map", "", "$gw_router", body=[d("default", s.upstream)]),
    ]


def _contract(s: GatewaySettings, to: str, relayed: bool = False, extra_seconds: int = 0,
              spliced: bool = False) -> list[Node]:
    """A model call: only the contract's headers, no retry, the deadline, internal answers hidden.

    ``relayed``: the fold server's subrequest, which forwards the headers (and the body) the
    front server sent it; otherwise the script's variables are sent, with the client's body as
    nginx holds it (its temp file) or, ``spliced``, the script's rewrite of it (the fold's)."""
    timeout = f"{s.timeout_seconds + extra_seconds}s"
    return [
        d("proxy_pass", to),
        d("proxy_http_version", "1.0"),
        d("proxy_pass_request_headers", "off"),
        d("proxy_set_header", "Host", "$proxy_host"),
        d("proxy_set_header", "Content-Type", "application/json"),
        d("proxy_set_header", "Accept", "$http_accept"),
        [d("proxy_set_header", name, _relayed(name, s) if relayed else value) for name, value in ROUTER_REQUEST_HEADERS],
        d("proxy_set_body", "$gw_body") if spliced else None,
        d("proxy_next_upstream", "off"),
        d("proxy_connect_timeout", "5s"),
        d("proxy_read_timeout", timeout),
        d("proxy_send_timeout", timeout),
        [d("proxy_hide_header", name) for name in HIDDEN_RESPONSE_HEADERS],
    ]


def _relayed(name: str, s: GatewaySettings) -> str:
    """What the fold server sends the router for a contract header: the front's copy, except the
    deadline, which foldAnswer sets (less the time a request was held there), and, with a next
    revision, the model (foldAnswer sends its share to the serving revision when it has no server)."""
    if name == "x-stargate-max-wait-ms":
        return "$gw_max_wait"
    if name == "x-model" and s.splits:
        return "$gw_model"
    return "$http_" + name.replace("-", "_")


def _to_router(s: GatewaySettings) -> list[Node]:
    """A model call to the router, from the front server: to the canonical path the request was
    classified by (a URI given with variables is sent as it is, without the caller's query)."""
    return _contract(s, "http://$gw_router$gw_path")


def _upstream_errors(s: GatewaySettings) -> list[Node]:
    # The router's 404 is its no_eligible_candidates: no server registered for the model.
    # Held (router.gateway.hold), or sent to the serving revision when a next revision had none.
    no_server = ([d("error_page", 404, "=", "@gw_hold"), d("error_page", 502, 503, "=", "@gw_unavailable")]
                 if _retries_no_server(s) else [d("error_page", 404, 502, 503, "=", "@gw_unavailable")])
    # A call sent again from @gw_hold (released, or moved to the serving revision) may meet the
    # router's 404 again: without recursive_error_pages nginx then answers its own HTML 404, since
    # a request is redirected to an error page once. gateway.js bounds the tries (hold.perRequest;
    # one move to the serving revision) and nginx's 10 internal redirects bound them all.
    recursive = [d("recursive_error_pages", "on")] if _retries_no_server(s) else []
    return [d("proxy_intercept_errors", "on"),
            recursive,
            no_server,
            d("error_page", 504, "=", "@gw_timeout"),
            d("error_page", 413, "=", "@gw_too_large")]


def _api_locations(s: GatewaySettings) -> list[Node]:
    """The OpenAI paths, each behind the key check (and the limits for model calls)."""
    # With keys on, the key is checked in the access phase by a subrequest that sees only the
    # headers (auth_request), so an unknown or missing key gets 401 before the body is read;
    # js_content would read the whole body before the script could look at the key. nginx takes
    # one auth_request per location: with limited tenants the limiter's check (``/_gw/limit``)
    # refuses a keyless request first, else ``/_gw/auth`` only checks the key.
    auth = [d("auth_request", "/_gw/auth")] if s.keys_file else []
    # Every endpoint counts against the tenant's rate (the model list and unknown paths too).
    limits = [d("auth_request", "/_gw/limit"),
              d("auth_request_set", "$gw_limit_retry", "$upstream_http_retry_after"),
              d("auth_request_set", "$gw_limit_kind", lim.header_variable("upstream_http", LIMIT_KIND))] if _limited(s) else auth
    # Before the key check and the body: the replica's budgets (gateway.js, admitRequest). Answered
    # here, in the rewrite phase: a content handler (js_content) would read the body first.
    admit = block("if", "$gw_admit", body=[
        _ids(), d("add_header", "Retry-After", 1 if s.keys_file else s.retry_after_seconds, "always"),
        d("return", statuses.answer("too_many_requests_in_flight" if s.keys_file else "service_unavailable").status,
          "$gw_busy_body")])
    return [
        block("location", "=", "/v1/chat/completions", body=[admit, limits, d("js_content", "gw.chat")]),
        block("location", "=", "/v1/responses", body=[admit, limits, d("js_content", "gw.responses")]),
        block("location", "=", "/v1/embeddings", body=[admit, limits, d("js_content", "gw.embeddings")]),
        block("location", "=", "/v1/models", body=[admit, limits, d("js_content", "gw.models")]),
        block("location", "/", body=[admit, limits, d("js_content", "gw.unsupported")]),
        comment("auth_request's subrequest: headers only (a subrequest never reads the client's body)."),
        block("location", "=", "/_gw/auth", body=[d("internal"), d("js_content", "gw.authorize")]),
        BLANK,
        comment("Streaming chat / Responses and embeddings: the body as the client sent it, unbuffered."),
        block("location", "@gw_stream", body=[
            _to_router(s),
            d("proxy_buffering", "off"),
            d("proxy_request_buffering", "on"),
            _upstream_errors(s),
            d("js_body_filter", "gw.countStream", "buffer_type=buffer"),
        ]),
        _hold_location(s),
        comment("Non-streaming chat / Responses: to the loopback fold server (_fold_server), which answers\n"
                "once the answer is folded, its status chosen then. Proxied, so a client that leaves closes\n"
                "this request at once, and its log phase tells the fold server (gateway.js, foldAnswer)."),
        block("location", "@gw_fold", body=[
            _contract(s, f"http://{s.fold_listen}$gw_path", extra_seconds=FOLD_EXTRA_SECONDS + s.hold_timeout_seconds,
                      spliced=True),
            d("proxy_set_header", FOLD_HEADERS["kind"], "$gw_kind"),
            d("proxy_set_header", FOLD_HEADERS["tenant"], "$gw_tenant"),
            [d("proxy_hide_header", name) for name in FOLD_ANSWER_HEADERS],
            d("proxy_hide_header", "x-client-request-id"),
            d("proxy_buffering", "on"),
            comment("In memory only (the answer is folded, at most maxResponseBytes): /tmp holds request bodies."),
            d("proxy_max_temp_file_size", 0),
            comment("The fold server's answers are final (OpenAI errors included); only a failure to reach\n"
                    "it is turned into one here."),
            d("proxy_intercept_errors", "off"),
            d("error_page", 502, 503, "=", "@gw_unavailable"),
            d("error_page", 504, "=", "@gw_timeout"),
        ]),
        _router_models(),
    ]


def _router_models() -> Block:
    """The router's list of routable models, for the script (a subrequest: /v1/models, and a held
    request asking whether its model is listed yet)."""
    return block("location", "=", "/_gw/models", body=[
        d("internal"),
        d("proxy_pass", "http://$gw_router/v1/models"),
        d("proxy_http_version", "1.0"),
        d("proxy_pass_request_headers", "off"),
        d("proxy_pass_request_body", "off"),
        d("proxy_set_header", "Host", "$proxy_host"),
        d("proxy_set_header", "Content-Length", ""),
        d("proxy_connect_timeout", "5s"),
        d("proxy_read_timeout", "10s"),
        d("subrequest_output_buffer_size", "1m"),
    ])


def _retries_no_server(s: GatewaySettings) -> bool:
    """Whether a call the router has no server for is tried again: held until one registers, or
    (a next revision's share) sent to the serving revision."""
    return bool(s.hold_timeout_seconds or s.splits)


def _hold_location(s: GatewaySettings) -> list[Node]:
    """A streaming call or embeddings whose model has no server: held until the router lists it,
    then sent again, or sent to the serving revision (gateway.js, hold). Non-streaming calls are
    held in the fold server."""
    if not _retries_no_server(s):
        return []
    return [comment("Streaming calls and embeddings the router had no server for: held (or, a next revision's,\n"
                    "sent to the serving one), then sent again."),
            block("location", "@gw_hold", body=[d("js_content", "gw.hold")]),
            _wait_locations(s)]


def _wait_locations(s: GatewaySettings) -> list[Node]:
    """The wait of a held streaming call, proxied to the fold server (gateway.js, waitHold): a
    proxied request notices its client leaving at once (its log phase marks it in gw_gone, and
    the wait leaves the pool at its next look); the js_content handler that holds it could not.
    The wait answers 409 when the model is listed (the call is sent again) or the client's 503."""
    if not s.hold_timeout_seconds:
        return []
    return [
        block("location", "@gw_wait", body=[
            d("proxy_pass", f"http://{s.fold_listen}$gw_wait_path"),
            d("proxy_http_version", "1.0"),
            d("proxy_pass_request_headers", "off"),
            d("proxy_pass_request_body", "off"),
            d("proxy_set_header", "Content-Length", ""),
            [d("proxy_set_header", name, value) for name, value in ROUTER_REQUEST_HEADERS[:2]],  # the id, the model
            d("proxy_set_header", FOLD_HEADERS["tenant"], "$gw_tenant"),
            d("proxy_set_header", FOLD_HEADERS["holdUntil"], "$gw_hold_until"),
            d("proxy_connect_timeout", "5s"),
            d("proxy_read_timeout", f"{s.hold_timeout_seconds + FOLD_EXTRA_SECONDS}s"),
            [d("proxy_hide_header", name) for name in ("x-request-id", "x-client-request-id")],
            comment("409: released. The wait's 503s pass as they are; failing to reach it is a 503 too."),
            d("proxy_intercept_errors", "on"),
            d("recursive_error_pages", "on"),
            d("error_page", 409, "=", "@gw_released"),
            d("error_page", 502, 504, "=", "@gw_unavailable"),
        ]),
        block("location", "@gw_released", body=[d("js_content", "gw.released")]),
    ]


def _error_locations(s: GatewaySettings) -> list[Node]:
    """The gateway's own errors, as OpenAI error JSON."""
    return [
        _error_location("@gw_unauthorized", "invalid_api_key", _error_json(
            "invalid_api_key", "Incorrect API key provided, or none: send it as `Authorization: Bearer <key>`."),
            d("add_header", "WWW-Authenticate", "Bearer", "always")),
        _error_location("@gw_unavailable", "service_unavailable", _error_json(
            "service_unavailable", "No server can take requests for this model right now; retry later."),
            d("add_header", "Retry-After", s.retry_after_seconds, "always")),
        _error_location("@gw_timeout", "timeout", _error_json("timeout", "The request timed out upstream.")),
        _error_location("@gw_too_large", "request_too_large", _error_json(
            "request_too_large", f"The request body is larger than {s.max_body_bytes} bytes.")),
        _error_location("@gw_too_many_connections", "too_many_connections", _error_json(
            "too_many_connections", f"Too many open connections from your address (at most "
            f"{s.connections_per_address}); close some and retry."),
            d("add_header", "Retry-After", 1, "always")),
        _error_location("@gw_internal", "internal_error", _error_json(
            "internal_error", "The gateway failed to handle the request.")),
    ]


def _unparsed_error_locations() -> list[Node]:
    """Errors nginx raises before it has a URI (a malformed request line or URI: `/%zz`,
    `/../x`), answered by URI: a redirect to a named location needs the request's URI and fails
    with a 500 without one."""
    def by_uri(uri: str, code: str, message: str) -> Block:
        return block("location", "=", uri, body=[d("internal"), _ids(),
                                                 d("return", statuses.answer(code).status, _error_json(code, message) + "\n")])

    return [
        comment("Malformed request lines and URIs (and HTTP versions nginx does not speak): a 400, never a 5xx."),
        by_uri(BAD_REQUEST_URI, "bad_request", "The request could not be read: a malformed request line, URI or header."),
        by_uri(INTERNAL_ERROR_URI, "internal_error", "The gateway failed to handle the request."),
    ]


def _tls_http(s: GatewaySettings) -> list[Node]:
    """The TLS Secret's directory as a variable, so nginx reads the files at each handshake."""
    if s.tls_dir is None:
        return []
    return [BLANK, comment("The TLS Secret's directory, as a variable: read at each handshake (_tls_server)."),
            block("map", "$ssl_server_name", "$gw_tls_dir", body=[d("default", s.tls_dir)])]


def _tls_server(s: GatewaySettings) -> list[Node]:
    """The client port's TLS (router.gateway.tls); nothing without it.

    TLSv1.2 and TLSv1.3 only, with forward-secret AEAD suites for 1.2 (Mozilla's "intermediate"
    list without DHE); 1.3 uses OpenSSL's defaults. Sessions resume from a shared cache; no
    tickets (their keys would live as long as the pod, never rotated). The certificate's path
    goes through a variable, so nginx reads it at each handshake instead of once at start:
    cert-manager's renewal rewrites the mounted Secret and new connections get the new
    certificate without a restart (the router polls its directory likewise)."""
    if s.tls_dir is None:
        return []
    return [
        d("ssl_certificate", "$gw_tls_dir/tls.crt"),
        d("ssl_certificate_key", "$gw_tls_dir/tls.key"),
        d("ssl_protocols", "TLSv1.2", "TLSv1.3"),
        d("ssl_ciphers", TLS12_CIPHERS),
        d("ssl_prefer_server_ciphers", "off"),
        d("ssl_session_cache", f"shared:gw_tls:{TLS_SESSION_CACHE}"),
        d("ssl_session_timeout", "1h"),
        d("ssl_session_tickets", "off"),
        comment("Plain HTTP sent to this port (nginx's 497): an error saying so, before any phase runs."),
        d("error_page", 497, "=", "@gw_plain_http"),
    ]


def _tls_location(s: GatewaySettings) -> list[Node]:
    if s.tls_dir is None:
        return []
    return [_error_location("@gw_plain_http", "https_required", _error_json(
        "https_required", "This port serves HTTPS only; call it with https://."))]


def _api_server(s: GatewaySettings) -> Block:
    return block("server", body=[
        d("listen", s.listen, "ssl") if s.tls_dir else d("listen", s.listen),
        _tls_server(s),
        _ids(),
        comment("Every connection, authenticated or not, counts against its address."),
        d("limit_conn", "gw_address", s.connections_per_address),
        d("error_page", 401, "=", "@gw_unauthorized"),
        d("error_page", 413, "=", "@gw_too_large"),
        comment("limit_conn's refusal (nginx's own 429; the limiter's 429s come from @gw_rate_limited)."),
        d("error_page", 429, "=", "@gw_too_many_connections"),
        # The limiter's "limited" (auth_request passes only 401 and 403 through) becomes 429.
        d("error_page", 403, "=", "@gw_rate_limited") if _limited(s) else None,
        d("error_page", 400, 505, "=400", BAD_REQUEST_URI),
        d("error_page", 500, INTERNAL_ERROR_URI),
        BLANK,
        _api_locations(s),
        _error_locations(s),
        _unparsed_error_locations(),
        _tls_location(s),
        _limiter_locations(s),
    ])


def _fold_server(s: GatewaySettings) -> list[Node]:
    """Loopback only: non-streaming calls, folded before their status is chosen (docs/gateway.md,
    Endpoints). foldAnswer sends the call to the router as a subrequest through the fold's
    filters and answers when the fold reaches the stream's end."""
    def fold_location(kind: str, path: str) -> Block:
        return block("location", "=", f"/_gw/fold/{kind}", body=[
            d("internal"),
            _contract(s, f"http://$gw_router{path}", relayed=True),
            comment("Unbuffered into the script's filters: the subrequest keeps no body, the fold its answer."),
            d("proxy_buffering", "off"),
            d("subrequest_output_buffer_size", "64k"),
            d("js_header_filter", "gw.foldHeaders"),
            d("js_body_filter", "gw.foldCounted", "buffer_type=buffer"),
        ])

    return _loopback_server(
        "Loopback only: non-streaming calls, folded before their status is chosen (gateway.js,\n"
        "foldAnswer); the API server's @gw_fold proxies here. Not logged: the front logs and counts them.",
        s.fold_listen, [
            _ids(),
            comment("The front's body with the stream members spliced in is a little longer than the client's."),
            d("client_max_body_size", s.max_body_bytes + 65536),
            d("error_page", 404, 502, 503, "=", "@gw_unavailable"),
            d("error_page", 504, "=", "@gw_timeout"),
            d("error_page", 500, "=", "@gw_internal"),
            block("location", "=", "/v1/chat/completions", body=[d("js_content", "gw.foldAnswer")]),
            block("location", "=", "/v1/responses", body=[d("js_content", "gw.foldAnswer")]),
            fold_location("chat", "/v1/chat/completions"),
            fold_location("responses", "/v1/responses"),
            _router_models() if s.hold_timeout_seconds else None,
            block("location", "=", WAIT_PATH, body=[d("js_content", "gw.waitHold")]) if s.hold_timeout_seconds else None,
            block("location", "/", body=[d("return", 404)]),
            _error_locations(s),
        ])


def _health_server(s: GatewaySettings) -> list[Node]:
    return [
        BLANK,
        comment("Probes (and nginx's connection counters): a port of its own, outside the API's logs."),
        block("server", body=[
            d("listen", s.health_listen),
            d("access_log", "off"),
            block("location", "=", HEALTH_PATH, body=[d("return", 200, '{"status":"ok"}\n')]),
            block("location", "=", "/stub_status", body=[d("stub_status")]),
            block("location", "=", METRICS_PATH, body=[d("js_content", "gw.metrics")]),
            block("location", "@gw_flush", body=[d("js_periodic", "gw.flushCharges", "interval=1s")])
            if _counted(s) else None,
        ]),
    ]


def nginx_tree(s: GatewaySettings) -> list[Node]:
    """nginx.conf as data: the main context, then http's concerns in order."""
    return [
        _main(s),
        block("http", body=[
            d("server_tokens", "off"),
            d("default_type", "application/json"),
            _temp_paths(s.scratch_dir),
            _client_limits(s),
            _logs(),
            _script(s),
            _tls_http(s),
            _client_request_id(),
            _canonical_path(),
            _limiter_http(s),
            _router_upstream(s),
            BLANK,
            _api_server(s),
            _health_server(s),
            _charge_server(s),
            _fold_server(s),
        ]),
    ]


def nginx_conf(s: GatewaySettings) -> str:
    return syntax.render(nginx_tree(s))


def render_files(s: GatewaySettings) -> dict[str, str]:
    """The ConfigMap's data: file name -> text."""
    files = {NGINX_CONF: nginx_conf(s), SCRIPT: script(), **{name: script(name) for name in MODULES},
             SETTINGS: settings_module(s)}
    if s.limiter:
        files.update(limiter_files(s))
    return files


@cache
def limiter_script() -> str:
    return resources.files(__package__).joinpath(lim.LIMITER_SCRIPT).read_text(encoding="utf-8")


def limiter_files(s: GatewaySettings, listen: str = str(lim.LIMITER_PORT)) -> dict[str, str]:
    """The limiter's files (it mounts the gateway's ConfigMap and runs limiter.conf)."""
    tenants = tuple(lim.TenantLimits(t.name, t.requests_per_minute, t.burst, t.tokens_per_minute)
                    for t in s.tenants if t.limited)
    return {lim.LIMITER_CONF: lim.limiter_conf(listen=listen, config_dir=s.config_dir, scratch_dir=s.scratch_dir,
                                               js_module=s.js_module),
            lim.LIMITER_SCRIPT: limiter_script(), lim.LIMITER_SETTINGS: lim.settings_module(tenants)}
