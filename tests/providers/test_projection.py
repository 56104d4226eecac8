"""Status projection as a pure function over Kubernetes objects (wire-shape dicts).

Table-driven: one case per diagnosis of issue 4 / SPEC §1 "Status". Each case builds the objects
one status read would see and states the expected state, reason and the words the message (and
evidence) must carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Optional

import pytest

from providers.projection import (
    ERROR,
    EVENTS_LIMIT,
    LOG_TAIL_CHARS,
    LOG_TAIL_LINES,
    MESSAGE_LIMIT,
    PENDING,
    READY,
    UNKNOWN,
    Observation,
    Status,
    pods_needing_logs,
    project_status,
)
from tests.support.fakes import (
    NOW,
    REPO,
    SOURCE,
    container_status,
    deployment,
    endpoint,
    endpoint_slice,
    event,
    job,
    pod,
    ready_server_pod,
    ready_slices,
    unschedulable,
)

PULLER_POD = "llama-puller-1a2b3c4d-x7k2p"
SERVER_POD = "llama-server-7d9f8c6b5-q2w3e"

GATED_LOG = f"""\
Downloading 'config.json' to '/model-store/.cache/huggingface/download/config.json.incomplete'
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/site-packages/huggingface_hub/utils/_http.py", line 409, in hf_raise_for_status
    response.raise_for_status()
requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: https://huggingface.co/api/models/{REPO}/revision/main
huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6650f0a2-1c2d)

Cannot access gated repo for url https://huggingface.co/api/models/{REPO}/revision/main.
Access to model {REPO} is restricted and you are not in the authorized list. Visit https://huggingface.co/{REPO} to ask for access.
"""

UNAUTHENTICATED_GATED_LOG = f"""\
huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-6650f0a2-1c2d)

Cannot access gated repo for url https://huggingface.co/api/models/{REPO}/revision/main.
Access to model {REPO} is restricted. You must have access to it and be authenticated to access it. Please log in.
"""

# The hub answers 401 (not 404) for a repo that does not exist, so its existence does not leak.
REPO_NOT_FOUND_LOG = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/site-packages/huggingface_hub/utils/_http.py", line 409, in hf_raise_for_status
    response.raise_for_status()
requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/meta-llama/Llama-9-404B/revision/main
huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-6650f0a2-3e4f)

Repository Not Found for url: https://huggingface.co/api/models/meta-llama/Llama-9-404B/revision/main.
Please make sure you specified the correct `repo_id` and `repo_type`.
If you are trying to access a private or gated repo, make sure you are authenticated.
"""

REPO_404_LOG = """\
huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-6650f0a2-3e4f)

Repository Not Found for url: https://hf-mirror.internal/api/models/acme/nope/revision/main.
"""

REVISION_LOG = f"""\
huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. (Request ID: Root=1-6650f0a2-5a6b)

Revision Not Found for url: https://huggingface.co/api/models/{REPO}/revision/v9.
Invalid rev id: v9
"""

DISK_FULL_LOG = """\
model-00003-of-00004.safetensors:  61%|██████    | 3.02G/4.92G [00:41<00:26, 72.3MB/s]
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/shutil.py", line 204, in copyfileobj
    fdst_write(buf)
OSError: [Errno 28] No space left on device
"""

GENERIC_PULL_LOG = "\n".join([f"fetching shard {i}" for i in range(5)] + [
    "ValueError: the model index file is not valid JSON: unexpected token at line 1",
])

CRASH_LOG = "\n".join(
    [f"INFO 06-01 11:5{i % 10}:00 [loader.py:42] loading weights shard {i}" for i in range(30)]
    + ["RuntimeError: Engine core initialization failed. See root cause above."]
)

UID_LOG = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/site-packages/torch/_inductor/codecache.py", line 140, in cache_dir
    sanitized_username = re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser())
  File "/usr/lib/python3.12/getpass.py", line 169, in getuser
    return pwd.getpwuid(os.getuid())[0]
