"""ModelStatus: waits for a model to serve, fails fast with the reason, and reports its status.

One provider for both ways a model is served: the status props name the raw objects (vLLM, NIM
raw) or the NIM operator's custom resources, and ``observe.observer_for`` picks the observer that
reads them. Everything below holds for both paths alike.

create / update: wait until the model is READY (at least one routable target) and its rollout is
whole (every desired replica of the current spec ready, no old pod left), or SCALED_TO_ZERO (no
replica, and ``min_replicas`` 0 says it may sleep), or stop at the first classified ERROR (crash
loop, OOMKilled, puller failure, image pull, pending too long — also for one replica of a model
that otherwise serves) with its evidence, instead of a generic ten-minute await timeout. Trouble
the kubelet may still get past (a registry timeout, a crash below ``restart_threshold`` restarts)
projects as PENDING and is waited out (providers/transience.py). The recorded targets are those
of the finished rollout.
read (`pulumi refresh`): re-project the live status; UNKNOWN when it cannot be read.
"""

from __future__ import annotations

import time

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from contract.props import StatusProps

from . import kube
from .failures import Reported, reported
from .inputs import changed_inputs, inputs_only, now
from .observe import add_evidence, current_status, observer_for
from .projection import (  # noqa: F401 (re-exported)
    ERROR,
    READY,
    SCALED_TO_ZERO,
    UNKNOWN,
    Status,
    asleep,
    lagging_replica,
    rollout_complete,
)

STATUS_KEYS = ("state", "message", "reason", "details", "ready_replicas", "targets", "observed_at")


class ModelNotServing(Reported):
    """A model did not reach READY; the message says why and what to do."""


def rollout_note(deployment: dict | None, min_replicas: int | None) -> str:
    """What an unfinished rollout waits for. Autoscaled with the Deployment asking for fewer than
    ``min_replicas``: no autoscaler has raised the count (it starts at the API default, 1)."""
    asked = ((deployment or {}).get("spec") or {}).get("replicas")
    if min_replicas is not None and asked is not None and int(asked) < min_replicas:
        return (f" (rollout in progress: the Deployment asks for {asked} replica(s), below autoscaling."
                f"minReplicas {min_replicas}; is KEDA running, and does its ScaledObject report Ready?)")
    return " (rollout in progress)"


def stuck_replica(clients: kube.Clients, namespace: str, observation) -> Status | None:
    """A server pod Pending past the timeout while others serve: the model is READY, but the
    rollout cannot finish, so `up` stops with the pod's reason instead of waiting it out."""
    stuck = lagging_replica(observation)
    if stuck is not None:
        add_evidence(clients, namespace, observation, stuck.pod)  # the scheduler's reason
        stuck = lagging_replica(observation) or stuck
    return stuck


def status_outputs(props: dict, status: Status) -> dict:
    return {**props, **status.as_outputs(), "observed_at": now()}


def describe(model: str, status: Status) -> str:
    lines = [f"model {model} is {status.state}: {status.message}", f"reason: {status.reason}"]
    details = status.details or {}
    if details.get("events"):
        lines.append("recent events:\n  " + "\n  ".join(details["events"]))
    if details.get("logTail"):
        lines.append(f"log tail of {details.get('pod')}:\n{details['logTail']}")
    return "\n".join(lines)


# Seconds between reads when the props name none: the operator path polls less often (each read
# is two custom objects more, and the operator itself reconciles on a slower loop).
DEFAULT_POLL_SECONDS = {False: 1.0, True: 2.0}


def wait_until_serving(props: dict | StatusProps, sleep=time.sleep, clock=time.monotonic,
                       connect=kube.connect) -> Status:
    wanted = props if isinstance(props, StatusProps) else StatusProps.from_dict(props)
    observer = observer_for(wanted)
    clients = connect(wanted.cluster.kube())
    deadline = clock() + float(wanted.ready_timeout_seconds)
    poll = float(wanted.poll_seconds or DEFAULT_POLL_SECONDS[wanted.on_operator])
    status = Status(UNKNOWN, "not read yet", "not-read")
    while clock() <= deadline:
        status = current_status(clients, observer)
        if status.state == ERROR:
            raise ModelNotServing(describe(wanted.model, status))
        resting = asleep(status, wanted.min_replicas)
        if resting.state == SCALED_TO_ZERO:
            # As its autoscaler may put it: `up` succeeds without waking it.
            return resting
        if status.state == READY:
            # READY at the first routable pod; `up` returns once the rollout is whole (old pods
            # stay routable while a changed spec rolls out, on the operator path as well).
            note = " (rollout in progress)"
            try:
                seen = observer.observe(clients)
                note = rollout_note(observer.core(seen).deployment, wanted.min_replicas)
                if observer.complete(seen, wanted.min_replicas):
                    # Re-projected from the read that saw the rollout done: its targets are
                    # every ready replica, not the first one that made the model READY.
                    final = observer.project(seen)
                    if final.state == READY:
                        return final
                stuck = stuck_replica(clients, wanted.namespace, observer.core(seen))
            except Exception:  # noqa: BLE001 - a failed read is retried until the deadline
                stuck = None
            if stuck is not None:
                raise ModelNotServing(describe(wanted.model, stuck))
            status = Status(status.state, status.message + note, "rolling-out",
                            status.details, status.ready_replicas, status.targets)
        sleep(poll)
    raise ModelNotServing(
        f"model {wanted.model} not serving after {wanted.ready_timeout_seconds}s: "
        f"{status.state}: {status.message}"
    )


def status_diff(olds: dict, news: dict) -> DiffResult:
    """A status record changes when its inputs do, and whenever it says the model is not serving
    (a refresh saw it down, or could not read it): the next `up` then waits again, so it records
    READY or fails with the reason, instead of reporting success over a stale PENDING / ERROR /
    UNKNOWN."""
    changed = changed_inputs(olds, news)
    if not changed and olds.get("state") not in (None, READY, SCALED_TO_ZERO):
        changed = ["state"]
    return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)


class ModelStatusProvider(ResourceProvider):
    serialize_as_secret_always = False

    @reported
    def create(self, props: dict) -> CreateResult:
        status = wait_until_serving(props)
        return CreateResult(f"{props['namespace']}/{props['model']}", status_outputs(props, status))

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        return status_diff(olds, news)

    @reported
    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        return UpdateResult(status_outputs(news, wait_until_serving(news)))

    def read(self, id_: str, props: dict) -> ReadResult:
        inputs = inputs_only(props, STATUS_KEYS)
        try:
            wanted = StatusProps.from_dict(inputs)
            status = asleep(current_status(kube.connect(wanted.cluster.kube()), observer_for(wanted)),
                            wanted.min_replicas)
        except Exception as error:  # noqa: BLE001 - refresh reports, it does not guess
            status = Status(UNKNOWN, f"status could not be read this time: {error}", "read-failed")
        return ReadResult(id_, status_outputs(inputs, status), inputs)

    def delete(self, _id: str, _props: dict) -> None:
        return None
