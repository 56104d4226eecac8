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

Refused (one line each, with the fix; ``model.stream_problems``, which reads the model's other
settings, and ``managed.py`` for the flags and variables): a multi-node group (its worker pods would look for
the config files at the leader's local folder), LoRA adapters (they are re-based onto the weights
path, which a streamed model does not have), NIM (the loader is vLLM's), a pinned object version
(``versionAt``: the streamer reads the objects as they are), weight-volume settings,
and the flags and variables the stream sets (this module's tables). Pure: no I/O.
"""

from __future__ import annotations

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
