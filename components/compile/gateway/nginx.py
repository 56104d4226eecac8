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
  the stream (header and body filters on the proxied request, so a client that leaves still
  closes the upstream connection); ``/v1/models`` in OpenAI's list format.

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

CONFIG_DIR = "/etc/llm-gateway"
KEYS_DIR = f"{CONFIG_DIR}/keys"
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
# Prometheus text format, on the health port (never on the API port clients reach).
METRICS_PATH = "/metrics"

SCRIPT = "gateway.js"
SETTINGS = "gateway_config.js"
NGINX_CONF = "nginx.conf"

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
    # host:port of the limiter's Service (set when a tenant has limits).
    limiter: Optional[str] = None
    max_body_bytes: int = 4 * 1024 * 1024
    max_response_bytes: int = 16 * 1024 * 1024
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

    @classmethod
    def of(cls, gateway: GatewayConfig, upstream: str, models: tuple[str, ...],
           limiter: Optional[str] = None, adapters: Optional[Mapping[str, tuple[str, ...]]] = None) -> GatewaySettings:
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
        )


@cache
def script() -> str:
    """gateway.js, shipped beside this module."""
    return resources.files(__package__).joinpath(SCRIPT).read_text(encoding="utf-8")


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
        "internalListen": s.internal_listen,
    }
    return ("// Generated by llm-serving from the stack's router.gateway settings; do not edit.\n"
            f"export default {json.dumps(settings, indent=2, sort_keys=True)};\n")


def _error_json(message: str, kind: str, code: str) -> str:
    # nginx `return` text: single-quoted, so the JSON may not contain a single quote.
    text = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}})
    if "'" in text:
        raise ValueError("error text may not contain a single quote")
    return text


def _limit_blocks(s: GatewaySettings) -> dict[str, str]:
    """The pieces of nginx.conf that ask the limiter (empty when no tenant has limits)."""
    limited = [t for t in s.tenants if t.limited]
    empty = dict.fromkeys(("http", "locations", "server", "health", "servers", "error_page"), "")
    if not limited:
        return empty
    if not s.limiter:
        raise ValueError("tenants with rateLimit need the limiter's address (GatewaySettings.limiter)")
    counted = any(t.tokens_per_minute for t in limited)
    names = "".join(f'\n        "{t.name}" "1";' for t in limited)
    requests = _error_json("Rate limit reached for your API key (requests per minute); retry after the time "
                           "in Retry-After.", "rate_limit_error", "rate_limit_exceeded")
    tokens = _error_json("Token limit reached for your API key (tokens per minute); retry after the time in "
                         "Retry-After.", "rate_limit_error", "rate_limit_exceeded")
    to_limiter = """proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_pass_request_headers off;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_connect_timeout 1s;
            proxy_read_timeout 1s;
            proxy_send_timeout 1s;"""
    http = f"""
    # Tenants with limits ask the limiter; the others pass without a call.
    map $gw_tenant $gw_limited {{{names}
        default "";
    }}
    map $gw_limit_kind $gw_limited_body {{
        "tokens" '{tokens}';
        default '{requests}';
    }}
    upstream gw_limiter {{
        server {s.limiter};
        keepalive 16;
    }}"""
    if counted:
        http += """
    # Token usage read from answers, per tenant, not yet charged at the limiter: the next check
    # of that tenant from this replica carries it, and a periodic flush sends the rest.
    js_shared_dict_zone zone=gw_pending:1m type=number;
    js_set $gw_charge gw.takeCharge;"""
    charge = "\n            proxy_set_header x-gw-tokens $gw_charge;" if counted else ""
    server = f"""
        # Limits: the limiter answers 204 (admitted) or 403 with Retry-After (limited). When it is
        # down or slow, the request is admitted (fail open: docs/gateway.md, Limits).
        location = /_gw/limit {{
            internal;
            # The key first (limits exist only with keys): unknown or missing is 401, unread.
            if ($gw_tenant = "") {{
                return 401;
            }}
            if ($gw_limited = "") {{
                return 204;
            }}
            proxy_pass http://gw_limiter/check;
            {to_limiter}
            proxy_set_header x-gw-tenant $gw_tenant;{charge}
            error_page 500 502 503 504 = @gw_limit_open;
        }}
        location @gw_limit_open {{
            return 204;
        }}
        location @gw_rate_limited {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            add_header Retry-After $gw_limit_retry always;
            return 429 '$gw_limited_body\\n';
        }}"""
    out = {
        "http": http,
        "locations": """
            auth_request /_gw/limit;
            auth_request_set $gw_limit_retry $upstream_http_retry_after;
            auth_request_set $gw_limit_kind $upstream_http_x_gw_limit;""",
        "server": server,
        "health": "", "servers": "",
        # The limiter's "limited" (auth_request passes only 401 and 403 through) becomes 429.
        "error_page": "        error_page 403 = @gw_rate_limited;\n",
    }
    if counted:
        out["health"] = """
        location @gw_flush {
            js_periodic gw.flushCharges interval=1s;
        }"""
        out["servers"] = f"""

    # Loopback only: the periodic flush of token usage to the limiter (ngx.fetch cannot use an
    # upstream block, so it calls this server, which can).
    server {{
        listen {s.internal_listen};
        access_log off;
        location = /_gw/charge {{
            proxy_pass http://gw_limiter/charge;
            {to_limiter}
            proxy_set_header x-gw-tenant $http_x_gw_tenant;
            proxy_set_header x-gw-tokens $http_x_gw_tokens;
        }}
        location / {{
            return 404;
        }}
    }}"""
    return out


