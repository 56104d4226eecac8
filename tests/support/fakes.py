"""An in-memory Kubernetes API for the provider tests, plus builders of wire-shape objects.

``FakeCluster.clients()`` returns a real ``providers.kube.Clients`` whose ``core / apps / batch /
discovery / custom`` are fakes with the methods the providers call. Objects are stored as
wire-shape dicts (camelCase) and returned as the typed models of the real ``kubernetes`` client
(deserialized, so attribute access such as ``pod.metadata.deletion_timestamp`` works and
``kube.to_dict`` goes through a real ``ApiClient.sanitize_for_serialization``). Lists come back
sorted by name, as the API server returns them.

Every call is counted (``cluster.calls``, ``cluster.count(method)``) and faults can be injected per
method (``cluster.fail(method, error, times)``, method ``"*"`` for any): ``api_error(429,
retry_after=2)``, ``api_error(503)``, ``protocol_error()``, ``api_error(403)``, ``api_error(404)``.
``cluster.when(method, nth, action)`` runs ``action(cluster)`` before the nth call of a method, to
script state changes (a Job that succeeds on its third read, a rollout that completes).

Watches (``list_namespaced_job(..., watch=True)``, counted as ``watch_namespaced_job``) answer with
the next stream scripted by ``cluster.stream(...)``: the API server's newline-delimited JSON events,
delivered in small chunks as a network would, through a urllib3-like response. An unscripted watch
is an empty stream. With ``cluster.watch_clock`` set, a stream that ends by its timeout advances
that clock by ``timeout_seconds`` (``lasts=`` overrides: ``lasts=0`` is a stream cut at once).
``put`` stamps a ``resourceVersion`` on objects without one, as the API server does.
"""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Optional

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from providers import kube
from providers.status import wait_until_serving

NS = "llm"
MODEL = "llama"
SOURCE = "meta-llama/Llama-3.1-8B-Instruct@main"
REPO = "meta-llama/Llama-3.1-8B-Instruct"
DEPLOYMENT = f"{MODEL}-server"
SERVICE = f"{MODEL}"
PULLER_JOB = f"{MODEL}-puller-1a2b3c4d"
CLAIM = f"{MODEL}-weights-1a2b3c4d"
MODEL_LABEL = "llm-serving.dev/model"
COMPONENT_LABEL = "app.kubernetes.io/component"
NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
SERVER = f"{DEPLOYMENT}-7d9f8c6b5-q2w3e"  # a server pod of the Deployment
# The status inputs of one vLLM model, as its component records them; the wait tests override
# what they vary (timeouts, min_replicas).
STATUS_PROPS = {
    "namespace": NS, "model": MODEL, "deployment": DEPLOYMENT, "service": SERVICE, "puller_job": PULLER_JOB,
    "deployment_revision": "abc123", "endpoint_url": f"http://{SERVICE}.{NS}.svc.cluster.local:8000",
    "pending_timeout_seconds": 900, "ready_timeout_seconds": 60, "poll_seconds": 1, "kubeconfig": "", "context": "",
}


# --- errors -------------------------------------------------------------------------------------

REASONS = {400: "Bad Request", 403: "Forbidden", 404: "Not Found", 409: "Conflict", 422: "Unprocessable Entity",
           429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
           504: "Gateway Timeout"}


def api_error(status: int, retry_after: Optional[float] = None) -> ApiException:
    error = ApiException(status=status, reason=REASONS.get(status, "Error"))
    headers = urllib3.HTTPHeaderDict()
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    error.headers = headers
    return error


def protocol_error() -> urllib3.exceptions.ProtocolError:
    return urllib3.exceptions.ProtocolError(
        "Connection aborted.", ConnectionResetError(104, "Connection reset by peer"))


# --- builders (wire shape, valid enough for the typed client models) ----------------------------

