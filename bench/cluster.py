"""Shared machinery of the benchmarks that run the real engine on the simulated cluster.

- Projects come from testkit/harness.py (`Project`: a throwaway copy of the project with
  its own file-backend state and stack); a benchmark may swap its __main__.py for the plain
  peer (bench/peer_plain) or a wrapper (fault injection, profiling) that runs the real program.
- Every run gets its own namespace, and the bench its own StorageClass and PersistentVolumes
  (created here, deleted at the end), so neither the tests other people run on the same cluster
  nor this bench can starve the other of the shared `local-weights` pool.
- A Watcher thread per run records when Jobs complete, Deployments appear and pods crash, as the
  API server announces them (watch events, monotonic clock, sub-second), because the objects'
  own timestamps have one-second resolution.
Nothing here stops, restarts or reconfigures the cluster.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `testkit`

from testkit.harness import Project, small_model, stack_config

ROOT = Path(__file__).resolve().parents[1]
TOOLCHAIN_ENV = Path.home() / ".cache" / "llm-serving-toolchain" / "env.sh"
PEER_MAIN = Path(__file__).resolve().parent / "peer_plain" / "__main__.py"
BENCH_LABEL = "llm-serving.dev/bench"
UP_TIMEOUT = 300


class BenchError(Exception):
    """A benchmark could not produce its figure (the message says why)."""


# --- environment ---------------------------------------------------------------------------

def ensure_environment() -> None:
    """The toolchain on PATH and KUBECONFIG set, as scripts/test.sh has them; never starts anything."""
    if shutil.which("pulumi") is None and TOOLCHAIN_ENV.exists():
        dump = subprocess.run(["bash", "-c", f'source "{TOOLCHAIN_ENV}" && env -0'],
                              capture_output=True, check=True).stdout.decode()
        for item in dump.split("\0"):
            key, sep, value = item.partition("=")
            if sep and (key.startswith(("PULUMI_", "LLM_SERVING_")) or key == "PATH"):
                os.environ[key] = value
    if not os.environ.get("KUBECONFIG"):
        path = subprocess.run(["bash", str(ROOT / "scripts" / "cluster" / "cluster.sh"), "kubeconfig"],
                              capture_output=True, text=True).stdout.strip()
        if path and Path(path).exists():
            os.environ["KUBECONFIG"] = path
    missing = [what for what, ok in (("pulumi on PATH (source the toolchain env.sh)", shutil.which("pulumi")),
                                     ("KUBECONFIG", os.environ.get("KUBECONFIG"))) if not ok]
    if missing:
        raise BenchError(f"the cluster benchmarks need {' and '.join(missing)}; run `bash scripts/up-local.sh` once")


_api_lock = threading.Lock()


def api():
    """A fresh kubernetes client module, configured for the simulated cluster."""
    from kubernetes import client, config

    with _api_lock:
        config.load_kube_config()
    return client


def free_gpus() -> int:
    """GPUs not held by a scheduled pod (a pending pod holds none, however many it asks for)."""
    client = api()
    core = client.CoreV1Api()
    capacity = sum(int((n.status.allocatable or {}).get("nvidia.com/gpu", 0)) for n in core.list_node().items)
    used = 0
    for pod in core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded,status.phase!=Failed").items:
        if not pod.spec.node_name:
            continue
        for c in pod.spec.containers:
            used += int(((c.resources and c.resources.limits) or {}).get("nvidia.com/gpu", 0))
    return capacity - used


def wait_for_gpus(needed: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while True:
        free = free_gpus()
        if free >= needed or time.monotonic() > deadline:
            return free
        time.sleep(2)


# --- a private volume pool -----------------------------------------------------------------

class VolumePool:
    """A StorageClass and static PVs of the bench's own (same shape as the cluster's pool)."""

    def __init__(self):
        self.run_id = uuid.uuid4().hex[:6]
        self.storage_class = f"bench-{self.run_id}"
        self.created = 0
        self._client = None

    @property
    def core(self):
        if self._client is None:
            self._client = api()
        return self._client.CoreV1Api()

    def __enter__(self) -> VolumePool:
        client = api()
        client.StorageV1Api().create_storage_class({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": self.storage_class, "labels": {BENCH_LABEL: self.run_id}},
            "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
            "reclaimPolicy": "Retain",
        })
        return self

    def _mine(self) -> list:
        return self.core.list_persistent_volume(label_selector=f"{BENCH_LABEL}={self.run_id}").items

    def ensure(self, rwo: int = 0, rwx: int = 0) -> None:
        """At least `rwo` ReadWriteOnce and `rwx` ReadWriteMany volumes free; released ones go."""
        free = {"ReadWriteOnce": 0, "ReadWriteMany": 0}
        for pv in self._mine():
            if pv.status and pv.status.phase == "Released":
                self.core.delete_persistent_volume(pv.metadata.name)
            elif pv.spec.claim_ref is None and not pv.metadata.deletion_timestamp:
                free["ReadWriteMany" if "ReadWriteMany" in pv.spec.access_modes else "ReadWriteOnce"] += 1
        for mode, want in (("ReadWriteOnce", rwo), ("ReadWriteMany", rwx)):
            for _ in range(max(0, want - free[mode])):
                name = f"{self.storage_class}-pv-{self.created:03d}"
                self.created += 1
                self.core.create_persistent_volume({
                    "apiVersion": "v1", "kind": "PersistentVolume",
                    "metadata": {"name": name, "labels": {BENCH_LABEL: self.run_id}},
                    "spec": {
                        "storageClassName": self.storage_class, "capacity": {"storage": "200Gi"},
                        "accessModes": [mode] + (["ReadOnlyMany"] if mode == "ReadWriteMany" else []),
                        "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem",
                        "hostPath": {"path": f"/var/lib/llm-serving/bench/{name}", "type": "DirectoryOrCreate"},
                    },
                })

    def __exit__(self, *exc) -> None:
        # The volumes' claims go with the namespaces; then the volumes and the class can go.
        # Best effort, and never raising: a cleanup failure must not lose the results.
        try:
            left = wait_for_deleted_namespaces()
            if left:
                print(f"bench: namespaces still terminating: {', '.join(left)}", file=sys.stderr)
            for pv in self._mine():
                self.core.delete_persistent_volume(pv.metadata.name)
            api().StorageV1Api().delete_storage_class(self.storage_class)
        except Exception as error:  # noqa: BLE001
            print(f"bench: cleanup incomplete ({type(error).__name__}); leftovers are labelled "
                  f"{BENCH_LABEL}={self.run_id} (PVs, StorageClass {self.storage_class})", file=sys.stderr)


# --- watching a namespace ------------------------------------------------------------------

def _condition(obj, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in ((obj.status and obj.status.conditions) or []))


@dataclass
class Watcher:
    """Watch events of one namespace, stamped with the bench's monotonic clock."""

    namespace: str
    job_added: dict[str, float] = field(default_factory=dict)       # model -> Job ADDED seen
    job_done: dict[str, float] = field(default_factory=dict)        # model -> Complete/SuccessCriteriaMet seen
    puller_pod_done: dict[str, float] = field(default_factory=dict)  # model -> puller pod Succeeded seen
    puller_pod_gone: dict[str, float] = field(default_factory=dict)  # model -> puller pod DELETED seen
    deployment_added: dict[str, float] = field(default_factory=dict)
    crash_seen: dict[str, float] = field(default_factory=dict)      # pod -> CrashLoopBackOff seen
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list = field(default_factory=list)
    _ready: list = field(default_factory=list)

    def start(self) -> Watcher:
        client = api()
        streams: list[tuple[Callable, Callable]] = [
            (client.BatchV1Api().list_namespaced_job, self._on_job),
            (client.AppsV1Api().list_namespaced_deployment, self._on_deployment),
            (client.CoreV1Api().list_namespaced_pod, self._on_pod),
        ]
        for list_fn, handler in streams:
            ready = threading.Event()
            self._ready.append(ready)
            thread = threading.Thread(target=self._loop, args=(list_fn, handler, ready), daemon=True)
            thread.start()
            self._threads.append(thread)
        for ready in self._ready:
            ready.wait(10)
        return self

    def stop(self) -> Watcher:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)
        return self

    def _loop(self, list_fn, handler, ready: threading.Event) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        version = None
        while not self._stop.is_set():
            try:
                # An empty list first: the namespace is new, so nothing is missed before the watch.
                if version is None:
                    version = list_fn(self.namespace).metadata.resource_version
                ready.set()
                stream = watch.Watch().stream(list_fn, self.namespace, resource_version=version,
                                              timeout_seconds=1, _request_timeout=5)
                for event in stream:
                    seen = time.monotonic()
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    handler(seen, event["type"], obj)
            except ApiException as error:
                if error.status == 410:
                    version = None
                time.sleep(0.1)
            except Exception:  # noqa: BLE001 - a dropped watch is resumed
                time.sleep(0.1)

    @staticmethod
    def _model(obj) -> str:
        return (obj.metadata.labels or {}).get("llm-serving.dev/model", obj.metadata.name)

    def _on_job(self, seen: float, type_: str, job) -> None:
        if type_ == "ADDED":
            self.job_added.setdefault(self._model(job), seen)
        if _condition(job, "SuccessCriteriaMet") or _condition(job, "Complete"):
            self.job_done.setdefault(self._model(job), seen)

    def _on_deployment(self, seen: float, type_: str, deployment) -> None:
        if type_ == "ADDED":
            self.deployment_added.setdefault(self._model(deployment), seen)

    def _on_pod(self, seen: float, _type: str, pod) -> None:
        labels = pod.metadata.labels or {}
        if "batch.kubernetes.io/job-name" in labels and pod.status and pod.status.phase == "Succeeded":
            self.puller_pod_done.setdefault(self._model(pod), seen)
        if "batch.kubernetes.io/job-name" in labels and _type == "DELETED":
            self.puller_pod_gone.setdefault(self._model(pod), seen)
        for status in (pod.status and pod.status.container_statuses) or []:
            waiting = status.state and status.state.waiting
            if waiting and waiting.reason == "CrashLoopBackOff":
                self.crash_seen.setdefault(pod.metadata.name, seen)

    def phases(self, start: float, end: float) -> dict[str, float]:
        """Seconds from the start of `pulumi up` to the first/last Job created, Job complete,
        Deployment created, and to its end: where the time of a run goes."""
        out: dict[str, float] = {}
        for name, seen in (("job created", self.job_added), ("job complete", self.job_done),
                           ("deployment created", self.deployment_added)):
            if seen:
                out[f"first {name}"] = round(min(seen.values()) - start, 2)
                out[f"last {name}"] = round(max(seen.values()) - start, 2)
        out["up ends"] = round(end - start, 2)
        return out

    def job_to_deployment(self) -> list[float]:
        return [self.deployment_added[m] - t for m, t in self.job_done.items() if m in self.deployment_added]

    def hand_off_split(self) -> list[tuple[float, float]]:
        """Per model: (Job complete -> puller pod gone, puller pod gone -> Deployment created)."""
        return [(self.puller_pod_gone[m] - t, self.deployment_added[m] - self.puller_pod_gone[m])
                for m, t in self.job_done.items() if m in self.puller_pod_gone and m in self.deployment_added]

    def pod_to_job(self) -> list[float]:
        return [t - self.puller_pod_done[m] for m, t in self.job_done.items() if m in self.puller_pod_done]


