"""The gate's verdict on a failed object-store / existing-volume puller (issue 23): the `pull` and
`verify` containers' last `llm-serving:` line (their termination message: a failed init container
has no log under the pod's default container) names the keys; rclone's S3 error codes name the
store's refusal. Pure: wire-shape dicts in, a Status out."""

from __future__ import annotations

import pytest

from providers.projection import diagnose_puller_failure

JOB = {"metadata": {"name": "m-pull-1", "annotations": {"llm-serving.dev/model-source": "s3://models/llama/#ab"}},
       "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                  "message": "Job has reached the specified backoff limit"}]}}


def failed_pod(container: str, message: str, init: bool) -> dict:
    status = {"name": container, "state": {"terminated": {"exitCode": 43, "reason": "Error", "message": message}}}
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"metadata": {"name": "m-pull-1-x", "creationTimestamp": "2026-12-01T12:00:00Z"}, "status": {key: [status]}}


@pytest.mark.parametrize("container, init, message, reason, words", [
    ("verify", False, "llm-serving: missing: model-00002-of-00002.safetensors tokenizer.json", "weights-incomplete",
     "missing: model-00002-of-00002.safetensors tokenizer.json"),
    ("verify", False, "llm-serving: wrong size: config.json(2 bytes, expected 40)", "weights-incomplete",
     "wrong size: config.json(2 bytes, expected 40)"),
    ("pull", True, "ERROR : config.json: md5 differ\nllm-serving: source changed since preview: config.json",
     "source-changed", "changed in the store since preview: config.json"),
    ("pull", True, "Failed to copy: operation error S3: ListObjectsV2, https response error StatusCode: 403, "
     "api error SignatureDoesNotMatch: The request signature we calculated does not match", "source-unauthorized",
     "refused the puller (operation error S3: ListObjectsV2, https response error StatusCode: 403)"),
    ("pull", True, "ERROR : Attempt 2/3 failed with 1 errors and: corrupted on transfer: md5 hashes differ\n"
     "2026/12/01 15:06:06 ERROR : shards/model-00001-of-00002.safetensors.5fe6f9b2.partial: corrupted on transfer: "
     "md5 hashes differ src(S3 bucket models path llama) \"f29e\" vs dst(Local file system at /model-store) \"f073\"\n"
     "NOTICE: Failed to copy: corrupted on transfer: md5 hashes differ", "source-corrupted",
     "arrived corrupted (their MD5 is not the store's, on every retry): shards/model-00001-of-00002.safetensors;"),
    ("pull", True, "model-00001-of-00002.safetensors: multipart ETag of the copy 0f3e-3, the store's 9a1c-3\n"
     "llm-serving: corrupted (not the multipart ETag preview listed): model-00001-of-00002.safetensors",
     "source-corrupted", "is not the one preview listed, on every retry): model-00001-of-00002.safetensors;"),
    ("verify", False, "model.safetensors: sha256 of its 1000 bytes is 9f3c, the hub's 1a2b\n"
     "llm-serving: not the hub's files: model.safetensors(its 1000 bytes are not the hub's sha256, removed) "
     "config.json(no download record); run `pulumi up` again to re-pull them; if they fail again, check that "
     "http://hf-mirror:8080 serves them and their ETags unaltered", "source-corrupted",
     "not what the hub named: model.safetensors(its 1000 bytes are not the hub's sha256, removed) "
     "config.json(no download record); a file that differed"),
    ("pull", True, "directory not found: api error NoSuchBucket: The specified bucket does not exist",
     "source-not-found", "nothing in the store at the source"),
])
def test_the_failed_containers_last_line_is_the_verdict(container, init, message, reason, words):
    logs = {"m-pull-1-x": "(log unavailable: container \"verify\" in pod is waiting to start)"}
    status = diagnose_puller_failure(JOB, [failed_pod(container, message, init)], logs, [])
    assert status.reason == reason
    assert words in status.message
    assert message.splitlines()[-1] in status.details["logTail"]


def test_a_hub_failure_reads_as_before():
    job = {**JOB, "metadata": {**JOB["metadata"], "annotations": {"llm-serving.dev/model-source": "acme/x@main"}}}
    pod = {"metadata": {"name": "m-pull-1-x"}, "status": {"containerStatuses": [
        {"name": "puller", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}}
    status = diagnose_puller_failure(job, [pod], {"m-pull-1-x": "huggingface_hub.errors.RevisionNotFoundError: x"}, [])
    assert status.reason == "revision-not-found"


def test_a_hub_download_failure_is_read_from_the_init_container_s_termination_message():
    """The Hub puller's `hf` is an init container: the log read is the pod's default container's
    (`verify`, never started), so the verdict comes from `puller`'s termination message."""
    job = {**JOB, "metadata": {**JOB["metadata"], "annotations": {"llm-serving.dev/model-source": "acme/x@main"}}}
    message = "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error.\nInvalid rev id: nope"
    pod = {"metadata": {"name": "m-pull-1-x"}, "status": {"initContainerStatuses": [
        {"name": "puller", "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}}}]}}
    logs = {"m-pull-1-x": "(log unavailable: container \"verify\" in pod is waiting to start)"}
    status = diagnose_puller_failure(job, [pod], logs, [])
    assert status.reason == "revision-not-found"
    assert "Invalid rev id: nope" in status.details["logTail"]