def ts(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(seconds: float, now: datetime = NOW) -> str:
    return ts(now - timedelta(seconds=seconds))


def container_status(name: str = "server", *, image: str = "docker.io/vllm/vllm-openai:v0.9.1",
                     ready: bool = False, restarts: int = 0, waiting: Optional[dict] = None,
                     running: bool = False, terminated: Optional[dict] = None,
                     last_terminated: Optional[dict] = None) -> dict:
    state: dict = {}
    if waiting is not None:
        state["waiting"] = waiting
    elif terminated is not None:
        state["terminated"] = {"exitCode": 0, **terminated}
    elif running:
        state["running"] = {"startedAt": ago(30)}
    status = {"name": name, "image": image, "imageID": "", "ready": ready, "restartCount": restarts,
              "state": state, "lastState": {}}
    if last_terminated is not None:
        status["lastState"] = {"terminated": {"exitCode": 1, **last_terminated}}
    return status


def pod(name: str, *, component: str = "server", phase: str = "Running", age: float = 60,
        containers: Optional[list[dict]] = None, conditions: Optional[list[dict]] = None,
        job: Optional[str] = None, now: datetime = NOW, finalizers: Optional[list[str]] = None) -> dict:
    labels = {MODEL_LABEL: MODEL, COMPONENT_LABEL: component, "app.kubernetes.io/name": MODEL}
    if job:
        labels["batch.kubernetes.io/job-name"] = job
    meta: dict = {"name": name, "namespace": NS, "labels": labels, "creationTimestamp": ago(age, now)}
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"containers": [{"name": "puller" if component == "weights-puller" else "server",
                                 "image": "docker.io/vllm/vllm-openai:v0.9.1"}]},
        "status": {"phase": phase, "conditions": conditions or [], "containerStatuses": containers or []},
    }


def ready_server_pod(name: str, **kwargs: Any) -> dict:
    return pod(name, containers=[container_status(ready=True, running=True)],
               conditions=[{"type": "Ready", "status": "True"}], **kwargs)


def unschedulable(message: str) -> list[dict]:
    return [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]


def event(obj: str, reason: str, message: str, *, age: float = 10, kind: str = "Pod",
          type_: str = "Warning", now: datetime = NOW, seq: int = 0) -> dict:
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{obj}.{reason.lower()}{seq}", "namespace": NS},
        "involvedObject": {"kind": kind, "name": obj, "namespace": NS},
        "reason": reason, "message": message, "type": type_,
        "lastTimestamp": ago(age, now), "count": 1,
    }


def job(name: str = PULLER_JOB, *, state: str = "running", reason: str = "", message: str = "",
        source: str = SOURCE, completed_age: float = 5) -> dict:
    conditions: list[dict] = []
    status: dict = {"active": 1} if state == "running" else {}
    if state == "succeeded":
        conditions = [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]
        status = {"succeeded": 1, "completionTime": ago(completed_age)}
    elif state == "failed":
        conditions = [{"type": "FailureTarget", "status": "True", "reason": reason or "BackoffLimitExceeded",
                       "message": message or "Job has reached the specified backoff limit"},
                      {"type": "Failed", "status": "True", "reason": reason or "BackoffLimitExceeded",
                       "message": message or "Job has reached the specified backoff limit"}]
        status = {"failed": 3}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {MODEL_LABEL: MODEL, COMPONENT_LABEL: "weights-puller"},
                     "annotations": {"llm-serving.dev/model-source": source}},
        "spec": {"backoffLimit": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "puller", "image": "docker.io/library/python:3.12", "command": ["hf"]}]}}},
        "status": {**status, "conditions": conditions},
    }


def deployment(name: str = DEPLOYMENT, *, replicas: int = 1, ready: int = 0, generation: int = 1,
               observed: Optional[int] = None, updated: Optional[int] = None,
               total: Optional[int] = None) -> dict:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS, "generation": generation,
                     "labels": {MODEL_LABEL: MODEL, COMPONENT_LABEL: "server"}},
        "spec": {"replicas": replicas,
                 "selector": {"matchLabels": {"app.kubernetes.io/name": MODEL, COMPONENT_LABEL: "server"}},
                 "template": {"spec": {"containers": [{"name": "server", "image": "docker.io/vllm/vllm-openai:v0.9.1"}]}}},
        "status": {"replicas": replicas if total is None else total, "readyReplicas": ready,
                   "updatedReplicas": replicas if updated is None else updated,
                   "observedGeneration": generation if observed is None else observed},
    }