KeyError: 'getpwuid(): uid not found: 1001'
"""

NCCL_LOG = """\
(RayWorkerWrapper pid=412) ERROR: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error
Error while creating shared memory segment /dev/shm/nccl-Xy12Ab (size 9637888)
torch.distributed.DistBackendError: NCCL error: unhandled system error
"""

# vLLM 0.11 when its model directory has no config.json (vllm/transformers_utils/config.py).
MISSING_WEIGHTS_LOG = """\
(APIServer pid=1) ValueError: Invalid repository ID or local directory specified: '/model-store/weights'.
Please verify the following requirements:
1. Provide a valid Hugging Face repository ID.
2. Specify a local directory that contains a recognized configuration file.
"""

# The kubelet's Failed event carries the runtime's words (containerd 1.7 shapes).
NOT_FOUND_EVENT = (
    'Failed to pull image "docker.io/vllm/vllm-openai:v9.9.9": rpc error: code = NotFound desc = failed to pull and '
    'unpack image "docker.io/vllm/vllm-openai:v9.9.9": failed to resolve reference "docker.io/vllm/vllm-openai:v9.9.9": '
    "docker.io/vllm/vllm-openai:v9.9.9: not found")
TIMEOUT_PULL = (
    'failed to pull and unpack image "docker.io/vllm/vllm-openai:v0.9.1": failed to resolve reference '
    '"docker.io/vllm/vllm-openai:v0.9.1": failed to do request: Head "https://registry-1.docker.io/v2/vllm/vllm-openai/'
    'manifests/v0.9.1": dial tcp 104.16.0.1:443: i/o timeout')

CUDA_OOM_LOG = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 22.05 GiB"


def failed_puller(log: str, *, reason: str = "BackoffLimitExceeded", message: str = "",
                  source: str = SOURCE) -> Observation:
    return Observation(
        model="llama", puller_job=job(state="failed", reason=reason, message=message, source=source),
        pods=[pod(PULLER_POD, component="weights-puller", phase="Failed", age=120,
                  containers=[container_status("puller", terminated={"exitCode": 1, "reason": "Error"})])],
        events=[event(PULLER_POD, "BackoffLimitExceeded", "Job has reached the specified backoff limit", kind="Pod")],
        logs={PULLER_POD: log}, now=NOW,
    )


def crashing(containers: list[dict], *, log: str = CRASH_LOG, events: Optional[list[dict]] = None,
             replicas: int = 1) -> Observation:
    return Observation(
        model="llama", deployment=deployment(replicas=replicas, ready=0),
        pods=[pod(SERVER_POD, containers=containers)],
        events=events if events is not None else [
            event(SERVER_POD, "BackOff", "Back-off restarting failed container server in pod", age=5),
            event(SERVER_POD, "Pulled", "Container image already present on machine", type_="Normal", age=60),
        ],
        logs={SERVER_POD: log}, now=NOW,
    )


def pending_pod(*, age: float, conditions: Optional[list[dict]] = None, events: Optional[list[dict]] = None,
                timeout: int = 900) -> Observation:
    return Observation(
        model="llama", deployment=deployment(replicas=1, ready=0),
        pods=[pod(SERVER_POD, phase="Pending", age=age, conditions=conditions,
                  containers=[container_status(waiting={"reason": "ContainerCreating"})])],
        events=events or [], now=NOW, pending_timeout_seconds=timeout,
    )


def serving(slices: list[dict], *, ready: int = 1, replicas: int = 1, pods: Optional[list[str]] = None) -> Observation:
    return Observation(
        model="llama", deployment=deployment(replicas=replicas, ready=ready),
        pods=[ready_server_pod(name) for name in (pods or [SERVER_POD])],
        endpoint_slices=slices, now=NOW,
    )


@dataclass
class Case:
    id: str
    observation: Callable[[], Observation]
    state: str
    reason: str
    message_has: tuple[str, ...] = ()
    evidence_has: tuple[str, ...] = ()  # in details["logTail"] or details["events"]
    check: Callable[[Status], None] = field(default=lambda status: None)
    neutral: bool = True  # the message must name no engine (shared code)


def _tail(status: Status) -> str:
    return status.details.get("logTail", "")


def _events(status: Status) -> str:
    return "\n".join(status.details.get("events", []))


CASES = [
    # --- puller ---------------------------------------------------------------------------------
    Case("puller-running", lambda: Observation(model="llama", puller_job=job(state="running"), now=NOW),
         PENDING, "pulling", ("downloading weights",)),
    Case("puller-succeeded-server-not-created", lambda: Observation(model="llama", puller_job=job(state="succeeded"), now=NOW),
         PENDING, "not-created"),
    Case("nothing-created-yet", lambda: Observation(model="llama", now=NOW), PENDING, "not-created"),
    Case("puller-403-gated", lambda: failed_puller(GATED_LOG), ERROR, "access-denied",
         (REPO, "access"), ("GatedRepoError", "authorized list")),
    Case("puller-401-gated-no-token", lambda: failed_puller(UNAUTHENTICATED_GATED_LOG), ERROR, "access-denied",
         (REPO,), ("Please log in",)),
    Case("puller-bare-403-from-a-mirror", lambda: failed_puller(
        "requests.exceptions.HTTPError: 403 Client Error: Forbidden for url: https://hf-mirror.internal/api/models/x"),
         ERROR, "access-denied", (REPO,)),
    Case("puller-repo-not-found-401", lambda: failed_puller(REPO_NOT_FOUND_LOG, source="meta-llama/Llama-9-404B@main"),
         ERROR, "repo-not-found", ("meta-llama/Llama-9-404B", "not found"), ("Repository Not Found",)),
    Case("puller-repo-not-found-404", lambda: failed_puller(REPO_404_LOG, source="acme/nope@main"),
         ERROR, "repo-not-found", ("acme/nope",)),
    Case("puller-revision-not-found", lambda: failed_puller(REVISION_LOG, source=f"{REPO}@v9"),
         ERROR, "revision-not-found", (REPO, "revision")),
    Case("puller-disk-full", lambda: failed_puller(DISK_FULL_LOG), ERROR, "disk-full",
         ("full", "weights.size"), ("No space left on device",)),
    Case("puller-deadline-exceeded", lambda: failed_puller(
        "model-00001-of-00004.safetensors:  12%|█  | 0.6G/4.9G", reason="DeadlineExceeded",
        message="Job was active longer than specified deadline"),
         ERROR, "deadline-exceeded", ("deadline", "Job was active longer than specified deadline")),
    Case("puller-generic-failure", lambda: failed_puller(GENERIC_PULL_LOG), ERROR, "puller-failed",
         ("weights download failed", "BackoffLimitExceeded"), ("ValueError: the model index file is not valid JSON",),
         check=lambda s: (s.details["pod"] == PULLER_POD and s.details["job"] and s.pod == PULLER_POD) or _fail(s)),
    # --- server crashes -------------------------------------------------------------------------
    Case("crash-loop-backoff", lambda: crashing([container_status(
        restarts=3, waiting={"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"},
        last_terminated={"exitCode": 1, "reason": "Error"})]),
         ERROR, "crash-loop", (SERVER_POD, "crashing", "exit code 1"),
         ("Engine core initialization failed", "BackOff: Back-off restarting failed container")),
    Case("crash-restart-count", lambda: crashing([container_status(
        restarts=3, running=True, ready=False, last_terminated={"exitCode": 137, "reason": "Error"})]),
         ERROR, "crash-loop", (SERVER_POD, "exit code 137")),
    Case("two-restarts-is-not-a-crash-loop-yet", lambda: crashing([container_status(
        restarts=2, running=True, ready=False, last_terminated={"exitCode": 1, "reason": "Error"})]),
         PENDING, "restarting", (SERVER_POD, "2 restart(s) so far", "failing at 3 restarts"),
         check=lambda s: (s.pod == SERVER_POD and s.details["cause"] == "crash-loop") or _fail(s)),
    # Issue 15 item 7: one restart is not the verdict, whatever the kubelet's back-off says...
    Case("first-crash-loop-backoff-is-waited-out", lambda: crashing([container_status(
        restarts=1, waiting={"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"},
        last_terminated={"exitCode": 1, "reason": "Error"})]),
         PENDING, "restarting", ("crashed (exit code 1, 1 restart(s) so far)",)),
    Case("restart-threshold-is-configurable", lambda: replace(crashing([container_status(
        restarts=1, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})]),
        restart_threshold=1),
         ERROR, "crash-loop", ("keeps crashing",)),
    # ...unless its cause is definitive: then the first crash is.
    Case("uid-crash-fails-at-the-first-restart", lambda: crashing([container_status(
        restarts=1, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})],
        log=UID_LOG),
         ERROR, "uid-unknown", neutral=False),
    Case("uid-crash-from-the-termination-message", lambda: crashing([container_status(
        restarts=1, running=True, last_terminated={"exitCode": 1, "reason": "Error",
                                                   "message": "KeyError: 'getpwuid(): uid not found: 1001'"})], log=""),
         ERROR, "uid-unknown", neutral=False),
    Case("missing-weights-fails-at-the-first-restart", lambda: crashing([container_status(
        restarts=1, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})],
        log=MISSING_WEIGHTS_LOG),
         ERROR, "weights-missing", (SERVER_POD, "no weights"), ("Invalid repository ID or local directory",)),
    Case("oom-killed", lambda: crashing([container_status(
        restarts=1, running=True, last_terminated={"exitCode": 137, "reason": "OOMKilled"})]),
         ERROR, "oom-killed", (SERVER_POD, "OOMKilled", "resources.memory"),
         check=lambda s: s.details["terminated"] == {"reason": "OOMKilled", "exitCode": 137} or _fail(s)),
    Case("uid-unknown", lambda: crashing([container_status(
        restarts=4, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})],
        log=UID_LOG),
         ERROR, "uid-unknown", (SERVER_POD, "uid"), ("getpwuid(): uid not found: 1001",), neutral=False),
    Case("shared-memory-nccl", lambda: crashing([container_status(
        restarts=3, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})],
        log=NCCL_LOG),
         ERROR, "shared-memory", (SERVER_POD, "shared memory", "sharedMemorySizeLimit"), ("/dev/shm",)),
    Case("gpu-out-of-memory", lambda: crashing([container_status(
        restarts=3, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})],
        log=CUDA_OOM_LOG),
         ERROR, "gpu-out-of-memory", (SERVER_POD,)),
    Case("image-pull-backoff", lambda: crashing([container_status(
        image="docker.io/vllm/vllm-openai:v9.9.9",
        waiting={"reason": "ImagePullBackOff", "message": 'Back-off pulling image "docker.io/vllm/vllm-openai:v9.9.9"'})],
        log="", events=[event(SERVER_POD, "Failed", NOT_FOUND_EVENT, age=8)]),
         ERROR, "image-pull", (SERVER_POD, "docker.io/vllm/vllm-openai:v9.9.9", "ImagePullBackOff", "tag or digest"),
         ("docker.io/vllm/vllm-openai:v9.9.9: not found",),
         check=lambda s: s.details["cause"] == "image-not-found" or _fail(s)),
    Case("image-pull-backoff-without-a-cause-is-retried", lambda: crashing([container_status(
        image="docker.io/vllm/vllm-openai:v9.9.9",
        waiting={"reason": "ImagePullBackOff", "message": 'Back-off pulling image "docker.io/vllm/vllm-openai:v9.9.9"'})],
        log="", events=[]),
         PENDING, "image-pull-retrying", (SERVER_POD, "the kubelet retries")),
    Case("image-pull-timeout-is-retried", lambda: crashing([container_status(
        waiting={"reason": "ErrImagePull", "message": TIMEOUT_PULL})], log="", events=[]),
         PENDING, "image-pull-retrying", ("i/o timeout",)),
    Case("image-pull-timeout-past-the-pending-timeout", lambda: replace(crashing([container_status(
        waiting={"reason": "ErrImagePull", "message": TIMEOUT_PULL})], log="", events=[]),
        pending_timeout_seconds=30),
         ERROR, "image-pull", ("still cannot pull image", "after 60s", "i/o timeout"),
         check=lambda s: s.details["cause"] == "registry-unreachable" or _fail(s)),
    Case("missing-secret-fails-at-once", lambda: crashing([container_status(
        waiting={"reason": "CreateContainerConfigError", "message": 'secret "llama-hf-token" not found'})],
        log="", events=[]),
         ERROR, "container-config", ("cannot start container server", 'secret "llama-hf-token" not found', "Secret"),
         check=lambda s: s.details["cause"] == "secret-missing" or _fail(s)),
    Case("err-image-pull", lambda: crashing([container_status(
        image="vllm-openai:latest", waiting={"reason": "ErrImagePull", "message": "short name mode is enforcing"})],
        log=""),
         ERROR, "image-pull", ("vllm-openai:latest", "ErrImagePull")),
    # --- pending ----------------------------------------------------------------------------------
    Case("pending-insufficient-gpus", lambda: pending_pod(
        age=1200, conditions=unschedulable("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available"),
        events=[event(SERVER_POD, "FailedScheduling", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")]),
         ERROR, "insufficient-gpus", (SERVER_POD, "Pending for 1200s", "GPUs", "Insufficient nvidia.com/gpu"),
         check=lambda s: s.details["pendingSeconds"] == 1200 or _fail(s)),
    Case("pending-multi-attach", lambda: pending_pod(
        age=1000,
        events=[event(SERVER_POD, "Scheduled", "Successfully assigned llm/x to gpu-2", type_="Normal", age=990),
                event(SERVER_POD, "FailedAttachVolume",
                      'Multi-Attach error for volume "pvc-0a1b" Volume is already used by pod(s) llama-server-old', age=30)]),
         ERROR, "multi-attach", (SERVER_POD, "Multi-Attach", "ReadWriteMany"), ("Multi-Attach error",)),
    Case("pending-unschedulable-other", lambda: pending_pod(
        age=1000, conditions=unschedulable("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector")),
         ERROR, "unschedulable", (SERVER_POD, "cannot be scheduled", "node affinity")),
    Case("pending-no-evidence", lambda: pending_pod(age=1000), ERROR, "pending", (SERVER_POD, "still Pending")),
    Case("pending-under-timeout", lambda: pending_pod(
        age=120, conditions=unschedulable("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")),
         PENDING, "starting", ("0/1 replicas ready",)),
    Case("pending-timeout-is-configurable", lambda: pending_pod(
        age=120, timeout=60, conditions=unschedulable("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")),
         ERROR, "insufficient-gpus", ("Pending for 120s",)),
    # --- ready / routable -------------------------------------------------------------------------
    Case("ready-one-target", lambda: serving(ready_slices([SERVER_POD])), READY, "ready",
         ("1 routable target", "1/1 replicas ready"),
         check=lambda s: (s.targets == [SERVER_POD] and s.ready_replicas == 1 and s.details["revision"]) or _fail(s)),
    Case("ready-replicas-but-no-endpoints", lambda: serving([], ready=2, replicas=2, pods=["a", "b"]),
         PENDING, "starting", ("no routable target",), check=lambda s: (s.targets == [] and s.ready_replicas == 2) or _fail(s)),
    Case("ready-replicas-but-endpoints-not-ready", lambda: serving(
        [endpoint_slice("s1", [endpoint(SERVER_POD, "10.0.0.1", ready=False, serving=False)])]),
         PENDING, "starting"),
    Case("terminating-endpoint-is-not-routable", lambda: serving(
        [endpoint_slice("s1", [endpoint(SERVER_POD, "10.0.0.1", ready=False, serving=True, terminating=True),
                               endpoint("llama-server-old", "10.0.0.2", ready=None, terminating=True)])]),
         PENDING, "starting"),
    Case("endpoint-without-target-ref-is-not-a-target", lambda: serving(
        [endpoint_slice("s1", [endpoint(None, "10.0.0.9")])]),
         PENDING, "starting"),
    Case("ready-absent-means-ready", lambda: serving(
        [endpoint_slice("s1", [endpoint(SERVER_POD, "10.0.0.1", ready=None)])]),
         READY, "ready", check=lambda s: s.targets == [SERVER_POD] or _fail(s)),
    Case("duplicates-collapse-by-target-ref-name", lambda: serving(
        [endpoint_slice("s-v4", [endpoint("p1", "10.0.0.1"), endpoint("p2", "10.0.0.2", ready=False)]),
         endpoint_slice("s-v6", [endpoint("p1", "fd00::1")], address_type="IPv6"),
         endpoint_slice("s-churn", [endpoint("p1", "10.0.0.1")])], ready=1, replicas=2, pods=["p1", "p2"]),
         READY, "ready", ("1 routable target", "1/2 replicas ready"),
         check=lambda s: s.targets == ["p1"] or _fail(s)),
    Case("scaled-to-zero", lambda: Observation(model="llama", deployment=deployment(replicas=0), now=NOW),
         PENDING, "scaled-to-zero"),
]


def _fail(status: Status) -> bool:
    raise AssertionError(f"unexpected status: {status}")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_projection(case: Case) -> None:
    status = project_status(case.observation())

    assert (status.state, status.reason) == (case.state, case.reason), status.message
    for text in case.message_has:
        assert text in status.message, f"{text!r} not in {status.message!r}"
    evidence = _tail(status) + "\n" + _events(status)
    for text in case.evidence_has:
        assert text in evidence, f"{text!r} not in evidence {evidence!r}"
    assert len(status.message) <= MESSAGE_LIMIT
    if case.neutral:
        # Shared code serves vLLM and NIM: no engine named in its messages.
        assert "NIM" not in status.message and "vLLM" not in status.message.replace("vllm/vllm-openai", "")
    case.check(status)


def test_uid_message_names_no_single_engine() -> None:
    """The uid hint lists the uid of every engine; it never blames one engine for the other's failure."""
    status = project_status(crashing([container_status(restarts=3, waiting={"reason": "CrashLoopBackOff"})], log=UID_LOG))
    assert status.reason == "uid-unknown"
    assert ("NIM" in status.message) == ("vLLM" in status.message)