def nginx_conf(s: GatewaySettings) -> str:
    tmp = s.scratch_dir
    lb = _limit_blocks(s)
    # With keys on, the key is checked in the access phase by a subrequest that sees only the
    # headers (auth_request), so an unknown or missing key gets 401 before the body is read;
    # js_content would read the whole body before the script could look at the key. nginx takes
    # one auth_request per location: with limited tenants the limiter's check (``/_gw/limit``)
    # refuses a keyless request first, else ``/_gw/auth`` only checks the key.
    auth = "\n            auth_request /_gw/auth;" if s.keys_file else ""
    # The model list and unknown paths need the key only; the model calls the limits too.
    limits = lb["locations"] or auth
    hide = "".join(f"\n            proxy_hide_header {name};" for name in HIDDEN_RESPONSE_HEADERS)
    too_large = _error_json(f"The request body is larger than {s.max_body_bytes} bytes.",
                            "invalid_request_error", "request_too_large")
    too_many_connections = _error_json(
        f"Too many open connections from your address (at most {s.connections_per_address}); close some and "
        "retry.", "rate_limit_error", "too_many_connections")
    unauthorized = _error_json("Incorrect API key provided, or none: send it as `Authorization: Bearer <key>`.",
                               "invalid_request_error", "invalid_api_key")
    unavailable = _error_json("No server can take requests for this model right now; retry later.",
                              "service_unavailable", "service_unavailable")
    timeout = _error_json("The request timed out upstream.", "timeout", "timeout")
    bad_request = _error_json("The request could not be read.", "invalid_request_error", "bad_request")
    internal = _error_json("The gateway failed to handle the request.", "server_error", "internal_error")
    upstream_common = f"""proxy_pass http://gw_router;
            proxy_http_version 1.0;
            proxy_pass_request_headers off;
            proxy_set_header Host $proxy_host;
            proxy_set_header Content-Type "application/json";
            proxy_set_header Accept $http_accept;
            proxy_set_header x-request-id $request_id;
            proxy_set_header x-model $gw_model;
            proxy_set_header x-input-tokens $gw_input_tokens;
            proxy_set_header x-stargate-max-wait-ms $gw_max_wait;
            proxy_set_header x-routing-key $gw_routing_key;
            proxy_set_header x-cache-affinity-key $gw_affinity;
            proxy_set_body $gw_body;
            proxy_next_upstream off;
            proxy_connect_timeout 5s;
            proxy_read_timeout {s.timeout_seconds}s;
            proxy_send_timeout {s.timeout_seconds}s;{hide}"""
    return f"""# Generated by llm-serving (router.gateway); see components/compile/gateway/nginx.py.
load_module {s.js_module};
worker_processes {s.worker_processes};
daemon off;
pid {tmp}/nginx.pid;
error_log stderr warn;

events {{
    worker_connections 4096;
}}

http {{
    server_tokens off;
    default_type application/json;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    # Larger bodies get 413; beyond a small memory buffer a body streams to a temp file.
    client_max_body_size {s.max_body_bytes};
    client_body_buffer_size {BODY_MEMORY_BUFFER};
    client_body_in_file_only clean;
    client_header_buffer_size 4k;
    large_client_header_buffers 4 16k;
    client_header_timeout {CLIENT_HEADER_TIMEOUT};
    client_body_timeout {CLIENT_BODY_TIMEOUT};
    send_timeout {SEND_TIMEOUT};
    keepalive_timeout {KEEPALIVE_TIMEOUT};
    keepalive_requests {KEEPALIVE_REQUESTS};
    reset_timedout_connection on;
    limit_conn_zone $binary_remote_addr zone=gw_address:1m;
    limit_conn_status 429;

    log_format gw escape=json '{{"time":"$time_iso8601","request_id":"$request_id",'
        '"client_request_id":"$gw_client_request_id","method":"$request_method",'
        '"uri":"$uri","status":$status,"tenant":"$gw_tenant","model":"$gw_model","bytes":$bytes_sent,'
        '"request_time":$request_time,"upstream_status":"$upstream_status",'
        '"upstream_first_byte":"$upstream_header_time"}}';
    access_log /dev/stdout gw;
    # Metrics (gateway.js, observe): a log format whose only variable runs the counting, so it
    # runs once per request when status and times are final. The line written is empty.
    log_format gw_metrics '$gw_observe';
    access_log /dev/null gw_metrics;

    js_path {s.config_dir};
    js_import gw from {SCRIPT};
    js_set $gw_tenant gw.tenant;
    js_var $gw_model;
    js_var $gw_input_tokens;
    js_var $gw_max_wait;
    js_var $gw_routing_key;
    js_var $gw_affinity;
    js_var $gw_body;
    js_var $gw_kind;
    js_var $gw_fold;
    # Usage read from answers (countStream / foldCounted) for the metrics and token limits.
    js_var $gw_usage_tail;
    js_var $gw_prompt_used;
    js_var $gw_completion_used;
    js_var $gw_events_seen;
    js_set $gw_observe gw.observe;
    js_shared_dict_zone zone=gw_metrics:4m type=number;

    # The id the router gets (its global request id and pylon's admission key) is always the
    # gateway's own $request_id: a caller's would let two tenants share one. The caller's id,
    # when a plain token, is kept for correlation: logged and echoed as x-client-request-id.
    map $http_x_request_id $gw_client_request_id {{
        "~^[A-Za-z0-9._:-]{{1,128}}$" $http_x_request_id;
        default "";
    }}
{lb["http"]}

    # HTTP/1.0 to the router, one connection per request: its answer then ends when it closes the
    # connection. Over HTTP/1.1 its chunked stream ends with a terminator the router writes after
    # the last event without TCP_NODELAY (the public build sets none), which Nagle holds until the
    # receiver's delayed ACK: ~40 ms added to most non-streaming answers, measured by
    # bench/gateway.py (2026-12-01: fold median 55 ms over HTTP/1.1, 8-15 ms over HTTP/1.0).
    upstream gw_router {{
        server {s.upstream};
    }}

    server {{
        listen {s.listen};
        add_header x-request-id $request_id always;
        add_header x-client-request-id $gw_client_request_id always;
        # Every connection, authenticated or not, counts against its address.
        limit_conn gw_address {s.connections_per_address};
        error_page 401 = @gw_unauthorized;
        error_page 413 = @gw_too_large;
        # limit_conn's refusal (nginx's own 429; the limiter's 429s come from @gw_rate_limited).
        error_page 429 = @gw_too_many_connections;
{lb["error_page"]}        error_page 400 = @gw_bad_request;
        error_page 500 = @gw_internal;

        location = /v1/chat/completions {{{limits}
            js_content gw.chat;
        }}
        location = /v1/responses {{{limits}
            js_content gw.responses;
        }}
        location = /v1/embeddings {{{limits}
            js_content gw.embeddings;
        }}
        location = /v1/models {{{auth}
            js_content gw.models;
        }}
        location / {{{auth}
            js_content gw.unsupported;
        }}
        # auth_request's subrequest: headers only (a subrequest never reads the client's body).
        location = /_gw/auth {{
            internal;
            js_content gw.authorize;
        }}

        # Streaming chat / Responses and embeddings: the body as the client sent it, unbuffered.
        location @gw_stream {{
            {upstream_common}
            proxy_buffering off;
            proxy_request_buffering on;
            proxy_intercept_errors on;
            error_page 404 502 503 = @gw_unavailable;
            error_page 504 = @gw_timeout;
            error_page 413 = @gw_too_large;
            js_body_filter gw.countStream buffer_type=buffer;
        }}
        # Non-streaming chat / Responses: sent as a stream, folded into one answer by gateway.js.
        location @gw_fold {{
            {upstream_common}
            proxy_buffering on;
            proxy_intercept_errors on;
            error_page 404 502 503 = @gw_unavailable;
            error_page 504 = @gw_timeout;
            error_page 413 = @gw_too_large;
            js_header_filter gw.foldHeaders;
            js_body_filter gw.foldCounted buffer_type=buffer;
        }}
        location = /_gw/models {{
            internal;
            proxy_pass http://gw_router/v1/models;
            proxy_http_version 1.0;
            proxy_pass_request_headers off;
            proxy_pass_request_body off;
            proxy_set_header Host $proxy_host;
            proxy_set_header Content-Length "";
            proxy_connect_timeout 5s;
            proxy_read_timeout 10s;
            subrequest_output_buffer_size 1m;
        }}
        location @gw_unauthorized {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            add_header WWW-Authenticate Bearer always;
            return 401 '{unauthorized}\n';
        }}
        location @gw_unavailable {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            add_header Retry-After {s.retry_after_seconds} always;
            return 503 '{unavailable}\\n';
        }}
        location @gw_timeout {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            return 504 '{timeout}\\n';
        }}
        location @gw_too_large {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            return 413 '{too_large}\\n';
        }}
        location @gw_too_many_connections {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            add_header Retry-After 1 always;
            return 429 '{too_many_connections}\\n';
        }}
        location @gw_bad_request {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            return 400 '{bad_request}\\n';
        }}
        location @gw_internal {{
            add_header x-request-id $request_id always;
            add_header x-client-request-id $gw_client_request_id always;
            return 500 '{internal}\\n';
        }}{lb["server"]}
    }}

    # Probes (and nginx's connection counters): a port of its own, outside the API's logs.
    server {{
        listen {s.health_listen};
        access_log off;
        location = {HEALTH_PATH} {{
            return 200 '{{"status":"ok"}}\\n';
        }}
        location = /stub_status {{
            stub_status;
        }}
        location = {METRICS_PATH} {{
            js_content gw.metrics;
        }}{lb["health"]}
    }}{lb["servers"]}
}}
"""


def render_files(s: GatewaySettings) -> dict[str, str]:
    """The ConfigMap's data: file name -> text."""
    files = {NGINX_CONF: nginx_conf(s), SCRIPT: script(), SETTINGS: settings_module(s)}
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
