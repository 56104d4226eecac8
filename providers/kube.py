"""Kubernetes API access for the dynamic providers and the status command.

Clients are built inside functions, never at import: provider modules are pickled into state
and imported by the provider host, so they must have no import-time side effects.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from contract.props import Target

from .failures import Reported

T = TypeVar("T")

RETRY_STATUSES = {429, 500, 502, 503, 504}
MAX_ATTEMPTS = 6
MAX_BACKOFF_SECONDS = 8.0
MAX_RETRY_AFTER_SECONDS = 30.0


class ClusterUnreachable(Reported):
    """The API could not be read this time (after bounded retries)."""


class NoClusterConfig(Reported):
    """Nothing to connect with: no usable kubeconfig (missing file or context) outside a pod, or
    no Kubernetes client in this Python."""


# What to do about it, for the people who run the CLI and `pulumi up` from a shell.
NO_CLUSTER_FIX = (
    "fix: `source scripts/env.sh` (it exports KUBECONFIG for the simulated cluster; start that with "
    "`bash scripts/cluster/cluster.sh start`), or point KUBECONFIG or llm-serving:cluster.kubeconfig "
    "at your cluster's kubeconfig and set llm-serving:cluster.context if it is not the current one"
)


@dataclass
class Clients:
    core: Any
    apps: Any
    batch: Any
    discovery: Any
    custom: Any
    calls: int = 0


def connect(target: Target) -> Clients:
    try:
        from kubernetes import client, config
    except ImportError:
        # Not the project's Python (e.g. the system's, before `source scripts/env.sh`): say so,
        # rather than let a caller report the import as an unreachable cluster.
        raise NoClusterConfig(
            f"the Kubernetes client is not installed in this Python ({sys.executable}); fix: "
            "`source scripts/env.sh` (it puts the project's .venv first on PATH), or run .venv/bin/python"
        ) from None

    configuration = client.Configuration()
    try:
        if target.data:
            _load_content(config, target.data, target.context, configuration)
        else:
            config.load_kube_config(
                config_file=target.kubeconfig, context=target.context, client_configuration=configuration
            )
    except config.ConfigException as error:
        if target.data:
            raise NoClusterConfig(f"the kubeconfig content the program passed is unusable: {error}; fix: pass "
                                  "a whole kubeconfig (its cluster, user and context) as kubeconfig_content") from None
        # In a pod the service account is the config; anywhere else the client's in-cluster
        # fallback would only say "Service host/port is not set", hiding the kubeconfig's problem.
        if not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise NoClusterConfig(no_cluster_config(target, error)) from None
        config.load_incluster_config(client_configuration=configuration)
    # The client's own urllib3 retries would hide faults from our bounded, logged retries.
    configuration.retries = False
    api = client.ApiClient(configuration)
    return Clients(
        core=client.CoreV1Api(api), apps=client.AppsV1Api(api), batch=client.BatchV1Api(api),
        discovery=client.DiscoveryV1Api(api), custom=client.CustomObjectsApi(api),
    )


def _load_content(config, data: str, context: Optional[str], configuration) -> None:
    """A kubeconfig given as content (YAML or JSON), read by the client from a private file that
    exists only while it is read: the client takes a file or a parsed dict, and the providers parse
    no YAML themselves (.importlinter)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="llm-serving-kubeconfig-") as private:  # mode 0700
        path = os.path.join(private, "config")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as out:
            out.write(data)
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration)


def no_cluster_config(target: Target, error: BaseException) -> str:
    """Which kubeconfig was looked for, what is wrong with it, and the fix."""
    if target.kubeconfig:
        paths, origin = [target.kubeconfig], "llm-serving:cluster.kubeconfig"
    elif os.environ.get("KUBECONFIG"):
        paths, origin = [p for p in os.environ["KUBECONFIG"].split(os.pathsep) if p], "KUBECONFIG"
    else:
        paths, origin = ["~/.kube/config"], "the default; KUBECONFIG is not set"
    where = f"{os.pathsep.join(paths)} ({origin})"
    if not any(os.path.isfile(os.path.expanduser(path)) for path in paths):
        problem = f"no kubeconfig: {where} does not exist"
    elif target.context and "contexts list" in str(error):
        problem = f"kubeconfig {where} has no context {target.context!r} (llm-serving:cluster.context)"
    else:
        problem = f"kubeconfig {where} is unusable: {error}"
    return f"{problem}; {NO_CLUSTER_FIX}"


def status_of(error: BaseException) -> Optional[int]:
    return getattr(error, "status", None)


def _retryable(error: BaseException) -> bool:
    status = status_of(error)
    if status is not None:
        return status in RETRY_STATUSES
    import urllib3

    return isinstance(error, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError))


def _retry_after(error: BaseException) -> Optional[float]:
    headers = getattr(error, "headers", None) or {}
    try:
        return float(headers.get("Retry-After")) if headers.get("Retry-After") else None
    except (TypeError, ValueError):
        return None


def call(clients: Optional[Clients], fn: Callable[..., T], *args: Any,
         attempts: int = MAX_ATTEMPTS, sleep: Callable[[float], None] = time.sleep, **kwargs: Any) -> T:
    """Call the API with bounded retries on 429, 5xx and dropped connections.

    Other errors (403, 404, 409, 422) are the caller's to handle: they are answers, not faults.
    """
    for attempt in range(1, attempts + 1):
        if clients is not None:
            clients.calls += 1
        try:
            return fn(*args, **kwargs)
        except Exception as error:
            if not _retryable(error) or attempt == attempts:
                if _retryable(error):
                    raise ClusterUnreachable(f"{getattr(fn, '__name__', 'call')}: {error}") from error
                raise
            backoff = min(MAX_BACKOFF_SECONDS, 0.25 * 2 ** (attempt - 1)) * (0.8 + 0.4 * random.random())
            # Retry-After is the server's minimum (never jittered below it), bounded so a bogus one can't stall us.
            sleep(max(backoff, min(_retry_after(error) or 0.0, MAX_RETRY_AFTER_SECONDS)))
    raise AssertionError("unreachable")


def to_dict(clients: Clients, obj: Any) -> dict:
    """Typed client objects to wire-shape dicts (camelCase), as the projection expects."""
    if obj is None or isinstance(obj, dict):
        return obj
    return clients.core.api_client.sanitize_for_serialization(obj)


def is_not_found(error: BaseException) -> bool:
    return status_of(error) == 404


def watch_named(clients: Optional[Clients], list_fn: Callable[..., Any], name: str, namespace: str,
                resource_version: str, seconds: float) -> Iterator[tuple[str, dict]]:
    """Watch events of one named object from ``resource_version`` on: (type, wire-shape object).

    The server ends the stream after ``seconds`` (at least 1). An expired version is not raised
    but yielded as it comes, an ``ERROR`` event whose object is a Status with ``code`` 410: the
    caller reads the object again for a fresh version. Refusals (403 without the ``watch`` verb)
    and dropped connections raise as from any call; no retries here: a watch only shortens a
    wait that a plain read must be able to finish without it.
    """
    from kubernetes.watch.watch import iter_resp_lines

    if clients is not None:
        clients.calls += 1
    timeout = max(1, int(seconds))
    response = list_fn(namespace, field_selector=f"metadata.name={name}", resource_version=resource_version,
                       allow_watch_bookmarks=True, timeout_seconds=timeout, watch=True,
                       _preload_content=False, _request_timeout=(10, timeout + 10))
    try:
        for line in iter_resp_lines(response):
            if line.strip():
                event = json.loads(line)
                yield str(event.get("type") or ""), event.get("object") or {}
    finally:
        response.close()
        response.release_conn()
