"""What the puller tests and benchmarks add to the Hub stand-in (scripts/localmodel/hub_server.py,
which serves them): the puller's own `hf` client, and generated model files (a tiny one, large
shards).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from functools import cache
from pathlib import Path

CHUNK = 1 << 20
HUB_CLIENT = Path(__file__).resolve().parents[1] / "scripts" / "testtools" / "hub-client.sh"


@cache
def hub_cli() -> Path:
    """The puller's `hf`: huggingface_hub 0.35.3 with hf_transfer and hf_xet, the line of the
    pinned vLLM image, in a cached venv of its own (created by scripts/testtools/hub-client.sh
    when missing)."""
    subprocess.run(["bash", str(HUB_CLIENT)], check=True, stdout=subprocess.DEVNULL)
    out = subprocess.run(["bash", str(HUB_CLIENT), "--print-dir"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()) / "bin" / "hf"


# -- a tiny model ------------------------------------------------------------------------------

def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """The safetensors format by hand: u64-LE header length, JSON header, then the raw data.

    ``tensors`` maps a name to (dtype such as "F32", shape, raw little-endian bytes).
    """
    header: dict = {"__metadata__": {"format": "pt"}}
    offset, data = 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data.append(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes with spaces
    return len(encoded).to_bytes(8, "little") + encoded + b"".join(data)


def read_safetensors_header(blob: bytes) -> dict:
    length = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8:8 + length])


def tiny_model_files(weight_bytes: int = 256 * 1024, seed: int = 0) -> dict[str, bytes]:
    """config, tokenizer and one safetensors file: what a vLLM server reads from the volume.

    Also a duplicate ``original/`` checkpoint and a ``.bin`` copy, which the default
    ignore patterns must skip.
    """
    rows = max(1, weight_bytes // (4 * 64))
    raw = hashlib.shake_256(f"weights-{seed}".encode()).digest(rows * 64 * 4)
    weights = safetensors_bytes({"model.embed_tokens.weight": ("F32", [rows, 64], raw)})
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "vocab_size": rows, "num_hidden_layers": 0, "torch_dtype": "float32"}
    tokenizer = {"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}
    return {
        "config.json": json.dumps(config).encode(),
        "generation_config.json": b'{"do_sample": false}',
        "tokenizer.json": json.dumps(tokenizer).encode(),
        "tokenizer_config.json": b'{"model_max_length": 2048}',
        "model.safetensors": weights,
        "pytorch_model.bin": raw[:4096],
        "original/consolidated.00.pth": raw[:4096],
        "README.md": b"# tiny\n",
    }


def write_model_shards(directory: Path, total_bytes: int, shards: int) -> dict[str, Path]:
    """Large generated safetensors shards on disk (for the benchmark), plus a config."""
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    per_shard = total_bytes // shards
    block = os.urandom(CHUNK)
    for index in range(shards):
        name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        path = directory / name
        rows = per_shard // (4 * 1024)
        header = safetensors_bytes({f"layer.{index}.weight": ("F32", [rows, 1024], b"")})
        # Rewrite the header with the real data offsets, then stream the data without holding it.
        length = int.from_bytes(header[:8], "little")
        meta = json.loads(header[8:8 + length])
        meta[f"layer.{index}.weight"]["data_offsets"] = [0, rows * 4096]
        encoded = json.dumps(meta, separators=(",", ":")).encode()
        encoded += b" " * (-len(encoded) % 8)
        with path.open("wb") as handle:
            handle.write(len(encoded).to_bytes(8, "little") + encoded)
            remaining = rows * 4096
            while remaining:
                piece = block[:min(len(block), remaining)]
                handle.write(piece)
                remaining -= len(piece)
        files[name] = path
    config = directory / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "shards": shards}))
    files["config.json"] = config
    return files
