"""The `pvc` source's verify step (issue 23): the compiled Job's exact `verify` container, run on a
folder standing for the existing claim (mounted at /model-store with its subPath). Same rewrites as
test_s3_puller.py: the mount is a temp dir, `sh` is busybox's when installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_s3_puller import run

from components.compile import common, weights
from components.config import load_stack_config


@pytest.fixture
def claim(tmp_path, monkeypatch) -> Path:
    """The claim's subPath folder, which the pod sees at the weights mount."""
    folder = tmp_path / "claim" / "llama"
    folder.mkdir(parents=True)
    monkeypatch.setattr(common, "WEIGHTS_MOUNT", str(folder))
    return folder


def verify(claim: Path, tmp_path: Path, **source):
    config = load_stack_config({"models": [{"name": "tiny", "source": {
        "type": "pvc", "claimName": "shared-weights", "subPath": "llama", **source}}]})
    job = weights.compile_puller_job(config.models[0], config.platform)
    spec = job["spec"]["template"]["spec"]
    assert "initContainers" not in spec  # no pull
    (container,) = spec["containers"]
    assert container["volumeMounts"][0] == {"name": "weights", "mountPath": str(claim), "readOnly": True,
                                            "subPath": "llama"}
    tmp = tmp_path / "pod-tmp"
    tmp.mkdir(exist_ok=True)
    return run(container, Path("/nonexistent"), {}, tmp)


def write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


INDEX = b'{"metadata": {}, "weight_map": {"a.w": "model-00001-of-00002.safetensors", ' \
        b'"b.w": "model-00002-of-00002.safetensors", "c.w": "model-00002-of-00002.safetensors"}}'


def test_complete_sharded_model_passes(claim, tmp_path):
    write(claim, {"config.json": b"{}", "model.safetensors.index.json": INDEX,
                  "model-00001-of-00002.safetensors": b"x", "model-00002-of-00002.safetensors": b"y"})
    result = verify(claim, tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_shard_named_by_the_index_is_missing(claim, tmp_path):
    write(claim, {"config.json": b"{}", "model.safetensors.index.json": INDEX,
                  "model-00001-of-00002.safetensors": b"x"})
    result = verify(claim, tmp_path)
    assert result.returncode == 43
    assert result.stderr.strip().splitlines()[-1] == "llm-serving: missing: model-00002-of-00002.safetensors"


def test_expected_files_and_at_least_one_safetensors(claim, tmp_path):
    write(claim, {"config.json": b"{}"})
    result = verify(claim, tmp_path, expectFiles=["config.json", "tokenizer.json"])
    assert result.returncode == 43
    assert "llm-serving: missing: tokenizer.json *.safetensors" in result.stderr
    write(claim, {"tokenizer.json": b"{}", "model.safetensors": b"w"})
    assert verify(claim, tmp_path, expectFiles=["config.json", "tokenizer.json"]).returncode == 0


def test_an_empty_or_absent_folder_is_refused(claim, tmp_path):
    claim.rmdir()
    result = verify(claim, tmp_path)
    assert result.returncode == 43
    assert "llm-serving: missing: the weights folder" in result.stderr
