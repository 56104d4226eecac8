"""The S3 puller's copy flags (issue 23, speed): ranged streams only to fill rclone's 16 transfer
slots, read from preview's listing. A file copied in one stream is MD5-checked as it is written; a
file copied in ranged streams is read back and hashed after its last chunk, so with enough large
files to fill the slots every file comes in one stream. Pure: config in, args out."""

from __future__ import annotations

import pytest

from components.compile import object_store, weights
from components.compile.common import SOURCE_HASH_LABEL
from components.config import load_stack_config
from components.config.sources import S3Object

MiB = 1 << 20


def s3_model(sizes):
    source = {"type": "s3", "bucket": "models", "prefix": "llama/", "endpoint": "http://minio.storage.svc:9000"}
    config = load_stack_config({"models": [{"name": "m", "weights": {"size": "100Gi"}, "source": source}]})
    model = config.models[0]
    if sizes is not None:  # preview's listing, pinned as preflight pins it
        manifest = tuple(S3Object(key=f"model-{i:05d}.safetensors", size=size, etag="0" * 32)
                         for i, size in enumerate(sizes))
        model = model.model_copy(update={"source": model.source.model_copy(update={"manifest": manifest})})
    return model, config.platform


def pull_args(sizes) -> list[str]:
    model, platform = s3_model(sizes)
    job = weights.compile_puller_job(model, platform)
    return job["spec"]["template"]["spec"]["initContainers"][0]["args"]


@pytest.mark.parametrize("sizes, streams", [
    (None, 8),                                   # unpinned: nothing known, the most streams
    ([1 * MiB] * 40, 8),                         # no large file: the setting applies to none
    ([5000 * MiB], 8),                           # one shard: 8 ranged streams (capped)
    ([5000 * MiB] * 4 + [1 * MiB] * 3, 4),       # 4 shards: 4 streams each, 16 connections
    ([64 * MiB] * 5, 4),                         # at the cutoff counts as large (ceil 16/5)
    ([5000 * MiB] * 8, 2),
    ([5000 * MiB] * 16, 1),                      # 16 shards fill the slots: one stream each
    ([4600 * MiB] * 191, 1),
])
def test_ranged_streams_fill_the_transfer_slots(sizes, streams):
    args = pull_args(sizes)
    assert [a for a in args if a.startswith("--multi-thread-streams=")] == [f"--multi-thread-streams={streams}"]
    assert "--transfers=16" in args and "--multi-thread-cutoff=64M" in args
    assert len(args) == 2 + len(object_store.COPY_FLAGS)  # the remote and the volume, then one of each flag


def test_the_cutoff_constant_is_the_flag():
    assert f"--multi-thread-cutoff={object_store.LARGE_OBJECT_BYTES // MiB}M" in object_store.COPY_FLAGS


def pull_command(model, platform) -> list:
    return weights.compile_puller_job(model, platform)["spec"]["template"]["spec"]["initContainers"][0]["command"]


def pull_env(model, platform) -> dict:
    job = weights.compile_puller_job(model, platform)
    return {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["initContainers"][0]["env"]}


def test_only_multipart_objects_with_a_part_size_are_hashed_by_the_pull():
    model, platform = s3_model([5000 * MiB, 10 * MiB])
    listed = model.source.manifest
    assert "LLM_SERVING_PARTS" not in pull_env(model, platform)  # no part size: the env as before
    assert pull_command(model, platform)[2] == object_store.PULL_SCRIPT  # and the script
    manifest = (listed[0].model_copy(update={"etag": "a" * 32 + "-625", "part_size": 8 * MiB}),
                listed[1].model_copy(update={"etag": "b" * 32 + "-2"}))  # the store gave no part size
    sized = model.model_copy(update={"source": model.source.model_copy(update={"manifest": manifest})})
    env = pull_env(sized, platform)
    assert env["LLM_SERVING_PARTS"] == f"{8 * MiB}\t{'a' * 32}-625\tmodel-00000.safetensors"
    assert "LLM_SERVING_MD5SUMS" not in env  # neither ETag is an MD5
    assert pull_command(sized, platform)[2] == object_store.PULL_PARTS_SCRIPT
    # Part sizes are not in the source's identity: the volume keeps its name. (The Job's template
    # differs, its script and env, so it is a Job of its own name: common.puller_name.)
    unsized = model.model_copy(update={"source": model.source.model_copy(
        update={"manifest": (manifest[0].model_copy(update={"part_size": None}), manifest[1])})})
    assert weights.compile_weights_pvc(sized, platform)["metadata"]["name"] == \
        weights.compile_weights_pvc(unsized, platform)["metadata"]["name"]
    assert weights.compile_puller_job(sized, platform)["metadata"]["labels"][SOURCE_HASH_LABEL] == \
        weights.compile_puller_job(unsized, platform)["metadata"]["labels"][SOURCE_HASH_LABEL]
