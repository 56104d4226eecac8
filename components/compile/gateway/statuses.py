"""Every status a caller can get from the gateway, in one place: the error answers the gateway
makes itself (OpenAI's shape, {"error": {"message", "type", "param", "code"}}) by their `code`,
with their HTTP status, OpenAI error `type` and when they are given, and the statuses that pass
through from the engine.

nginx.conf's own error answers (``nginx.py``) and the script's (``gateway.js``, ``refuse``: the
settings module carries this table by code) take their status and type from here; the errors
table of docs/gateway.md is rendered from it (``markdown_table``) and a test holds the two
together (tests/gateway/test_gateway_statuses.py), as it holds that every code the script or the
rendered config answers with is here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    status: int
    code: str
    type: str
    when: str


ANSWERS: tuple[Answer, ...] = (
    Answer(400, "invalid_json", "invalid_request_error",
           "body empty, not JSON, not an object, not valid UTF-8, nested deeper than 1,497 containers, or `model`, `stream`, "
           "`stream_options`, `messages`, `input` or `instructions` given twice (also written with escapes, as `mod\\u0065l`: "
           "vLLM's JSON decoder reads the last one, the gateway's checks would see another)"),
    Answer(400, "missing_model", "invalid_request_error",
           "no `model`, or an empty one"),
    Answer(400, "invalid_value", "invalid_request_error",
           "`stream` not a boolean"),
    Answer(400, "bad_request", "invalid_request_error",
           "a request line, URI or header nginx cannot read"),
    Answer(401, "invalid_api_key", "invalid_request_error",
           "API keys on, and no `Authorization: Bearer` key or an unknown one (`WWW-Authenticate: Bearer`); answered from the "
           "headers, before the body is read"),
    Answer(404, "model_not_found", "invalid_request_error",
           "a model the gateway does not front, or one the tenant may not use"),
    Answer(404, "unsupported_endpoint", "invalid_request_error",
           "`/v1/completions` and unknown paths"),
    Answer(405, "method_not_allowed", "invalid_request_error",
           "e.g. `GET /v1/chat/completions` (`Allow` says which)"),
    Answer(413, "request_too_large", "invalid_request_error",
           "body over `maxBodyBytes` (4 MiB), or the router's replay limit"),
    Answer(429, "rate_limit_exceeded", "rate_limit_error",
           "the tenant's request or token limit reached (the message says which); `Retry-After`: whole seconds until the limiter "
           "admits it again (see *Limits*)"),
    Answer(429, "too_many_connections", "rate_limit_error",
           "one client address holding more than 64 open connections (`Retry-After: 1`)"),
    Answer(429, "too_many_requests_in_flight", "rate_limit_error",
           "the tenant's share of the replica's in-flight budgets is taken: requests or body bytes open (before the body is read), "
           "or answers being folded (`Retry-After: 1`; without keys a 503 `service_unavailable`, see *The memory bound*)"),
    Answer(503, "service_unavailable", "service_unavailable",
           "the router is down or unreachable, has no serving target for the model (its `404 no_eligible_candidates`, `503`), or a "
           "transport failure (`502`); with `hold` on, a model with no server that did not get one within `hold.timeoutSeconds` (or "
           "the request's deadline), more requests held than `hold.maxPerModel` / `hold.maxTotal` (at once), or a held request "
           "giving way to a tenant under its share of them; `Retry-After: retryAfterSeconds` (2)"),
    Answer(504, "timeout", "timeout",
           "the router answered nothing within the deadline"),
    Answer(400, "https_required", "invalid_request_error",
           "TLS on (`tls.enabled`), and plain HTTP sent to the client port; answered before anything else runs"),
    Answer(500, "internal_error", "server_error", "the gateway failed to handle the request (a bug: never expected)"),
    Answer(502, "response_too_large", "server_error",
           "non-streaming: the stream is over `maxResponseBytes` (use `stream: true`)"),
    Answer(502, "bad_gateway", "server_error",
           "non-streaming: the stream is unreadable, or ends before `[DONE]` / the final Responses event"),
)

# What passes through from the engine, with the status it has there (rows of the docs' table).
PASSED_THROUGH: tuple[tuple[str, str, str], ...] = (
    ("other 4xx", "the engine's", "the engine's own error (e.g. a bad parameter) passes through"),
    ("the engine's", "the engine's", "non-streaming: an error the engine reports in the middle of the stream, with its "
     "`code` as the status when that is an HTTP status (else 502)"),
)

BY_CODE: dict[str, Answer] = {answer.code: answer for answer in ANSWERS}


def answer(code: str) -> Answer:
    return BY_CODE[code]


def settings() -> dict[str, dict[str, object]]:
    """The table for the script's settings module: code -> status and type."""
    return {a.code: {"status": a.status, "type": a.type} for a in ANSWERS}


def markdown_table() -> str:
    """docs/gateway.md's errors table."""
    lines = ["| Status | `code` | When |", "|---|---|---|"]
    for a in sorted(ANSWERS, key=lambda a: a.status):
        lines.append(f"| {a.status} | `{a.code}` | {a.when} |")
    lines += [f"| {status} | {code} | {when} |" for status, code, when in PASSED_THROUGH]
    return "\n".join(lines) + "\n"
