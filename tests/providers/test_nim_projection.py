"""Operator-path status projection: NIMService.status and NIMCache status, plus the shared pod
diagnostics, to PENDING / READY / ERROR / UNKNOWN. A table of cases; no cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Optional

import pytest

from providers.nim_projection import NimObservation, project_nim_status
from providers.projection import Observation

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
SERVICE, CACHE = "llama", "llama-cache-abc123"


def cr(kind: str, name: str, status) -> dict:
    obj = {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": kind, "metadata": {"name": name}}
    if status is not ...:
        obj["status"] = status
    return obj


def service(state=..., conditions=None) -> dict:
    if state is ...:
        return cr("NIMService", SERVICE, ...)
    status = {"state": state}
    if conditions is not None:
        status["conditions"] = conditions
    return cr("NIMService", SERVICE, status)


def cache(state: Optional[str] = "Ready", conditions=None) -> dict:
    return cr("NIMCache", CACHE, {"state": state, "conditions": conditions or []})


def condition(kind: str, status: str, reason: str, message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def deployment(replicas: int = 1, ready: int = 0) -> dict:
    return {"metadata": {"name": SERVICE, "generation": 1},
            "spec": {"replicas": replicas},
            "status": {"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas, "readyReplicas": ready}}


def pod(name: str = "llama-abc", *, phase: str = "Running", age: int = 60, restarts: int = 0,
        waiting: Optional[dict] = None) -> dict:
    state = {"waiting": waiting} if waiting else {"running": {}}
    return {
        "metadata": {"name": name, "creationTimestamp": (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "labels": {"app": SERVICE, "app.kubernetes.io/component": "server"}},
        "status": {"phase": phase, "containerStatuses": [
            {"name": "llama-ctr", "image": "nvcr.io/nim/meta/llama:1", "ready": False, "restartCount": restarts,
             "state": state, "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}} if restarts else {}}]},
    }


def endpoint_slice(*pods: str) -> dict:
    return {"endpoints": [{"addresses": [f"10.0.0.{i}"], "conditions": {"ready": True},
                           "targetRef": {"kind": "Pod", "name": p}} for i, p in enumerate(pods, 1)]}


def observe(svc=None, cch=None, dep=None, pods=(), slices=(), logs=None) -> NimObservation:
    core = Observation(model=SERVICE, deployment=dep, pods=list(pods), endpoint_slices=list(slices),
                       logs=logs or {}, now=NOW, pending_timeout_seconds=300)
    return NimObservation(model=SERVICE, service_name=SERVICE, cache_name=CACHE, service=svc, cache=cch, core=core)


CASES = [
    # id, observation, state, reason, text in message
    ("nothing-yet", observe(), "PENDING", "not-created", "NIMService llama"),
    ("status-missing", observe(service(), cache("InProgress")), "PENDING", "caching", "InProgress"),
    ("state-null", observe(service(None), cache()), "PENDING", "not-reconciled", "not reconciled"),
    ("state-empty", observe(service(""), cache()), "PENDING", "not-reconciled", "not reconciled"),
    ("status-null", observe(cr("NIMService", SERVICE, None), cache()), "PENDING", "not-reconciled", "not reconciled"),
    ("status-not-a-dict", observe(cr("NIMService", SERVICE, "weird"), cache()), "PENDING", "not-reconciled", ""),
    ("conditions-null", observe(service("NotReady", None), cache(None, None)), "PENDING", "caching", "not reconciled yet"),
    ("cache-missing", observe(service("NotReady"), None), "PENDING", "caching", "to be created"),
    ("cache-pvc-created", observe(service("NotReady"), cache("PVC-Created")), "PENDING", "caching", "PVC-Created"),
    ("cache-legacy-lowercase", observe(service("NotReady"), cache("in-progress")), "PENDING", "caching", "in-progress"),
    ("cache-reconcile-retry", observe(service("NotReady"), cache("Pending", [
        condition("NIM_CACHE_RECONCILE_FAILED", "True", "ReconcileFailed", "pvc quota")])),
     "PENDING", "caching", "pvc quota"),
    ("cache-failed-state", observe(service("NotReady"), cache("Failed", [
        condition("NIM_CACHE_JOB_COMPLETED", "False", "JobFailed", "Job has reached the specified backoff limit")])),
     "ERROR", "cache-failed", "backoff limit"),
    ("cache-job-failed-condition", observe(service("NotReady"), cache("InProgress", [
        condition("NIM_CACHE_JOB_COMPLETED", "False", "JobFailed", "401 Unauthorized")])),
     "ERROR", "cache-failed", "401 Unauthorized"),
    ("cache-failed-no-message", observe(None, cache("Failed")), "ERROR", "cache-failed", "no message"),
    ("service-failed", observe(service("Failed", [
        condition("Ready", "False", "NotReady", ""),
        condition("Failed", "True", "NIMCacheNotFound", "NIMCache llama-cache-abc123 not found")]), cache()),
     "ERROR", "nim-cache-not-found", "not found"),
    ("service-failed-ready-condition-only", observe(service("Failed", [
        condition("Ready", "False", "DeploymentFailed", "quota exceeded")]), cache()),
     "ERROR", "deployment-failed", "quota exceeded"),
    ("service-failed-no-conditions", observe(service("Failed"), cache()), "ERROR", "service-failed", "no message"),
    ("not-ready-no-deployment", observe(service("NotReady"), cache()), "PENDING", "starting", "Deployment"),
    ("not-ready-starting", observe(service("NotReady"), cache(), deployment(), [pod()]), "PENDING", "starting", "0/1"),
    ("pending-constant", observe(service("Pending"), cache(), deployment(), [pod()]), "PENDING", "starting", ""),
    ("crash-loop", observe(service("NotReady"), cache(), deployment(), [pod(restarts=5, waiting={"reason": "CrashLoopBackOff"})],
                           logs={"llama-abc": "getpwuid(): uid not found: 2000"}),
     "ERROR", "uid-unknown", "passwd"),
    ("image-pull", observe(service("NotReady"), cache(), deployment(), [pod(waiting={"reason": "ErrImagePull", "message": (
        'failed to pull and unpack image "nvcr.io/nim/meta/llama:1": failed to resolve reference "nvcr.io/nim/meta/llama:1": '
        "failed to authorize: failed to fetch oauth token: unexpected status: 401 Unauthorized")})]),
     "ERROR", "image-pull", "cannot pull image"),
    # ImagePullBackOff alone names no cause (the kubelet retries): PENDING, not a verdict.
    ("image-pull-backoff-retrying", observe(service("NotReady"), cache(), deployment(), [pod(waiting={
        "reason": "ImagePullBackOff", "message": 'Back-off pulling image "nvcr.io/nim/meta/llama:1"'})]),
     "PENDING", "image-pull-retrying", "the kubelet retries"),
    ("pending-too-long", observe(service("NotReady"), cache(), deployment(), [pod(phase="Pending", age=900)]),
     "ERROR", "pending", "Pending for 900s"),
    ("ready-with-target", observe(service("Ready"), cache(), deployment(ready=1), [pod()], [endpoint_slice("llama-abc")]),
     "READY", "ready", "1 routable target"),
    ("ready-legacy-lowercase", observe(service("ready"), cache(), deployment(ready=1), [pod()], [endpoint_slice("llama-abc")]),
     "READY", "ready", "routable"),
    ("ready-without-target", observe(service("Ready"), cache(), deployment(ready=1), [pod()]),
     "PENDING", "no-targets", "no routable target"),
    ("ready-no-deployment-read", observe(service("Ready"), cache()), "PENDING", "no-targets", "Ready"),
    ("unknown-state", observe(service("Exploded"), cache()), "UNKNOWN", "unknown-state", "'Exploded'"),
]


@pytest.mark.parametrize("obs, state, reason, text", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_projection(obs, state, reason, text):
    status = project_nim_status(obs)
    assert (status.state, status.reason) == (state, reason), status.message
    assert text in status.message


def test_failed_cache_wins_over_everything():
    obs = observe(service("Ready"), cache("Failed"), deployment(ready=1), [pod()], [endpoint_slice("llama-abc")])
    assert project_nim_status(obs).state == "ERROR"


def test_failure_details_carry_the_operators_conditions():
    status = project_nim_status(observe(service("Failed", [
        condition("Failed", "True", "NIMCacheFailed", "cache failed")]), cache()))
    assert status.details["nimService"] == SERVICE and status.details["nimCache"] == CACHE
    assert status.details["conditions"] == ["Failed=True NIMCacheFailed: cache failed"]


def test_messages_are_bounded():
    status = project_nim_status(observe(service("NotReady"), cache("Failed", [
        condition("NIM_CACHE_JOB_COMPLETED", "False", "JobFailed", "x" * 5000)])))
    assert len(status.message) <= 600
