"""The object-store puller proven (issue 23): the compiled Job's exact containers — rclone's `pull`
and the `verify` step, both `sh -c <script>` in the rclone image — run with the rclone binary of
the same release (built from the Go module proxy) against a real S3-compatible server (versitygw,
same way) on 127.0.0.1, into a temp dir standing for the weights volume; preview's listing comes
from the real preflight client against the same server.

Rewrites of the rendered command, and only these:
- the weights mount (/model-store) is a temp dir: ``common.WEIGHTS_MOUNT`` is patched, so the
  compiler writes it into the args itself;
- the store's endpoint is the loopback server: the validated config is copied with
  ``source.endpoint`` swapped (``model_copy`` skips the validation that refuses loopback for a
  pod), so ``RCLONE_CONFIG_SRC_ENDPOINT`` carries it;
- ``sh`` is busybox's sh when installed (the image's shell), and the tools the scripts call (dd,
  md5sum, awk, stat, sed...) are busybox's applets too, as in the Alpine image; else the host's
  POSIX sh and tools; ``rclone`` resolves through PATH to the built binary;
- Secret references are resolved from the test's keys; /tmp (the pod's emptyDir) is a temp dir
  through ``HOME`` only where rclone looks (the scripts write /tmp/keys: see ``TMP``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from components.compile import common, weights
from components.config import load_stack_config
from components.config.sources import S3Object
from components.preflight import PreflightError, preflight_stack
from components.preflight.s3 import ENDPOINT_ENV
from providers.projection import diagnose_puller_failure
from testkit.busybox import applets, shell
from testkit.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, tools_bin
from tests.support.corrupt_proxy import CorruptProxy
from tests.support.cut_proxy import CutProxy
from tests.support.refusing_proxy import RefusingProxy

BUCKET = "models"
PREFIX = "llama-tiny/"
RUN_TIMEOUT = 120


def model_files(weight_bytes: int = 3 << 20) -> dict[str, bytes]:
    blob = hashlib.sha256(b"seed").digest() * (weight_bytes // 32 + 1)
    return {
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
        "tokenizer.json": b'{"version": "1.0"}',
        "model-00001-of-00002.safetensors": blob[:weight_bytes],
        "model-00002-of-00002.safetensors": blob[1:weight_bytes // 2 + 1],
        "model.safetensors.index.json": b'{"weight_map": {"a": "model-00001-of-00002.safetensors", '
                                        b'"b": "model-00002-of-00002.safetensors"}}',
        "nested/generation_config.json": b"{}",
    }


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    return tools_bin()


@pytest.fixture
def store(tmp_path, bin_dir):
    with S3Server(tmp_path / "s3", bin_dir) as server:
        server.bucket(BUCKET)
        yield server


def stack_for(store: S3Server, prefix: str = PREFIX, **source):
    config = load_stack_config({"models": [{
        "name": "tiny", "weights": {"size": "1Gi"},
        "source": {"type": "s3", "bucket": BUCKET, "prefix": prefix, "endpoint": "http://minio.storage.svc:9000",
                   "credentials": {"secret": "s3-keys"}, **source},
    }]})
    model = config.models[0]
    local = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": store.url})})
    return config.model_copy(update={"models": (local,)})


def previewed(config, store: S3Server, **env):
    """The stack as `pulumi preview` hands it on: the listing pinned (platform.pin, the default)."""
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, ENDPOINT_ENV: store.url, **env}
    return preflight_stack(config, env=env).stack




def run(container: dict, bin_dir: Path, secrets: dict, tmp: Path) -> subprocess.CompletedProcess:
    command = container["command"]
    assert command[:2] == ["sh", "-c"]
    script = command[2].replace("/tmp/", f"{tmp}/")  # the pod's /tmp emptyDir
    argv = [*shell(), "-c", script, *command[3:], *container["args"]]
    env = {"PATH": f"{bin_dir}:{applets(tmp)}{os.environ.get('PATH', '/usr/bin:/bin')}", "LANG": "C.UTF-8"}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
    env["HOME"] = str(tmp)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)


KEYS = {("s3-keys", "AWS_ACCESS_KEY_ID"): ACCESS_KEY, ("s3-keys", "AWS_SECRET_ACCESS_KEY"): SECRET_KEY}


def run_job(config, bin_dir: Path, tmp_path: Path, secrets=None) -> tuple[subprocess.CompletedProcess, ...]:
    """The Job as the kubelet runs it: init containers in order, each must succeed, then the container."""
    job = weights.compile_puller_job(config.models[0], config.platform)
    spec = job["spec"]["template"]["spec"]
    tmp = tmp_path / "pod-tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    results = []
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        result = run(container, bin_dir, KEYS if secrets is None else secrets, tmp)
        results.append(result)
        if result.returncode != 0:
            break
    return tuple(results)


def gate_verdict(failed: subprocess.CompletedProcess, container: str):
    """What the gate reports for this failure: the container's termination message as the kubelet
    makes it with FallbackToLogsOnError (the log's last 80 lines / 2048 bytes)."""
    message = "\n".join(failed.stderr.splitlines()[-80:])[-2048:]
    job = {"metadata": {"name": "tiny-pull", "annotations": {}},
           "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}}
    pod = {"metadata": {"name": "tiny-pull-x"}, "status": {"initContainerStatuses" if container == "pull" else
           "containerStatuses": [{"name": container, "state": {"terminated": {"exitCode": failed.returncode,
                                                                               "message": message}}}]}}
    return diagnose_puller_failure(job, [pod], {}, [])


def on_volume(volume: Path) -> dict[str, bytes]:
    return {str(p.relative_to(volume)): p.read_bytes() for p in volume.rglob("*") if p.is_file()}


def test_pull_copies_the_prefix_exactly_and_verifies(store, volume, tmp_path, bin_dir):
    files = model_files()
    store.upload(BUCKET, PREFIX, files)
    store.upload(BUCKET, "other-model/", {"config.json": b"{}"})  # beside the prefix: not copied
    config = previewed(stack_for(store), store)
    manifest = config.models[0].source.manifest
    assert {o.key for o in manifest} == set(files)
    assert all(len(o.etag) == 32 for o in manifest)  # one-part uploads: MD5 ETags
    pull, verify = run_job(config, bin_dir, tmp_path)
    assert pull.returncode == 0, pull.stderr
    assert verify.returncode == 0, verify.stderr
    assert on_volume(volume) == files
    assert f"verified {len(files)} listed files" in verify.stdout


def test_rerun_copies_nothing(store, volume, tmp_path, bin_dir):
    store.upload(BUCKET, PREFIX, model_files())
    config = previewed(stack_for(store), store)
    assert all(r.returncode == 0 for r in run_job(config, bin_dir, tmp_path))
    stamps = {p: p.stat().st_mtime_ns for p in volume.rglob("*") if p.is_file()}
    again = run_job(config, bin_dir, tmp_path)
    assert all(r.returncode == 0 for r in again), again[-1].stderr
    assert {p: p.stat().st_mtime_ns for p in volume.rglob("*") if p.is_file()} == stamps


SHARD = "model-00001-of-00002.safetensors"  # 12 MiB below: three parts of 5, 5 and 2 MiB
SHARD2 = "model-00002-of-00002.safetensors"  # 6 MiB: two parts of 5 and 1 MiB


def pull_env(config) -> dict[str, str]:
    pull = weights.compile_puller_job(config.models[0], config.platform)["spec"]["template"]["spec"]["initContainers"][0]
    return {item["name"]: item.get("value") for item in pull["env"]}


def test_multipart_objects_with_rclones_md5_are_left_to_rclone(store, volume, tmp_path, bin_dir):
    files = model_files(weight_bytes=12 << 20)
    store.upload(BUCKET, PREFIX, files, multipart_over=6 << 20)  # x-amz-meta-md5chksum: rclone checks the MD5
    config = previewed(stack_for(store), store)
    manifest = {o.key: o for o in config.models[0].source.manifest}
    assert manifest[SHARD].etag.endswith("-3")  # <md5>-<parts>: not an MD5 of the file
    assert manifest[SHARD].part_size is None and "LLM_SERVING_PARTS" not in pull_env(config)  # not hashed twice
    results = run_job(config, bin_dir, tmp_path)
    assert [r.returncode for r in results] == [0, 0], results[-1].stderr
    assert on_volume(volume) == files


def test_multipart_objects_of_other_uploaders_are_checked_by_their_etag(store, volume, tmp_path, bin_dir):
    files = model_files(weight_bytes=12 << 20)
    store.upload(BUCKET, PREFIX, files, multipart_over=6 << 20, md5_metadata=False)  # as aws s3 cp / boto3
    config = previewed(stack_for(store), store)
    manifest = {o.key: o for o in config.models[0].source.manifest}
    assert manifest[SHARD].etag.endswith("-3") and manifest[SHARD].part_size == 5 << 20
    assert manifest[SHARD2].etag.endswith("-2") and manifest[SHARD2].part_size == 5 << 20
    assert sorted(k for k, o in manifest.items() if o.part_size) == [SHARD, SHARD2]  # the small files: one part
    assert pull_env(config)["LLM_SERVING_PARTS"] == "\n".join(
        f"{5 << 20}\t{manifest[key].etag}\t{key}" for key in (SHARD, SHARD2))
    results = run_job(config, bin_dir, tmp_path)
    assert [r.returncode for r in results] == [0, 0], results[-1].stderr
    assert on_volume(volume) == files


def test_a_corrupted_byte_in_a_multipart_object_of_another_uploader_fails_the_pull(store, volume, tmp_path, bin_dir):
    files = model_files(weight_bytes=12 << 20)
    store.upload(BUCKET, PREFIX, files, multipart_over=6 << 20, md5_metadata=False)
    config = previewed(stack_for(store), store)
    proxy = CorruptProxy(store.port, key=f"{PREFIX}{SHARD}")  # every answer for that key: one byte flipped
    try:
        model = config.models[0]
        via = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": proxy.url})})
        results = run_job(config.model_copy(update={"models": (via,)}), bin_dir, tmp_path)
    finally:
        proxy.close()
    assert proxy.flips >= 1
    assert len(results) == 1 and results[0].returncode == 44, [r.stderr[-800:] for r in results]
    assert results[0].stderr.splitlines()[-1] == f"llm-serving: corrupted (not the multipart ETag preview listed): {SHARD}"
    # Removed: the Job's next attempt fetches it again instead of keeping a bad file under its name.
    assert on_volume(volume) == {k: v for k, v in files.items() if k != SHARD}
    verdict = gate_verdict(results[0], "pull")
    assert verdict.reason == "source-corrupted" and f"preview listed, on every retry): {SHARD};" in verdict.message
    # The store's bytes were never bad: the next attempt (no relay in the way) copies and accepts them.
    results = run_job(config, bin_dir, tmp_path)
    assert [r.returncode for r in results] == [0, 0], results[-1].stderr
    assert on_volume(volume) == files


def test_a_store_that_refuses_part_numbers_leaves_multipart_objects_size_checked(store, volume, tmp_path, bin_dir):
    files = model_files(weight_bytes=12 << 20)
    store.upload(BUCKET, PREFIX, files, multipart_over=6 << 20, md5_metadata=False)
    proxy = RefusingProxy(store.port)
    try:
        report = preflight_stack(stack_for(store), env={"AWS_ACCESS_KEY_ID": ACCESS_KEY,
                                                        "AWS_SECRET_ACCESS_KEY": SECRET_KEY, ENDPOINT_ENV: proxy.url})
    finally:
        proxy.close()
    assert proxy.refused == 2
    config = report.stack
    assert all(o.part_size is None for o in config.models[0].source.manifest)
    assert "LLM_SERVING_PARTS" not in pull_env(config)
    (warning,) = report.warnings
    assert warning.endswith(f"2 objects uploaded in parts are checked by size only, the store gave no part size to "
                            f"recompute their ETags from: {SHARD} (HEAD ?partNumber=1: HTTP 501); "
                            f"{SHARD2} (HEAD ?partNumber=1: HTTP 501)"), warning
    results = run_job(config, bin_dir, tmp_path)
    assert [r.returncode for r in results] == [0, 0], results[-1].stderr
    assert on_volume(volume) == files


def test_wrong_credentials_fail_the_pull_clearly(store, volume, tmp_path, bin_dir):
    store.upload(BUCKET, PREFIX, model_files())
    config = stack_for(store)  # unpinned: the copy itself meets the refusal
    wrong = {**KEYS, ("s3-keys", "AWS_SECRET_ACCESS_KEY"): "not-the-secret"}
    (pull,) = run_job(config, bin_dir, tmp_path, secrets=wrong)
    assert pull.returncode != 0
    assert gate_verdict(pull, "pull").reason == "source-unauthorized"
    assert on_volume(volume) == {}


def test_wrong_credentials_are_refused_at_preview(store):
    store.upload(BUCKET, PREFIX, model_files())
    with pytest.raises(PreflightError) as refused:
        previewed(stack_for(store), store, AWS_SECRET_ACCESS_KEY="not-the-secret")
    (line,) = refused.value.problems
    assert line.startswith("models.0.source.credentials: cannot list") and "were refused" in line


def test_missing_bucket_and_prefix_are_refused_at_preview(store):
    store.upload(BUCKET, PREFIX, model_files())
    with pytest.raises(PreflightError) as refused:
        previewed(stack_for(store, prefix="no-such-model/"), store)
    assert refused.value.problems == [
        f"models.0.source.prefix: no object under s3://127.0.0.1:{store.port}/{BUCKET}/no-such-model/ at "
        f"{store.url}; check source.prefix (a folder of the bucket, e.g. 'llama-3.1-8b-instruct/')"
    ] or refused.value.problems[0].startswith("models.0.source.prefix: no object under")
    config = stack_for(store)
    other = config.models[0].model_copy(update={"source": config.models[0].source.model_copy(update={"bucket": "nope"})})
    with pytest.raises(PreflightError) as refused:
        previewed(config.model_copy(update={"models": (other,)}), store)
    assert refused.value.problems[0].startswith("models.0.source.bucket: bucket 'nope' not found")


def test_missing_bucket_fails_the_pull_clearly(store, volume, tmp_path, bin_dir):
    config = stack_for(store)
    model = config.models[0]
    gone = model.model_copy(update={"source": model.source.model_copy(update={"bucket": "nope"})})
    (pull,) = run_job(config.model_copy(update={"models": (gone,)}), bin_dir, tmp_path)
    assert pull.returncode != 0
    assert gate_verdict(pull, "pull").reason == "source-not-found"


def test_weights_size_too_small_is_refused_at_preview(store):
    store.upload(BUCKET, PREFIX, model_files(weight_bytes=3 << 20))
    config = stack_for(store)
    small = config.models[0].model_copy(update={"weights": config.models[0].weights.model_copy(update={"size": "1Mi"})})
    with pytest.raises(PreflightError) as refused:
        previewed(config.model_copy(update={"models": (small,)}), store)
    assert refused.value.problems[0].startswith("models.0.weights.size: 1Mi (1.0 MiB) is too small")
    assert "set weights.size: 1Gi" in refused.value.problems[0]


def test_a_file_changed_after_preview_is_refused_before_the_copy(store, volume, tmp_path, bin_dir):
    files = model_files()
    store.upload(BUCKET, PREFIX, files)
    config = previewed(stack_for(store), store)
    # Same size, other bytes: only the ETag tells.
    store.upload(BUCKET, PREFIX, {"config.json": files["config.json"].replace(b"Llama", b"LLAMA")})
    (pull,) = run_job(config, bin_dir, tmp_path)
    assert pull.returncode == 42, pull.stderr
    assert "llm-serving: source changed since preview: config.json" in pull.stderr
    verdict = gate_verdict(pull, "pull")
    assert verdict.reason == "source-changed" and "since preview: config.json;" in verdict.message
    assert on_volume(volume) == {}


def test_a_partial_copy_is_refused_with_the_missing_keys(store, volume, tmp_path, bin_dir):
    files = model_files()
    store.upload(BUCKET, PREFIX, files)
    config = previewed(stack_for(store), store)
    pull, verify = run_job(config, bin_dir, tmp_path)
    assert verify.returncode == 0
    (volume / "model-00002-of-00002.safetensors").unlink()
    (volume / "tokenizer.json").write_bytes(b"{}")
    verify = run(weights.compile_puller_job(config.models[0], config.platform)
                 ["spec"]["template"]["spec"]["containers"][0], bin_dir, KEYS, tmp_path)
    assert verify.returncode == 43
    assert "llm-serving: missing: model-00002-of-00002.safetensors" in verify.stderr
    assert f"llm-serving: wrong size: tokenizer.json(2 bytes, expected {len(files['tokenizer.json'])})" in verify.stderr
    verdict = gate_verdict(verify, "verify")
    assert verdict.reason == "weights-incomplete" and "missing: model-00002-of-00002.safetensors;" in verdict.message


def test_a_key_deleted_after_preview_is_named(store, volume, tmp_path, bin_dir):
    files = model_files()
    store.upload(BUCKET, PREFIX, files)
    config = previewed(stack_for(store), store)
    store.rclone("deletefile", f"admin:{BUCKET}/{PREFIX}tokenizer.json")
    results = run_job(config, bin_dir, tmp_path)
    assert results[-1].returncode in (42, 43), results[-1].stderr
    assert "tokenizer.json" in results[-1].stderr.splitlines()[-1]


def test_the_pinned_listing_names_the_volume(store):
    store.upload(BUCKET, PREFIX, model_files())
    first = previewed(stack_for(store), store)
    again = previewed(stack_for(store), store)
    assert common.ModelNames.of(again.models[0]) == common.ModelNames.of(first.models[0])
    store.upload(BUCKET, PREFIX, {"config.json": b'{"changed": true}'})
    changed = previewed(stack_for(store), store)
    assert common.ModelNames.of(changed.models[0]).weights != common.ModelNames.of(first.models[0]).weights
    assert isinstance(first.models[0].source.manifest[0], S3Object)


def test_unpinned_pull_is_verified_against_the_store(store, volume, tmp_path, bin_dir):
    files = model_files()
    store.upload(BUCKET, PREFIX, files)
    config = stack_for(store)  # no preview listing (pin off, or render): the whole prefix
    assert config.models[0].source.manifest is None
    assert [r.returncode for r in run_job(config, bin_dir, tmp_path)] == [0, 0]
    assert on_volume(volume) == files
    (volume / "tokenizer.json").unlink()
    verify = run(weights.compile_puller_job(config.models[0], config.platform)
                 ["spec"]["template"]["spec"]["containers"][0], bin_dir, KEYS, tmp_path)
    assert verify.returncode == 43
    assert "llm-serving: missing: tokenizer.json" in verify.stderr


def test_connection_cut_mid_transfer_resumes_with_a_ranged_read(store, volume, tmp_path, bin_dir):
    files = model_files(weight_bytes=24 << 20)
    store.upload(BUCKET, PREFIX, files)
    config = previewed(stack_for(store), store)
    proxy = CutProxy(store.port, cut_after_bytes=10 << 20)  # inside the 24 MiB shard
    try:
        model = config.models[0]
        via = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": proxy.url})})
        results = run_job(config.model_copy(update={"models": (via,)}), bin_dir, tmp_path)
    finally:
        proxy.close()
    assert [r.returncode for r in results] == [0, 0], results[-1].stderr
    assert proxy.cuts == 1
    # rclone re-opened the object where the cut left it, instead of failing or starting over.
    resumed = [re.search(rb"range: bytes=(\d+)-", r.lower()) for r in proxy.ranged()]
    assert any(m and int(m.group(1)) > 0 for m in resumed), proxy.requests
    assert on_volume(volume) == files


BIG = 65 << 20  # over COPY_FLAGS' --multi-thread-cutoff=64M: ranged streams, then rclone re-reads the file for its MD5


@pytest.mark.parametrize("layout", ["one-part", "one-part, ranged streams", "multipart with the uploader's MD5"])
def test_a_corrupted_byte_fails_the_pull(store, volume, tmp_path, bin_dir, layout):
    files = model_files(weight_bytes=BIG if "ranged" in layout else 12 << 20)
    store.upload(BUCKET, PREFIX, files, multipart_over=6 << 20 if "multipart" in layout else None)
    config = previewed(stack_for(store), store)
    bad = "model-00001-of-00002.safetensors"
    proxy = CorruptProxy(store.port, key=f"{PREFIX}{bad}")  # every answer for that key: one byte flipped
    try:
        model = config.models[0]
        via = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": proxy.url})})
        results = run_job(config.model_copy(update={"models": (via,)}), bin_dir, tmp_path)
    finally:
        proxy.close()
    assert proxy.flips >= 1
    assert len(results) == 1 and results[0].returncode != 0, [r.stderr[-800:] for r in results]
    assert "corrupted on transfer: md5 hashes differ" in results[0].stderr
    assert bad not in on_volume(volume)  # never under its name: rclone renames a file only once it checks out
    verdict = gate_verdict(results[0], "pull")
    assert verdict.reason == "source-corrupted" and f": {bad};" in verdict.message, verdict.message


def test_a_byte_corrupted_once_is_fetched_again(store, volume, tmp_path, bin_dir):
    files = model_files(weight_bytes=12 << 20)
    store.upload(BUCKET, PREFIX, files)
    config = previewed(stack_for(store), store)
    proxy = CorruptProxy(store.port, key=f"{PREFIX}model-00001-of-00002.safetensors", times=1)
    try:
        model = config.models[0]
        via = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": proxy.url})})
        results = run_job(config.model_copy(update={"models": (via,)}), bin_dir, tmp_path)
    finally:
        proxy.close()
    assert proxy.flips == 1
    assert [r.returncode for r in results] == [0, 0], results[-1].stderr
    assert on_volume(volume) == files
