"""A versioned bucket read as it was at a time (``source.versionAt``, issue 23 item 1), proven with
the real parts: MinIO (built from the Go module proxy; versitygw v1.8.0 lists a noncurrent version
with the time it was superseded, so it cannot answer "as it was at T": scripts/testtools/versions.sh)
on 127.0.0.1, preview's own client listing the versions, and the compiled Job's `pull` and
`verify` containers run with the rclone binary of the image's release — the same rewrites of the
rendered command as tests/puller/test_s3_puller.py, whose helpers these are.

The story: v1 of the weights is uploaded, a time T is taken, then config.json is overwritten (v2),
a file is added and one is deleted. With ``versionAt: T`` preview lists v1, the pull copies v1
and the verify step accepts it; without it, everything is the latest (v2).
"""

from __future__ import annotations

import datetime
import hashlib
import time
from pathlib import Path

import pytest

from components.compile import common
from components.preflight import PreflightError
from testkit.s3_server import S3Server, tools_bin
from tests.puller.test_s3_puller import BUCKET, PREFIX, model_files, on_volume, previewed, run_job, stack_for

V2_CONFIG = b'{"architectures": ["LlamaForCausalLM"], "version": 2}'


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    return tools_bin()


def instant() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture(scope="module")
def history(tmp_path_factory, bin_dir):
    """A MinIO bucket with versioning and two states of the model: (server, v1 files, T, latest files)."""
    with S3Server(tmp_path_factory.mktemp("minio"), bin_dir, kind="minio") as store:
        store.bucket(BUCKET)
        store.enable_versioning(BUCKET)
        v1 = model_files(weight_bytes=1 << 20)
        store.upload(BUCKET, PREFIX, v1)
        # LastModified is kept to the millisecond; a clear second either side of T.
        time.sleep(1.2)
        at = instant()
        time.sleep(1.2)
        store.upload(BUCKET, PREFIX, {"config.json": V2_CONFIG, "added-later.json": b"{}"})
        store.delete(BUCKET, PREFIX + "tokenizer.json")
        latest = {**{k: v for k, v in v1.items() if k != "tokenizer.json"},
                  "config.json": V2_CONFIG, "added-later.json": b"{}"}
        store.bucket("unversioned")
        store.upload("unversioned", PREFIX, v1)
        yield store, v1, at, latest


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_preview_lists_the_versions_at_that_time(history):
    store, v1, at, latest = history
    listed = previewed(stack_for(store, versionAt=at), store).models[0].source
    assert {o.key: (o.size, o.etag) for o in listed.manifest} == {k: (len(v), md5(v)) for k, v in v1.items()}
    now = previewed(stack_for(store), store).models[0].source
    assert {o.key: (o.size, o.etag) for o in now.manifest} == {k: (len(v), md5(v)) for k, v in latest.items()}


def test_the_rendered_pull_at_that_time_copies_v1_and_verify_accepts_it(history, volume, tmp_path, bin_dir):
    store, v1, at, _ = history
    config = previewed(stack_for(store, versionAt=at), store)
    pull, verify = run_job(config, bin_dir, tmp_path)
    assert pull.returncode == 0, pull.stderr
    assert verify.returncode == 0, verify.stderr
    assert f"verified {len(v1)} listed files" in verify.stdout
    assert on_volume(volume) == v1


def test_without_the_pin_the_pull_copies_the_latest(history, volume, tmp_path, bin_dir):
    store, _, _, latest = history
    config = previewed(stack_for(store), store)
    assert [r.returncode for r in run_job(config, bin_dir, tmp_path)] == [0, 0]
    assert on_volume(volume) == latest


def test_unlisted_the_time_alone_still_copies_v1(history, volume, tmp_path, bin_dir):
    # pin: false / render: no listing from preview; rclone's version_at reads the same snapshot
    # for the copy and for the verify step's comparison with the store.
    store, v1, at, _ = history
    config = stack_for(store, versionAt=at)
    assert config.models[0].source.manifest is None
    results = run_job(config, bin_dir, tmp_path)
    assert [r.returncode for r in results] == [0, 0], results[-1].stderr
    assert on_volume(volume) == v1


