"""The server side of `source.load: stream` (an `s3` source read by vLLM itself, no volume).

The server runs ``vllm serve s3://<bucket>/<prefix> --load-format runai_streamer`` with the store's
settings in the AWS variables both of vLLM's S3 clients read (boto3 for the listing and the small
files, the Run:ai streamer's C++ client for the tensors: components/config/streaming.py has what
was read in vLLM v0.11.0), the keys from the same Secret the puller would use (never a plain
value), and an emptyDir for the config and tokenizer files vLLM copies before loading. The
streamer's CPU buffer is bounded (``RUNAI_STREAMER_MEMORY_LIMIT``): its own default is 20 GB.

tests/streamer runs the streamer library against the loopback S3 server with exactly this
environment. Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from ..config import values
from ..config.model import ModelConfig
from ..config.sources import S3Source
from ..config.streaming import CONFIG_MOUNT, CONFIG_SIZE_LIMIT, LOAD_FORMAT

CONFIG_VOLUME = "model-config"


def model_uri(source: S3Source) -> str:
    """What vLLM is given as the model: ``s3://<bucket>/<prefix>`` (the endpoint is in the environment)."""
    return f"s3://{source.bucket}/{source.prefix}"


def server_args(model: ModelConfig) -> list[str]:
    """The model and the loader: the start of `vllm serve`'s arguments."""
    return [model_uri(model.source), "--load-format", LOAD_FORMAT]


def store_env(source: S3Source) -> list[dict]:
    """The store's endpoint, region and keys, as both S3 clients of the stream read them."""
    env = [
        {"name": "AWS_REGION", "value": source.region},
        {"name": "AWS_DEFAULT_REGION", "value": source.region},
    ]
    if source.endpoint:
        env += [
            {"name": "AWS_ENDPOINT_URL", "value": source.endpoint},
            # vLLM copies AWS_ENDPOINT_URL here only with --model-loader-extra-config: set it ourselves.
            {"name": "RUNAI_STREAMER_S3_ENDPOINT", "value": source.endpoint},
            # Path-style requests (`<endpoint>/<bucket>/<key>`): what MinIO, Ceph, versitygw and GCS's
            # interoperability API take without a wildcard DNS name per bucket.
            {"name": "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "value": "0"},
        ]
    if source.credentials:
        creds = source.credentials
        for name, key in (("AWS_ACCESS_KEY_ID", creds.access_key_id_key),
                          ("AWS_SECRET_ACCESS_KEY", creds.secret_access_key_key)):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": creds.secret, "key": key}}})
        # Keys are given: no probe of an instance-metadata endpoint for a role.
        env.append({"name": "AWS_EC2_METADATA_DISABLED", "value": "true"})
    return env


def server_env(model: ModelConfig) -> list[dict]:
    source: S3Source = model.source  # type: ignore[assignment]
    limit = int(values.parse_quantity(source.stream_memory_limit))
    return [
        # vLLM copies config.json, the tokenizer and other small files to
        # $VLLM_ASSETS_CACHE/model_streamer/<hash> before loading.
        {"name": "VLLM_ASSETS_CACHE", "value": CONFIG_MOUNT},
        {"name": "RUNAI_STREAMER_MEMORY_LIMIT", "value": str(limit)},
        *store_env(source),
    ]


def config_volume() -> tuple[dict, dict]:
    """The writable folder for the files vLLM copies from the store: (volume, mount)."""
    return ({"name": CONFIG_VOLUME, "emptyDir": {"sizeLimit": CONFIG_SIZE_LIMIT}},
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_MOUNT})