# --- running pulumi -----------------------------------------------------------------------

def run_pulumi(project: Project, *args: str, timeout: float) -> subprocess.CompletedProcess:
    """`project.run` (same command line and environment), but in its own session so that a
    timeout ends the engine *and* its plugins (language host, providers, dynamic-provider host),
    which a plain subprocess timeout would leave running."""
    import signal

    command = ["pulumi", *args, "--non-interactive", "-s", project.stack]
    process = subprocess.Popen(command, cwd=project.root, env=project.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def require_cluster(timeout: float = 60) -> None:
    """The API server answers (it may be restarted by someone else's run: wait a little)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            api().CoreV1Api().list_namespace(limit=1, _request_timeout=5)
            return
        except Exception as error:  # noqa: BLE001
            if time.monotonic() > deadline:
                raise BenchError(f"the simulated cluster does not answer ({type(error).__name__}); "
                                 "was it stopped? `bash scripts/cluster/cluster.sh status`") from None
            time.sleep(2)


# --- one `pulumi up` -----------------------------------------------------------------------

CRASH_WRAPPER = '''"""bench/cluster.py: the llm-serving program, its server pods annotated to crash-loop on KWOK."""
import runpy
from pathlib import Path

import pulumi


def _crash_loop(args):
    if args.type_ != "kubernetes:apps/v1:Deployment":
        return None
    props = dict(args.props)
    spec = dict(props["spec"])
    template = dict(spec["template"])
    metadata = dict(template.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), "llm-serving.dev/kwok-fault": "crashloop"}
    template["metadata"] = metadata
    spec["template"] = template
    props["spec"] = spec
    return pulumi.ResourceTransformResult(props=props, opts=args.opts)


pulumi.runtime.register_resource_transform(_crash_loop)
runpy.run_path(str(Path(__file__).with_name("llm_serving_main.py")), run_name="__main__")
'''

PROFILE_WRAPPER = '''"""bench/cluster.py: the llm-serving program under cProfile (stats written at exit)."""
import atexit
import cProfile
import os
import runpy
import time
from pathlib import Path

_profile = cProfile.Profile()
_wall, _cpu = time.perf_counter(), time.process_time()


def _dump():
    _profile.disable()
    out = os.environ["LLM_SERVING_BENCH_PROFILE"]
    _profile.dump_stats(out)
    Path(out + ".times").write_text(f"{time.perf_counter() - _wall} {time.process_time() - _cpu}")


atexit.register(_dump)
_profile.enable()
runpy.run_path(str(Path(__file__).with_name("llm_serving_main.py")), run_name="__main__")
'''


def new_project(program: str, namespace: str, config: dict, workdir: Path) -> Project:
    """A harness Project; `program` is "ours", "plain" (the peer), "crash" or "profile"."""
    root = Path(tempfile.mkdtemp(prefix=f"{program}-", dir=workdir))
    project = Project(root, f"b{uuid.uuid4().hex[:8]}", config)
    project.namespace = namespace
    if program == "plain":
        shutil.copy(PEER_MAIN, root / "__main__.py")
    elif program in ("crash", "profile"):
        (root / "__main__.py").rename(root / "llm_serving_main.py")
        (root / "__main__.py").write_text(CRASH_WRAPPER if program == "crash" else PROFILE_WRAPPER)
    return project


_deleted: list[str] = []


def delete_namespace(namespace: str, timeout: float = 60) -> None:
    """Delete the run's namespace (everything a run creates lives in it). Waits only until its
    pods are gone (they hold GPUs and volumes); the namespace controller finishes the rest in the
    background (about 15 s here), checked by wait_for_deleted_namespaces at the end."""
    client = api()
    core = client.CoreV1Api()
    try:
        core.delete_namespace(namespace)
    except client.exceptions.ApiException as error:
        if error.status != 404:
            raise
    _deleted.append(namespace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and core.list_namespaced_pod(namespace).items:
        time.sleep(0.5)


def wait_for_deleted_namespaces(timeout: float = 120) -> list[str]:
    """Namespaces this process deleted that still exist after `timeout` (normally none)."""
    client = api()
    core = client.CoreV1Api()
    deadline = time.monotonic() + timeout
    left = list(_deleted)
    while left and time.monotonic() < deadline:
        still = []
        for namespace in left:
            try:
                core.read_namespace(namespace)
                still.append(namespace)
            except client.exceptions.ApiException as error:
                if error.status != 404:
                    still.append(namespace)
        left = still
        if left:
            time.sleep(1)
    return left


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


@dataclass
class UpRun:
    program: str
    models: int
    seconds: float
    returncode: int
    output: str
    watcher: Watcher
    namespace: str
    ended_at: float
    machine_busy: float = 0.0  # fraction of all cores busy during the run (everyone's work)
    started_at: float = 0.0

    @property
    def phases(self) -> dict[str, float]:
        return self.watcher.phases(self.started_at, self.ended_at)


def up_once(program: str, models: list[dict], pool: VolumePool, workdir: Path,
            inspect: Optional[Callable[[Project, UpRun], None]] = None, **platform) -> UpRun:
    """Create a fresh stack, time one `pulumi up` of it, then delete everything it made."""
    namespace = f"bench-{program}-{uuid.uuid4().hex[:6]}"
    require_cluster()
    rwx = sum(1 for m in models if (m.get("weights") or {}).get("accessMode") == "ReadWriteMany")
    pool.ensure(rwo=len(models) - rwx, rwx=rwx)
    gpus = sum(int(m.get("gpus", 1)) * int(m.get("replicas", 1)) for m in models)
    if wait_for_gpus(gpus) < gpus:
        raise BenchError(f"fewer than {gpus} GPUs free on the cluster (other runs hold them)")
    project = new_project(program, namespace, stack_config(namespace, models, storageClassName=pool.storage_class,
                                                            **platform), workdir)
    watcher = Watcher(namespace).start()
    try:
        busy0, total0 = cpu_ticks()
        start = time.monotonic()
        result = run_pulumi(project, "up", "--yes", "--skip-preview", timeout=UP_TIMEOUT)
        ended = time.monotonic()
        busy1, total1 = cpu_ticks()
        run = UpRun(program, len(models), ended - start, result.returncode, result.stdout + result.stderr,
                    watcher, namespace, ended, (busy1 - busy0) / max(1, total1 - total0), start)
        if inspect is not None:
            inspect(project, run)
        return run
    except subprocess.TimeoutExpired:
        raise BenchError(f"`pulumi up` of {len(models)} model(s) ({program}) did not end within {UP_TIMEOUT}s") from None
    finally:
        watcher.stop()
        try:
            delete_namespace(namespace)
        except Exception as error:  # noqa: BLE001 - cleanup must not hide the run's own outcome
            print(f"bench: could not delete namespace {namespace}: {error}", file=sys.stderr)
        shutil.rmtree(project.root, ignore_errors=True)


def models_named(prefix: str, count: int, **overrides) -> list[dict]:
    return [small_model(f"{prefix}{i}" if count > 1 else prefix, **overrides) for i in range(count)]


__all__ = ["BenchError", "Project", "UpRun", "VolumePool", "Watcher", "api", "delete_namespace",
           "ensure_environment", "free_gpus", "models_named", "new_project", "small_model", "stack_config",
           "require_cluster", "run_pulumi", "up_once", "wait_for_deleted_namespaces"]