def test_projection_never_guesses_unknown() -> None:
    """UNKNOWN is the caller's answer to a failed read; the projection has objects and decides."""
    for case in CASES:
        assert project_status(case.observation()).state != UNKNOWN


def test_ready_pod_with_past_restarts_is_serving_not_crashing() -> None:
    """restartCount and lastState are cumulative history: a ready, serving container is not a crash loop."""
    healed = ready_server_pod(SERVER_POD)
    healed["status"]["containerStatuses"] = [container_status(
        ready=True, running=True, restarts=7, last_terminated={"exitCode": 137, "reason": "OOMKilled"})]
    obs = Observation(model="llama", deployment=deployment(ready=1), pods=[healed],
                      endpoint_slices=ready_slices([SERVER_POD]), now=NOW)
    assert project_status(obs).state == READY


def test_crash_loop_of_new_pod_during_rollout_wins_over_old_ready_target() -> None:
    """The old pod still serves, but the new spec crash-loops: `pulumi up` must hear the ERROR."""
    new = pod("llama-server-new", containers=[container_status(
        restarts=5, waiting={"reason": "CrashLoopBackOff"}, last_terminated={"exitCode": 1, "reason": "Error"})])
    obs = Observation(model="llama", deployment=deployment(replicas=1, ready=1, updated=1, total=2),
                      pods=[ready_server_pod("llama-server-old"), new],
                      endpoint_slices=ready_slices(["llama-server-old"]), now=NOW)
    status = project_status(obs)
    assert (status.state, status.reason, status.pod) == (ERROR, "crash-loop", "llama-server-new")
    assert status.targets == ["llama-server-old"] and status.ready_replicas == 1


