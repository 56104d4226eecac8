"""`source.load: stream` on an `s3` source: the vLLM server reads the weights from the store itself.

What vLLM v0.11.0 does with it (read from the v0.11.0 wheel's sources, not guessed):

- `vllm serve s3://<bucket>/<prefix> --load-format runai_streamer`. An `s3://` or `gs://` model
  (``vllm/transformers_utils/runai_utils.py`` ``is_runai_obj_uri``) makes ``ModelConfig`` copy
  the non-weight files (``*.json``, ``*.model``, ``*.py``, then everything but
  ``*.safetensors``/``*.bin``/``*.pt``/``*.pth``/``*.tensors``) into
  ``$VLLM_ASSETS_CACHE/model_streamer/<sha256(url)[:8]>`` (``vllm/config/model.py``
  ``maybe_pull_model_tokenizer_for_runai``): the pod needs a writable folder there. The weights
  are the ``*.safetensors`` objects under the prefix, streamed into memory, never written to disk
  (``vllm/model_executor/model_loader/runai_streamer_loader.py``); nothing else is loaded.
- Two S3 clients read the store: boto3 lists and copies the small files (the streamer's
  ``runai_model_streamer_s3`` package), and the streamer's C++ client reads the tensors. Both take
  the AWS variables (keys, region, ``AWS_ENDPOINT_URL``); vLLM copies ``AWS_ENDPOINT_URL`` into
  ``RUNAI_STREAMER_S3_ENDPOINT`` only when ``--model-loader-extra-config`` is given, so both are set.
- The image: vLLM's Dockerfile at v0.11.0 installs ``runai-model-streamer`` with its ``[s3]``
  extra (unpinned) in the ``vllm-openai-base`` stage — a third party's reading of that tag and vLLM
  PR 26464 (adding ``[gcs]`` to the same line after v0.11.0) say so; the stored repository has no
  v0.11.0 Dockerfile to read. The wheel's ``runai`` extra asks for ``runai-model-streamer>=0.14.0``;
  the tests run 0.14.0 (tests/streamer).

Refused here (one line each, with the fix): a multi-node group (its worker pods would look for
the config files at the leader's local folder), LoRA adapters (they are re-based onto the weights
path, which a streamed model does not have), NIM (the loader is vLLM's), a pinned object version
(``versionAt``: the streamer reads the objects as they are), weight-volume settings,
and the flags and variables the stream sets. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from . import values
from .values import Problem

LOAD_FORMAT = "runai_streamer"
# Where vLLM copies the config and tokenizer files (VLLM_ASSETS_CACHE): an emptyDir of this size.
CONFIG_MOUNT = "/model-config"
CONFIG_SIZE_LIMIT = "2Gi"

# Flags a streamed server gets from the program (MANAGED_VLLM_FLAGS has the others).
STREAM_FLAGS = {
    "--load-format": "set by source.load: stream (runai_streamer); remove it",
    "--model-loader-extra-config": "the stream is tuned by source.streamMemoryLimit and env "
                                   "RUNAI_STREAMER_CONCURRENCY; remove it",
}
_STREAM_ENV_FIX = "set from the s3 source for the stream (endpoint, region, credentials Secret); remove it"
# Server variables a streamed server gets from the program.
STREAM_ENV = {
    "AWS_ACCESS_KEY_ID": "read from source.credentials; remove it",
    "AWS_SECRET_ACCESS_KEY": "read from source.credentials; remove it",
    "AWS_REGION": _STREAM_ENV_FIX,
    "AWS_DEFAULT_REGION": _STREAM_ENV_FIX,
    "AWS_ENDPOINT_URL": _STREAM_ENV_FIX,
    "AWS_EC2_METADATA_DISABLED": _STREAM_ENV_FIX,
    "RUNAI_STREAMER_S3_ENDPOINT": _STREAM_ENV_FIX,
    "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": _STREAM_ENV_FIX,
    "RUNAI_STREAMER_MEMORY_LIMIT": "set source.streamMemoryLimit",
    "VLLM_ASSETS_CACHE": "the stream's writable folder for the config files; remove it",
}


def streams(model: Any) -> bool:
    """Whether a model's server streams its weights from the store (no volume, no puller, no gate)."""
    return bool(getattr(model.source, "streams", False))


def stream_problems(model: Any) -> list[Problem]:
    """What a streamed `s3` source makes wrong in its model (paths relative to the model)."""
    source, problems = model.source, []
    if not source.streams:
        if "stream_memory_limit" in source.model_fields_set:
            problems.append(Problem("source.streamMemoryLimit", "applies to load: stream only; remove it"))
        return problems
    if model.engine != "vllm":
        problems.append(Problem("source.load", "stream is vLLM's loader (--load-format runai_streamer); "
                                "NIM reads its weights from a volume: use load: copy"))
    if model.multi_node is not None:
        problems.append(Problem("multiNode", "vLLM 0.11 copies the config files into a folder of the pod that "
                                "starts the server only, and a group of pods serving from it is not established; "
                                "remove multiNode or use source.load: copy"))
    if model.lora.enabled:
        problems.append(Problem("lora.enabled", "LoRA adapters are re-based onto the weights path, and a streamed "
                                "model has none; use source.load: copy, or turn lora off"))
    if source.version_at:
        problems.append(Problem("source.versionAt", "a streamed server reads the objects as they are when it starts "
                                "(vLLM 0.11 hands the streamer an s3:// path, never a version); use source.load: copy "
                                "to serve the bucket as it was at versionAt, or remove versionAt"))
    for key, field in (("size", "size"), ("storageClassName", "storage_class_name"), ("accessMode", "access_mode")):
        if field in model.weights.model_fields_set:
            problems.append(Problem(f"weights.{key}", f"a streamed model has no weights volume; remove weights.{key}"))
    limit, memory = values.parse_quantity(source.stream_memory_limit), values.parse_quantity(model.resources.memory)
    if limit * 2 > memory:
        problems.append(Problem("source.streamMemoryLimit", f"{source.stream_memory_limit} is more than half of "
                                f"resources.memory ({model.resources.memory}), which also holds the server; "
                                "lower it or raise resources.memory"))
    return problems
