"""Per-pod weights proven (issue 22 item 4): the init containers of a multi-node model's group pods
(multiNode.weights: perPod) — rendered in the LeaderWorkerSet's leader and worker templates — run
for real, in order as the kubelet runs them, each pod into its own volume: `hf download` against
the loopback hub, and rclone's pull + verify against the loopback S3 server (versitygw), with the
same binaries the Job's tests use (tests/puller/test_puller.py, test_s3_puller.py).

Rewrites, and only these: each volume mount becomes a host directory as the kubelet binds it (the
pod's volume, or its `subPath` directory, created when missing as the kubelet does), in the
container's args and env; the pod's /tmp emptyDir is a temp dir; `sh` is busybox's when installed;
the hub and the store are the loopback servers (configs copied past the validation that refuses
loopback for a pod). A new revision then goes into its own directory, and the prune step leaves
only it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from components.compile import common, multinode
from components.config import load_stack_config
from testkit.hf_server import hub_cli, tiny_model_files
from testkit.s3_server import S3Server, tools_bin
from tests.puller.test_puller import REPO, SERVED
from tests.puller.test_s3_puller import BUCKET, KEYS, PREFIX, model_files, previewed, shell

RUN_TIMEOUT = 120
PODS = ("leaderTemplate", "workerTemplate")  # one pod of each role: two volumes


def group_model(source: dict) -> dict:
    return {"name": "duet", "source": source, "gpus": 4, "tensorParallelSize": 4,
            "weights": {"size": "1Gi", "storageClassName": "local-node"},
            "multiNode": {"nodes": 2, "weights": "perPod"}}


def init_containers(config, role: str) -> list[dict]:
    lws = multinode.compile_leader_worker_set(config.models[0], config)
    return lws["spec"]["leaderWorkerTemplate"][role]["spec"]["initContainers"]


def bind(container: dict, volume: Path, tmp: Path) -> tuple[list[str], dict]:
    """(argv, env) of the container with its mounts bound to host directories."""
    paths = {}
    for mount in container["volumeMounts"]:
        if mount["name"] == "weights":
            host = volume / mount["subPath"] if "subPath" in mount else volume
            host.mkdir(parents=True, exist_ok=True)  # the kubelet creates a missing subPath
        else:
            assert mount["name"] == "tmp", mount
            host = tmp
        paths[mount["mountPath"]] = str(host)

    def rebind(text: str) -> str:
        for mount_path in sorted(paths, key=len, reverse=True):
            if text == mount_path or text.startswith(mount_path + "/"):
                return paths[mount_path] + text[len(mount_path):]
        return text

    command = container["command"]
    if command[:2] == ["sh", "-c"]:
        argv = [*shell(), "-c", command[2].replace("/tmp/", f"{tmp}/"), *command[3:]]
    else:
        assert command == ["hf"], command
        argv = [str(hub_cli())]
    argv += [rebind(a) for a in container.get("args", [])]
    env = {"PATH": f"{tools_bin()}:{os.environ.get('PATH', '/usr/bin:/bin')}", "LANG": "C.UTF-8"}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = rebind(item["value"])
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = KEYS[(ref["name"], ref["key"])]
    env["HOME"] = str(tmp)
    return argv, env


def run_pod(config, role: str, volume: Path, tmp_root: Path) -> list[tuple[str, subprocess.CompletedProcess]]:
    """A group pod's init containers in order, each must succeed before the next (the kubelet's rule)."""
    tmp = tmp_root / f"{role}-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    ran = []
    for container in init_containers(config, role):
        argv, env = bind(container, volume, tmp)
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        ran.append((container["name"], result))
        if result.returncode != 0:
            break
    return ran


def served_files(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")
            if p.is_file() and not str(p.relative_to(directory)).startswith((".cache", ".hf-home"))}


def hub_config(hub, revision: str):
    config = load_stack_config({"models": [group_model({"repo": REPO, "revision": revision})]})
    return config.model_copy(update={"platform": config.platform.model_copy(update={"hf_endpoint": hub.url})})


def test_hub_each_pod_pulls_into_its_own_volume_and_a_new_revision_never_touches_the_old_copy(hub, tmp_path):
    files = tiny_model_files()
    first = hub.commit(REPO, files)
    config = hub_config(hub, first)
    old = multinode.revision_dir(config.models[0])
    volumes = {role: tmp_path / f"volume-{role}" for role in PODS}
    for role in PODS:
        ran = run_pod(config, role, volumes[role], tmp_path)
        assert [name for name, _ in ran] == ["weights-pull", "weights-prune"], ran
        assert all(r.returncode == 0 for _, r in ran), [r.stderr[-2000:] for _, r in ran]
        # What the server mounts (subPath = the revision directory) holds the model, in each volume.
        assert served_files(volumes[role] / old) == SERVED
        assert sorted(p.name for p in volumes[role].iterdir()) == [old]
    # Two pods, two pulls: the hub served the weights file once to each.
    assert len([r for r in hub.requests if r.method == "GET" and r.path.endswith("/model.safetensors")]) == 2

    # A new revision: the pull fills its own directory while the old copy stays whole; the prune
    # step (after the pull, and the verify step where there is one) removes the old one.
    changed = {**files, "config.json": files["config.json"] + b" "}
    config = hub_config(hub, hub.commit(REPO, changed))
    new = multinode.revision_dir(config.models[0])
    assert new != old
    volume, tmp = volumes["workerTemplate"], tmp_path / "new-tmp"
    tmp.mkdir()
    pull, prune = init_containers(config, "workerTemplate")
    before = {p: p.read_bytes() for p in (volume / old).rglob("*") if p.is_file()}
    argv, env = bind(pull, volume, tmp)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert {p: p.read_bytes() for p in (volume / old).rglob("*") if p.is_file()} == before
    assert (volume / new / "config.json").read_bytes() == changed["config.json"]
    argv, env = bind(prune, volume, tmp)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 0 and f"llm-serving: pruned old weights {old}" in result.stdout
    assert sorted(p.name for p in volume.iterdir()) == [new]


@pytest.fixture
def store(tmp_path):
    with S3Server(tmp_path / "s3", tools_bin()) as server:
        server.bucket(BUCKET)
        yield server


def s3_config(store: S3Server):
    source = {"type": "s3", "bucket": BUCKET, "prefix": PREFIX, "endpoint": "http://minio.storage.svc:9000",
              "credentials": {"secret": "s3-keys"}}
    config = load_stack_config({"models": [group_model(source)]})
    model = config.models[0]
    local = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": store.url})})
    return config.model_copy(update={"models": (local,)})


def test_s3_each_pod_pulls_and_verifies_its_own_volume_and_a_changed_object_stops_a_pod(store, tmp_path):
    files = model_files()
    store.upload(BUCKET, PREFIX, files)
    config = previewed(s3_config(store), store)  # the listing pinned, as `pulumi up` hands it on
    revision = multinode.revision_dir(config.models[0])
    volumes = {role: tmp_path / f"volume-{role}" for role in PODS}
    for role in PODS:
        ran = run_pod(config, role, volumes[role], tmp_path)
        assert [name for name, _ in ran] == ["weights-pull", "weights-verify", "weights-prune"]
        assert all(r.returncode == 0 for _, r in ran), [r.stderr[-2000:] for _, r in ran]
        assert f"llm-serving: verified {len(files)} listed files in" in ran[1][1].stdout
        assert {k: (volumes[role] / revision / k).read_bytes() for k in files} == files
    # A pod recreated after the store changed: the pull refuses before copying (exit 42), its
    # verified copy is left as it was, and the server cannot start (no later step runs).
    store.upload(BUCKET, PREFIX, {"config.json": b'{"architectures": ["Changed"]}'})
    ran = run_pod(config, "workerTemplate", volumes["workerTemplate"], tmp_path)
    assert [(name, r.returncode) for name, r in ran] == [("weights-pull", 42)]
    assert "llm-serving: source changed since preview: config.json" in ran[0][1].stderr
    assert (volumes["workerTemplate"] / revision / "config.json").read_bytes() == files["config.json"]
    # A copy cut short in one pod's volume: its verify step refuses, naming the file.
    store.upload(BUCKET, PREFIX, {"config.json": files["config.json"]})
    (volumes["leaderTemplate"] / revision / "model-00002-of-00002.safetensors").unlink()
    verify = init_containers(config, "leaderTemplate")[1]
    argv, env = bind(verify, volumes["leaderTemplate"], tmp_path / "verify-tmp")
    (tmp_path / "verify-tmp").mkdir(exist_ok=True)
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 43 and "llm-serving: missing: model-00002-of-00002.safetensors" in result.stderr
    assert common.WEIGHTS_MOUNT == "/model-store"  # nothing here patched the compiler
