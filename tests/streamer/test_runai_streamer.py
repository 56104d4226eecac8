"""`source.load: stream` proven against a real store (issue 23 item 5): the Run:ai model streamer
library (the one vLLM's `--load-format runai_streamer` loads with, at vLLM v0.11.0's floor 0.14.0,
installed from PyPI by scripts/testtools/streamer.sh) loads a small safetensors model from the
loopback S3 server the puller tests use (versitygw, built from the Go module proxy), with the
environment the compiler renders for the server container, making the calls vLLM makes
(tests/streamer/load_like_vllm.py). The tensors that arrive are the ones written.

Rewrites of the rendered container, and only these:
- the store's endpoint is the loopback server (``source.endpoint`` swapped past the validation
  that refuses loopback for a pod), so AWS_ENDPOINT_URL / RUNAI_STREAMER_S3_ENDPOINT carry it;
- VLLM_ASSETS_CACHE (the pod's emptyDir) and HOME (/tmp) are temp dirs;
- Secret references are resolved from the test's keys.
What is not run: vLLM itself (its wheel needs CUDA) — the calls it makes are in the probe script.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from hashlib import sha256
from pathlib import Path

import pytest

from components.compile import compile_stack
from components.config import load_stack_config
from components.config.streaming import CONFIG_MOUNT
from providers.transience import classify_crash
from testkit.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, tools_bin

ROOT = Path(__file__).resolve().parents[2]
STREAMER = ROOT / "scripts" / "testtools" / "streamer.sh"
PROBE = Path(__file__).with_name("load_like_vllm.py")
BUCKET, PREFIX = "models", "llama-tiny/"
KEYS = {("s3-keys", "AWS_ACCESS_KEY_ID"): ACCESS_KEY, ("s3-keys", "AWS_SECRET_ACCESS_KEY"): SECRET_KEY}


def safetensors(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """A safetensors file: 8-byte little-endian header length, the JSON header, the data."""
    header, data, offset = {"__metadata__": {"format": "pt"}}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data, offset = data + raw, offset + len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


TENSORS_1 = {
    "model.embed_tokens.weight": ("F32", [2, 3], floats(0.5, 1, 2, 3, 4, 5)),
    "model.norm.weight": ("F16", [4], struct.pack("<4e", 1, 0.25, -2, 8)),
}
# One large enough for several of the streamer's chunks and ranged reads.
TENSORS_2 = {"lm_head.weight": ("F32", [256, 1024], floats(*(float(i % 97) for i in range(256 * 1024))))}
FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}',
    "tokenizer.json": b'{"version": "1.0"}',
    "tokenizer.model": b"spm",
    "nested/generation_config.json": b"{}",
    "model-00001-of-00002.safetensors": safetensors(TENSORS_1),
    "model-00002-of-00002.safetensors": safetensors(TENSORS_2),
}


@pytest.fixture(scope="module")
def python() -> Path:
    """The streamer venv's interpreter (installed once, cached like the toolchain)."""
    subprocess.run(["bash", str(STREAMER)], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(["bash", str(STREAMER), "--print-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()) / "bin" / "python"


@pytest.fixture
def store(tmp_path):
    with S3Server(tmp_path / "s3", tools_bin()) as server:
        server.bucket(BUCKET)
        server.upload(BUCKET, PREFIX, FILES)
        yield server


def server_container(store: S3Server, **source) -> dict:
    config = load_stack_config({"models": [{"name": "tiny", "source": {
        "type": "s3", "load": "stream", "bucket": BUCKET, "prefix": PREFIX,
        "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "s3-keys"}, **source}}]})
    model = config.models[0]
    local = model.model_copy(update={"source": model.source.model_copy(update={"endpoint": store.url})})
    (server,) = [m for m in compile_stack(config.model_copy(update={"models": (local,)}))
                 if m["kind"] == "Deployment"]
    return server["spec"]["template"]["spec"]["containers"][0]


def load(python: Path, container: dict, tmp: Path, secrets=KEYS) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = secrets[(ref["name"], ref["key"])]
    assert env["VLLM_ASSETS_CACHE"] == CONFIG_MOUNT and env["HOME"] == "/tmp"
    (tmp / "model-config").mkdir(parents=True)
    env["VLLM_ASSETS_CACHE"], env["HOME"] = str(tmp / "model-config"), str(tmp)
    assert container["args"][1:3] == ["--load-format", "runai_streamer"]
    return subprocess.run([str(python), str(PROBE), container["args"][0]], env=env,
                          capture_output=True, text=True, timeout=300)


def expected(tensors: dict) -> dict:
    dtypes = {"F32": "float32", "F16": "float16"}
    return {name: {"dtype": dtypes[d], "shape": shape, "sha256": sha256(raw).hexdigest()}
            for name, (d, shape, raw) in tensors.items()}


def test_the_rendered_environment_streams_the_weights(python, store, tmp_path):
    result = load(python, server_container(store), tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    # Every tensor of every shard arrives, byte for byte, with its dtype and shape.
    got = {name: {k: t[k] for k in ("dtype", "shape", "sha256")} for name, t in loaded["tensors"].items()}
    assert got == {**expected(TENSORS_1), **expected(TENSORS_2)}
    assert loaded["tensors"]["model.embed_tokens.weight"]["first"] == 0.5
    assert sorted(loaded["files"]) == [f"s3://{BUCKET}/{PREFIX}model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    # The config and tokenizer files land in the writable folder; no weights are written there.
    assert loaded["copied"] == ["config.json", "nested/generation_config.json", "tokenizer.json", "tokenizer.model"]


def test_wrong_keys_fail_the_load_and_the_status_says_so(python, store, tmp_path):
    wrong = {**KEYS, ("s3-keys", "AWS_SECRET_ACCESS_KEY"): "not-the-secret"}
    result = load(python, server_container(store), tmp_path, secrets=wrong)
    assert result.returncode != 0
    verdict = classify_crash({"exitCode": 1}, result.stderr[-2048:])
    assert verdict.cause == "object-store-refused" and "source.credentials" in verdict.hint


def test_a_missing_bucket_fails_the_load_and_the_status_says_so(python, store, tmp_path):
    result = load(python, server_container(store, bucket="no-such-bucket"), tmp_path)
    assert result.returncode != 0 and "NoSuchBucket" in result.stderr
    verdict = classify_crash({"exitCode": 1}, result.stderr[-2048:])
    assert verdict.cause == "object-store-refused" and "source.bucket" in verdict.hint


def test_a_missing_prefix_copies_nothing_and_lists_no_weights(python, store, tmp_path):
    # The library does not fail here: vLLM then finds no config.json in its folder (and no
    # shards); tests/providers/test_stream_diagnosis.py has the verdict on vLLM's messages.
    result = load(python, server_container(store, prefix="no-such-model/"), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"files": [], "copied": [], "tensors": {}}


def test_a_buffer_smaller_than_a_tensor_fails_and_the_status_says_so(python, store, tmp_path):
    # streamMemoryLimit below the largest tensor (lm_head: 1 MiB here): the streamer refuses.
    result = load(python, server_container(store, streamMemoryLimit="64Ki"), tmp_path)
    assert result.returncode != 0
    verdict = classify_crash({"exitCode": 1}, result.stderr[-2048:])
    assert verdict.cause == "stream-buffer-too-small" and "source.streamMemoryLimit" in verdict.hint


def test_the_streamer_also_lists_safetensors_in_subfolders(python, store, tmp_path):
    # Why preview refuses a streamed prefix with shards below a subfolder (preflight/stream.py):
    # the streamer's listing is recursive, so vLLM would load them beside the model's own.
    store.upload(BUCKET, PREFIX + "original/", {"consolidated.safetensors": safetensors(TENSORS_1)})
    result = load(python, server_container(store), tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    files = json.loads(result.stdout.strip().splitlines()[-1])["files"]
    assert f"s3://{BUCKET}/{PREFIX}original/consolidated.safetensors" in files


def test_preview_lists_and_pins_the_real_store_and_refuses_a_nested_shard(store):
    from components.preflight import PreflightError, preflight_stack
    from components.preflight.s3 import ENDPOINT_ENV

    config = load_stack_config({"models": [{"name": "tiny", "source": {
        "type": "s3", "load": "stream", "bucket": BUCKET, "prefix": PREFIX,
        "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "s3-keys"}}}]})
    env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, ENDPOINT_ENV: store.url}
    report = preflight_stack(config, env=env)
    listed = {o.key: o.size for o in report.stack.models[0].source.manifest}
    assert listed == {key: len(data) for key, data in FILES.items()}
    assert any("nothing checks the bytes" in note for note in report.notes)
    store.upload(BUCKET, PREFIX + "original/", {"consolidated.safetensors": safetensors(TENSORS_1)})
    with pytest.raises(PreflightError) as caught:
        preflight_stack(config, env=env)
    assert "has safetensors in subfolders (original/consolidated.safetensors)" in str(caught.value)