def endpoint(pod_name: Optional[str], address: str, *, ready: Optional[bool] = True,
             terminating: Optional[bool] = None, serving: Optional[bool] = None, node: str = "gpu-1") -> dict:
    conditions: dict = {}
    if ready is not None:
        conditions["ready"] = ready
    if serving is not None:
        conditions["serving"] = serving
    if terminating is not None:
        conditions["terminating"] = terminating
    result: dict = {"addresses": [address], "conditions": conditions, "nodeName": node}
    if pod_name is not None:
        result["targetRef"] = {"kind": "Pod", "name": pod_name, "namespace": NS}
    return result


def endpoint_slice(name: str, endpoints: list[dict], *, service: str = SERVICE,
                   address_type: str = "IPv4") -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": address_type,
        "metadata": {"name": name, "namespace": NS, "labels": {"kubernetes.io/service-name": service}},
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
    }


def ready_slices(pods: list[str]) -> list[dict]:
    return [endpoint_slice(f"{SERVICE}-abcde", [endpoint(p, f"10.0.0.{i + 10}") for i, p in enumerate(pods)])]


def pvc(name: str = CLAIM) -> dict:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "50Gi"}}},
        "status": {"phase": "Bound"},
    }


# --- the fake API ----------------------------------------------------------------------------