def test_latest_puller_pod_is_diagnosed() -> None:
    """A Job retries (backoffLimit): the newest pod's log is the one that explains the failure."""
    obs = failed_puller(GATED_LOG)
    obs.pods = [
        pod("llama-puller-1a2b3c4d-zzzzz", component="weights-puller", phase="Failed", age=300),
        pod("llama-puller-1a2b3c4d-aaaaa", component="weights-puller", phase="Failed", age=30),
    ]
    obs.logs = {"llama-puller-1a2b3c4d-zzzzz": "old attempt: ConnectionError", "llama-puller-1a2b3c4d-aaaaa": GATED_LOG}
    assert pods_needing_logs(obs) == ["llama-puller-1a2b3c4d-aaaaa"]
    status = project_status(obs)
    assert status.details["pod"] == "llama-puller-1a2b3c4d-aaaaa"
    assert status.reason == "access-denied"


def test_logs_are_requested_only_for_the_pods_a_diagnosis_names() -> None:
    healthy = [ready_server_pod(f"llama-server-{i}") for i in range(7)]
    bad = pod("llama-server-bad", containers=[container_status(restarts=3, waiting={"reason": "CrashLoopBackOff"})])
    obs = Observation(model="llama", deployment=deployment(replicas=8, ready=7), pods=[*healthy, bad], now=NOW)
    assert pods_needing_logs(obs) == ["llama-server-bad"]
    assert pods_needing_logs(serving(ready_slices([SERVER_POD]))) == []