def test_the_time_names_the_volume(history):
    store, _, at, _ = history
    names = [common.ModelNames.of(previewed(stack_for(store, **source), store).models[0]).weights
             for source in ({"versionAt": at}, {"versionAt": at}, {})]
    assert names[0] == names[1] != names[2]


def test_a_bucket_without_versioning_is_refused_at_preview(history):
    store, _, at, _ = history
    with pytest.raises(PreflightError) as refused:
        previewed(stack_for(store, versionAt=at, bucket="unversioned"), store)
    (line,) = refused.value.problems
    assert line.startswith("models.0.source.versionAt: bucket 'unversioned' at http://127.0.0.1:") and \
        "keeps no object versions (GetBucketVersioning: versioning was never enabled)" in line, line


def test_a_store_without_versions_at_all_is_refused_at_preview(tmp_path, bin_dir):
    # versitygw without a versioning directory: GetBucketVersioning answers "never enabled".
    with S3Server(tmp_path / "s3", bin_dir) as store:
        store.bucket(BUCKET)
        store.upload(BUCKET, PREFIX, {"config.json": b"{}"})
        with pytest.raises(PreflightError) as refused:
            previewed(stack_for(store, versionAt="2026-01-01T00:00:00Z"), store)
    (line,) = refused.value.problems
    assert line.startswith(f"models.0.source.versionAt: bucket '{BUCKET}' at {store.url} keeps no object versions"), line


def test_keys_refused_for_the_versions_say_which_call_and_which_permissions(history):
    store, _, at, _ = history
    with pytest.raises(PreflightError) as refused:
        previewed(stack_for(store, versionAt=at), store, AWS_SECRET_ACCESS_KEY="not-the-secret")
    (line,) = refused.value.problems
    assert line.startswith("models.0.source.credentials: cannot list ") and "(GetBucketVersioning: HTTP 403" in line, line
    assert "s3:ListBucketVersions, s3:GetBucketVersioning" in line, line


def test_a_multipart_version_is_checked_by_the_part_size_of_that_version(tmp_path, volume, bin_dir):
    """v1 of a shard in 5 MiB parts, v2 in 6 MiB parts (both without rclone's MD5, as aws s3 cp):
    preview at T asks HEAD ?partNumber=1 of v1's versionId, and the pull recomputes v1's ETag."""
    shard = "model-00001-of-00002.safetensors"
    with S3Server(tmp_path / "minio", bin_dir, kind="minio") as store:
        store.bucket(BUCKET)
        store.enable_versioning(BUCKET)
        v1 = model_files(weight_bytes=12 << 20)
        store.upload(BUCKET, PREFIX, v1, multipart_over=6 << 20, md5_metadata=False)
        time.sleep(1.2)
        at = instant()
        time.sleep(1.2)
        staging = tmp_path / "v2"
        staging.mkdir()
        (staging / shard).write_bytes(v1[shard][::-1])
        store.rclone("copy", str(staging), f"admin:{BUCKET}/{PREFIX}".rstrip("/"), "--s3-disable-checksum",
                     "--s3-upload-cutoff", "5M", "--s3-chunk-size", "6M")
        then = {o.key: o for o in previewed(stack_for(store, versionAt=at), store).models[0].source.manifest}
        now = {o.key: o for o in previewed(stack_for(store), store).models[0].source.manifest}
        assert (then[shard].etag.endswith("-3"), then[shard].part_size) == (True, 5 << 20)
        assert (now[shard].etag.endswith("-2"), now[shard].part_size) == (True, 6 << 20)
        config = previewed(stack_for(store, versionAt=at), store)
        results = run_job(config, bin_dir, tmp_path)
        assert [r.returncode for r in results] == [0, 0], results[-1].stderr
        assert on_volume(volume) == v1