def _selector_terms(selector: str) -> list[str]:
    """Split a label selector at the commas that separate terms (not those inside ``in (…)``)."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [*terms, current]


def _matches(labels: dict, selector: Optional[str]) -> bool:
    """Equality (``k=v``) and set-based (``k in (a,b)``) terms, as the API server reads them."""
    if not selector:
        return True
    for term in _selector_terms(selector):
        key, operator, values = term.strip().partition(" in ")
        if operator:
            if labels.get(key.strip()) not in {v.strip() for v in values.strip().strip("()").split(",")}:
                return False
            continue
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.strip():
            return False
    return True


class FakeCluster:
    """Objects by kind, counted calls, injected faults, scripted changes."""

    def __init__(self, now: datetime = NOW):
        self.now = now
        self.objects: dict[str, dict[tuple[str, str], dict]] = defaultdict(dict)
        self.logs: dict[str, str] = {}
        self.previous_logs: dict[str, str] = {}
        self.calls: list[tuple[str, tuple, dict]] = []
        self.faults: dict[str, list[BaseException]] = defaultdict(list)
        self.scripts: dict[tuple[str, int], list[Callable[[FakeCluster], None]]] = defaultdict(list)
        self.deleted: list[tuple[str, str]] = []
        self.graceful_delete = False
        self.api_client = ApiClient()
        self.version = 100
        self.streams: list[tuple[list, Optional[float]]] = []
        self.watches: list[FakeWatchResponse] = []
        self.watch_clock: Optional[FakeClock] = None

    # state ------------------------------------------------------------------------------------
    def put(self, *objs: dict) -> FakeCluster:
        for obj in objs:
            obj = copy.deepcopy(obj)
            meta = obj["metadata"]
            if not meta.get("resourceVersion"):
                self.version += 1
                meta["resourceVersion"] = str(self.version)
            self.objects[obj["kind"]][(meta.get("namespace", NS), meta["name"])] = obj
        return self

    def stream(self, *events: Any, lasts: Optional[float] = None) -> FakeCluster:
        """Script the next watch: events are ``(type, object)`` pairs (an ``ERROR`` object is a
        Status), or callables run on the cluster when the stream reaches them."""
        self.streams.append((list(events), lasts))
        return self

    def remove(self, kind: str, name: str, namespace: str = NS) -> None:
        self.objects[kind].pop((namespace, name), None)

    def get(self, kind: str, name: str, namespace: str = NS) -> Optional[dict]:
        return self.objects[kind].get((namespace, name))

    def names(self, kind: str) -> list[str]:
        return sorted(name for (_, name) in self.objects[kind])

    # faults and scripts -----------------------------------------------------------------------
    def fail(self, method: str, error: BaseException | Callable[[], BaseException], times: int = 1) -> FakeCluster:
        for _ in range(times):
            self.faults[method].append(error)
        return self

    def fail_always(self, method: str, error: Callable[[], BaseException]) -> FakeCluster:
        return self.fail(method, error, times=10_000)

    def when(self, method: str, nth: int, action: Callable[[FakeCluster], None]) -> FakeCluster:
        self.scripts[(method, nth)].append(action)
        return self

    def count(self, method: Optional[str] = None) -> int:
        return len(self.calls) if method is None else sum(1 for m, _, _ in self.calls if m == method)

    def counts(self) -> Counter:
        return Counter(m for m, _, _ in self.calls)

    def _enter(self, method: str, args: tuple, kwargs: dict) -> None:
        self.calls.append((method, args, kwargs))
        for action in self.scripts.pop((method, self.count(method)), []):
            action(self)
        for key in (method, "*"):
            if self.faults[key]:
                error = self.faults[key].pop(0)
                raise error() if callable(error) and not isinstance(error, BaseException) else error

    # typed results ----------------------------------------------------------------------------
    def typed(self, obj: dict, model: str) -> Any:
        return self.api_client.deserialize(json.dumps(obj), model, "application/json")

    def read(self, kind: str, model: str, name: str, namespace: str) -> Any:
        obj = self.get(kind, name, namespace)
        if obj is None:
            raise api_error(404)
        return self.typed(obj, model)

    def listing(self, kind: str, model: str, namespace: str, selector: Optional[str] = None,
                match: Callable[[dict], bool] = lambda _: True) -> Any:
        items = [obj for (ns, name), obj in sorted(self.objects[kind].items())
                 if ns == namespace and _matches((obj["metadata"].get("labels") or {}), selector) and match(obj)]
        return self.typed({"apiVersion": "v1", "kind": f"{kind}List", "metadata": {}, "items": items}, model)

    def clients(self) -> kube.Clients:
        return kube.Clients(core=FakeCore(self), apps=FakeApps(self), batch=FakeBatch(self),
                            discovery=FakeDiscovery(self), custom=FakeCustom(self))


class _Api:
    def __init__(self, cluster: FakeCluster):
        self.cluster = cluster
        self.api_client = cluster.api_client


class FakeCore(_Api):
    def list_namespaced_pod(self, namespace: str, label_selector: Optional[str] = None, **kwargs: Any) -> Any:
        self.cluster._enter("list_namespaced_pod", (namespace,), {"label_selector": label_selector, **kwargs})
        listing = self.cluster.listing("Pod", "V1PodList", namespace, label_selector)
        if self.cluster.graceful_delete:  # pods marked for deletion go away after one more list
            for (ns, name), obj in list(self.cluster.objects["Pod"].items()):
                if obj["metadata"].get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
                    self.cluster.remove("Pod", name, ns)
        return listing

    def read_namespaced_pod_log(self, name: str, namespace: str, **kwargs: Any) -> str:
        self.cluster._enter("read_namespaced_pod_log", (name, namespace), kwargs)
        pod = self.cluster.get("Pod", name, namespace)
        if pod is None:
            raise api_error(404)
        # ``logs``: what the kubelet's plain read returns; ``previous_logs``: its ``previous`` read.
        # A container waiting to start again (CrashLoopBackOff) has no current attempt: both reads
        # return its last terminated one, so a test may give that log either way.
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        waiting = any("waiting" in (c.get("state") or {}) for c in statuses
                      if c.get("name") == kwargs.get("container", c.get("name")))
        if kwargs.get("previous"):
            text = self.cluster.previous_logs.get(name, self.cluster.logs.get(name, "") if waiting else "")
        else:
            text = self.cluster.logs.get(name, "")
        tail = kwargs.get("tail_lines")
        return "\n".join(text.splitlines()[-tail:]) + "\n" if tail and text else text

    def list_namespaced_event(self, namespace: str, field_selector: Optional[str] = None, **kwargs: Any) -> Any:
        self.cluster._enter("list_namespaced_event", (namespace,), {"field_selector": field_selector, **kwargs})
        wanted = (field_selector or "").partition("involvedObject.name=")[2]
        return self.cluster.listing("Event", "CoreV1EventList", namespace,
                                    match=lambda e: not wanted or e["involvedObject"]["name"] == wanted)

    def delete_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.cluster._enter("delete_namespaced_pod", (name, namespace), kwargs)
        obj = self.cluster.get("Pod", name, namespace)
        if obj is None:
            raise api_error(404)
        self.cluster.deleted.append(("Pod", name))
        obj["metadata"]["deletionTimestamp"] = ts(self.cluster.now)
        if not self.cluster.graceful_delete and not obj["metadata"].get("finalizers"):
            self.cluster.remove("Pod", name, namespace)
        return self.cluster.typed(obj, "V1Pod")

    def read_namespaced_persistent_volume_claim(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.cluster._enter("read_namespaced_persistent_volume_claim", (name, namespace), kwargs)
        return self.cluster.read("PersistentVolumeClaim", "V1PersistentVolumeClaim", name, namespace)

    def delete_namespaced_persistent_volume_claim(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.cluster._enter("delete_namespaced_persistent_volume_claim", (name, namespace), kwargs)
        self.cluster.deleted.append(("PersistentVolumeClaim", name))
        self.cluster.remove("PersistentVolumeClaim", name, namespace)


class FakeApps(_Api):
    def read_namespaced_deployment(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.cluster._enter("read_namespaced_deployment", (name, namespace), kwargs)
        return self.cluster.read("Deployment", "V1Deployment", name, namespace)


class FakeWatchResponse:
    """What ``_preload_content=False`` returns: a urllib3 response streamed in chunks."""

    CHUNK = 7  # bytes: events split mid-line, as a network may deliver them

    def __init__(self, cluster: FakeCluster, events: list, lasts: Optional[float], kwargs: dict):
        self.cluster, self.events, self.lasts, self.kwargs = cluster, events, lasts, kwargs
        self.status = 200
        self.closed = self.released = False

    def stream(self, amt: Any = None, decode_content: Any = None):
        for item in self.events:
            if callable(item):
                item(self.cluster)
                continue
            kind, obj = item
            line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            for start in range(0, len(line), self.CHUNK):
                yield line[start:start + self.CHUNK]
        clock = self.cluster.watch_clock
        if clock is not None:  # the server ends the stream at its timeout, unless cut earlier
            clock.now += self.kwargs.get("timeout_seconds", 0) if self.lasts is None else self.lasts

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


class FakeBatch(_Api):
    def list_namespaced_job(self, namespace: str, field_selector: Optional[str] = None, watch: bool = False,
                            **kwargs: Any) -> Any:
        self.cluster._enter("watch_namespaced_job" if watch else "list_namespaced_job", (namespace,),
                            {"field_selector": field_selector, **kwargs})
        if not watch:
            name = (field_selector or "").removeprefix("metadata.name=")
            return self.cluster.listing("Job", "V1JobList", namespace,
                                        match=lambda obj: not name or obj["metadata"]["name"] == name)
        events, lasts = self.cluster.streams.pop(0) if self.cluster.streams else ([], None)
        response = FakeWatchResponse(self.cluster, events, lasts, {"field_selector": field_selector, **kwargs})
        self.cluster.watches.append(response)
        return response

    def read_namespaced_job(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.cluster._enter("read_namespaced_job", (name, namespace), kwargs)
        return self.cluster.read("Job", "V1Job", name, namespace)

    def delete_namespaced_job(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.cluster._enter("delete_namespaced_job", (name, namespace), kwargs)
        self.cluster.deleted.append(("Job", name))
        self.cluster.remove("Job", name, namespace)


class FakeDiscovery(_Api):
    def list_namespaced_endpoint_slice(self, namespace: str, label_selector: Optional[str] = None, **kwargs: Any) -> Any:
        self.cluster._enter("list_namespaced_endpoint_slice", (namespace,), {"label_selector": label_selector, **kwargs})
        return self.cluster.listing("EndpointSlice", "V1EndpointSliceList", namespace, label_selector)


class FakeCustom(_Api):
    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                     **kwargs: Any) -> Any:
        self.cluster._enter("get_namespaced_custom_object", (group, version, namespace, plural, name), kwargs)
        obj = self.cluster.get(plural, name, namespace)
        if obj is None:
            raise api_error(404)
        return copy.deepcopy(obj)


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self, start: float = 1000.0):
        self.now = start
        self.sleeps: list[float] = []
        self.on_sleep: list[Callable[[int], None]] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        for hook in self.on_sleep:
            hook(len(self.sleeps))


# --- the status wait ----------------------------------------------------------------------------

def wait_serving(cluster: FakeCluster, clock: FakeClock, props: Optional[dict] = None, **overrides: Any):
    """``wait_until_serving`` on ``props`` (default ``STATUS_PROPS``) with ``overrides``, against
    this in-memory API, sleeping on ``clock``."""
    return wait_until_serving({**(props or STATUS_PROPS), **overrides}, sleep=clock.sleep, clock=clock,
                              connect=lambda _target: cluster.clients())