# --- bounds -----------------------------------------------------------------------------------

def test_long_messages_are_capped() -> None:
    huge = "Job failed: " + "x" * 10_000
    status = project_status(failed_puller(GENERIC_PULL_LOG, message=huge))
    assert len(status.message) <= MESSAGE_LIMIT and status.message.endswith("…")
    assert len(status.details["condition"]) <= 300

    image = "registry.example.com/" + "very-long-path/" * 200 + "vllm:latest"
    waiting = {"reason": "ErrImagePull", "message": "y" * 5000 + " manifest unknown"}
    status = project_status(crashing([container_status(image=image, waiting=waiting)], log=""))
    assert status.reason == "image-pull" and len(status.message) <= MESSAGE_LIMIT

    status = project_status(pending_pod(age=1000, conditions=unschedulable("0/999 nodes: " + "z" * 5000)))
    assert len(status.message) <= MESSAGE_LIMIT


def test_log_tail_is_bounded_in_lines_and_chars() -> None:
    many_lines = "\n".join(f"line {i}" for i in range(500)) + "\n"
    status = project_status(crashing([container_status(restarts=3, waiting={"reason": "CrashLoopBackOff"})], log=many_lines))
    lines = status.details["logTail"].splitlines()
    assert len(lines) == LOG_TAIL_LINES and lines[-1] == "line 499"

    wide = "\n".join(f"{i:03d} " + "w" * 400 for i in range(LOG_TAIL_LINES)) + "\nRuntimeError: the end"
    status = project_status(crashing([container_status(restarts=3, waiting={"reason": "CrashLoopBackOff"})], log=wide))
    tail = status.details["logTail"]
    assert len(tail) <= LOG_TAIL_CHARS and tail.endswith("RuntimeError: the end")

    status = project_status(failed_puller("\n".join("p" * 300 for _ in range(200))))
    assert len(status.details["logTail"]) <= LOG_TAIL_CHARS
    assert len(status.details["logTail"].splitlines()) <= LOG_TAIL_LINES


def test_events_are_recent_bounded_and_capped() -> None:
    events = [event(SERVER_POD, "BackOff", f"restart {i} " + "e" * 1000, age=1000 - i, seq=i) for i in range(30)]
    events.append(event("some-other-pod", "BackOff", "not mine"))
    status = project_status(crashing([container_status(restarts=3, waiting={"reason": "CrashLoopBackOff"})], events=events))
    lines = status.details["events"]
    assert len(lines) == EVENTS_LIMIT
    assert all(len(line) <= 300 for line in lines)
    assert lines[-1].startswith("BackOff: restart 29") and not any("not mine" in line for line in lines)
