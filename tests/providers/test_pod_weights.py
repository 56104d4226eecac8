"""Per-pod weights of a multi-node model (providers/pod_weights.py and its use in
providers/group_projection.py): no Job, no gate; the group pods' init containers say whether their
weights are pulling, verifying or failed, with the pod and the step."""

from __future__ import annotations

from providers.group_projection import project_group_status
from providers.pod_weights import step_states, weights_status
from providers.projection import ERROR, PENDING, READY
from tests.providers.test_group_projection import LWS, grouped, leader, observed, worker
from tests.support.fakes import pod

SOURCE_CHANGED = ("2026/12/01 ERROR : config.json: md5 differ\n"
                  "llm-serving: source changed since preview: config.json")
MISSING = "llm-serving: missing: model-00002-of-00002.safetensors"


def init(name: str, *, running: bool = False, exit_code: int | None = None, message: str = "",
         restarts: int = 0, waiting: str = "") -> dict:
    state: dict = {}
    last: dict = {}
    if running:
        state = {"running": {"startedAt": "2026-12-01T12:00:00Z"}}
    elif waiting:
        state = {"waiting": {"reason": waiting}}
        if exit_code is not None:
            last = {"terminated": {"exitCode": exit_code, "reason": "Error", "message": message}}
    elif exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed",
                                "message": message}}
    else:
        state = {"waiting": {"reason": "PodInitializing"}}
    return {"name": name, "state": state, "lastState": last, "ready": False, "restartCount": restarts,
            "image": "docker.io/rclone/rclone:1.76.0"}


def initializing(name: str, group: int, index: int, *steps: dict) -> dict:
    item = pod(name, phase="Pending")
    item["status"]["initContainerStatuses"] = list(steps)
    return grouped(item, group, index)


def test_pods_pulling_their_own_volume_are_reported_pulling_with_their_names():
    pods = [initializing(f"{LWS}-0", 0, 0, init("weights-pull", running=True), init("weights-verify"), init("weights-prune")),
            initializing(f"{LWS}-0-1", 0, 1, init("weights-pull", running=True), init("weights-verify"), init("weights-prune"))]
    status = project_group_status(observed(pods, slices=[]))
    assert status.state == PENDING and status.reason == "pulling"
    assert status.message == (f"0/1 groups ready: pulling weights into each pod's own volume: {LWS}-0, {LWS}-0-1")
    assert status.details["weights"] == {"weights-pull": [f"{LWS}-0", f"{LWS}-0-1"]}


def test_a_pod_verifying_while_another_still_pulls_names_both():
    pods = [initializing(f"{LWS}-0", 0, 0, init("weights-pull", exit_code=0), init("weights-verify", running=True)),
            initializing(f"{LWS}-0-1", 0, 1, init("weights-pull", running=True))]
    status = weights_status(pods)
    assert status.reason == "pulling"
    assert "pulling weights into each pod's own volume: llama-0-1" in status.message
    assert "verifying weights into each pod's own volume: llama-0" in status.message
    only_verifying = weights_status(pods[:1])
    assert only_verifying.reason == "verifying"


def test_a_store_changed_since_preview_fails_at_once_with_the_pod_the_step_and_the_keys():
    pods = [initializing(f"{LWS}-0", 0, 0, init("weights-pull", exit_code=0),
                         init("weights-verify", exit_code=42, message=SOURCE_CHANGED)),
            leader(1)]
    status = project_group_status(observed(pods, replicas=2))
    assert status.state == ERROR and status.reason == "source-changed"
    assert status.message.startswith(f"pod {LWS}-0: weights weights-verify failed (exit code 42): "
                                     "objects changed in the store since preview: config.json")
    assert status.pod == f"{LWS}-0" and status.details["container"] == "weights-verify"
    assert "groups" in status.details


def test_an_incomplete_copy_is_retried_by_the_kubelet_then_reported():
    retried = [initializing(f"{LWS}-0", 0, 0,
                            init("weights-verify", waiting="CrashLoopBackOff", exit_code=43, message=MISSING, restarts=1))]
    status = weights_status(retried, restart_threshold=3)
    assert status.state == PENDING and status.reason == "weights-retrying"
    assert "weights weights-verify failed (exit code 43, 1 restart(s)); the kubelet retries it" in status.message
    given_up = [initializing(f"{LWS}-0", 0, 0,
                             init("weights-verify", waiting="CrashLoopBackOff", exit_code=43, message=MISSING, restarts=2))]
    status = weights_status(given_up, restart_threshold=3)
    assert status.state == ERROR and status.reason == "weights-incomplete"
    assert "missing: model-00002-of-00002.safetensors" in status.message


def test_a_failed_init_container_is_a_weights_failure_not_a_server_crash():
    pods = [initializing(f"{LWS}-0", 0, 0, init("weights-pull", exit_code=1, restarts=5, waiting="CrashLoopBackOff",
                                                 message="No space left on device")),
            worker()]
    status = project_group_status(observed(pods, slices=[]))
    assert (status.state, status.reason) == (ERROR, "disk-full")
    assert "the weights volume is full; raise weights.size" in status.message


def test_verified_pods_and_other_init_containers_are_not_weights_trouble():
    done = [initializing(f"{LWS}-0", 0, 0, init("weights-pull", exit_code=0), init("weights-verify", exit_code=0),
                         init("weights-prune", exit_code=0)),
            initializing(f"{LWS}-0-1", 0, 1, init("lora-adapters", exit_code=1, message=MISSING))]
    assert step_states(done) == [] and weights_status(done) is None


def test_a_group_serving_while_another_pulls_stays_ready_and_says_so():
    pods = [leader(0), worker(0),
            initializing(f"{LWS}-1", 1, 0, init("weights-pull", running=True)),
            initializing(f"{LWS}-1-1", 1, 1, init("weights-pull", running=True))]
    status = project_group_status(observed(pods, replicas=2, ready_groups=1))
    assert status.state == READY and status.targets == [f"{LWS}-0"]
    assert status.details["weights"] == f"pulling weights into each pod's own volume: {LWS}-1, {LWS}-1-1"
