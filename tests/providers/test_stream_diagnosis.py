"""A streamed model's load failure explained (source.load: stream): the server's crash log names
the store's refusal or an empty prefix, and the status says which setting to fix. The boto3 texts
are the ones tests/streamer gets from the real library against the loopback store; the vLLM
texts are vLLM v0.11.0's (vllm/transformers_utils/config.py get_config,
vllm/model_executor/model_loader/runai_streamer_loader.py)."""

from __future__ import annotations

import pytest

from providers.projection import diagnose_crash
from providers.transience import DEFINITIVE, TRANSIENT, classify_crash

REFUSED = ("botocore.exceptions.ClientError: An error occurred (SignatureDoesNotMatch) when calling the "
           "ListObjectsV2 operation: The request signature we calculated does not match the signature you provided.")
NO_BUCKET = ("botocore.errorfactory.NoSuchBucket: An error occurred (NoSuchBucket) when calling the "
             "ListObjectsV2 operation: The specified bucket does not exist.")
UNREACHABLE = ('botocore.exceptions.EndpointConnectionError: Could not connect to the endpoint URL: '
               '"http://minio.storage.svc:9000/models?list-type=2&prefix=llama%2F&encoding-type=url"')
NO_CONFIG = ("ValueError: Invalid repository ID or local directory specified: "
             "'/model-config/model_streamer/3f2a9c1d'.\nPlease verify the following requirements:")
NO_SHARDS = "RuntimeError: Cannot find any safetensors model weights with `s3://models/llama/`"
SMALL_BUFFER = ("runai_model_streamer.file_streamer.requests_iterator.RunaiStreamerMemoryLimitException: "
                "Memory limit supplied: 4294967296 cannot be smaller than: 4202692608")


@pytest.mark.parametrize("log, kind, cause, setting", [
    (REFUSED, DEFINITIVE, "object-store-refused", "source.credentials"),
    (NO_BUCKET, DEFINITIVE, "object-store-refused", "source.bucket"),
    (UNREACHABLE, TRANSIENT, "object-store-unreachable", "source.endpoint"),
    (NO_CONFIG, DEFINITIVE, "object-store-empty", "source.prefix"),
    (NO_SHARDS, DEFINITIVE, "object-store-empty", "source.prefix"),
    (SMALL_BUFFER, DEFINITIVE, "stream-buffer-too-small", "source.streamMemoryLimit"),
])
def test_a_streamed_load_failure_names_the_setting(log, kind, cause, setting):
    verdict = classify_crash({"exitCode": 1}, f"INFO starting\n{log}\n")
    assert (verdict.kind, verdict.cause) == (kind, cause) and setting in verdict.hint


def test_a_copied_model_without_config_still_points_at_the_puller():
    # The same vLLM message on the weights volume is the copy's failure, not the store's.
    log = "ValueError: Invalid repository ID or local directory specified: '/model-store'."
    assert classify_crash({"exitCode": 1}, log).cause == "weights-missing"


def test_the_status_message_carries_the_fix():
    pod = {"metadata": {"name": "m-abc"}, "status": {}}
    status = diagnose_crash(pod, "server", {"exitCode": 1}, {"m-abc": NO_BUCKET}, [])
    assert status.reason == "object-store-refused"
    assert "object store" in status.message and "source.bucket" in status.message
