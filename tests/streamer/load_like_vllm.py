"""Run inside the streamer's venv (scripts/testtools/streamer.sh): load a model from the object
store the way vLLM v0.11.0 does with `--load-format runai_streamer`, using the Run:ai streamer
library itself, and print what was loaded as one JSON line.

The calls and their arguments are the ones vLLM v0.11.0 makes (read from its wheel):
- ``ModelConfig.maybe_pull_model_tokenizer_for_runai``: a folder
  ``$VLLM_ASSETS_CACHE/model_streamer/<sha256(url)[:8]>``, ``pull_files(url, dir,
  allow_pattern=["*.model", "*.py", "*.json"])``, then (tokenizer == model)
  ``pull_files(url, dir, ignore_pattern=[<weights>])``;
- ``RunaiModelStreamerLoader``: ``list_safetensors(url)``, then
  ``SafetensorsStreamer().stream_files(files)`` and ``get_tensors()``.

Arguments: the model URI. The environment is the server container's, as the test resolved it.
No import of the project: this runs with the streamer venv's Python only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
from runai_model_streamer import SafetensorsStreamer, list_safetensors, pull_files

WEIGHT_PATTERNS = ["*.pt", "*.safetensors", "*.bin", "*.tensors", "*.pth"]


def main(url: str) -> None:
    folder = os.path.join(os.environ["VLLM_ASSETS_CACHE"], "model_streamer",
                          hashlib.sha256(url.encode()).hexdigest()[:8])
    os.makedirs(folder)
    prefix = url if url.endswith("/") else url + "/"
    pull_files(prefix, folder, ["*.model", "*.py", "*.json"], None)
    pull_files(prefix, folder, None, WEIGHT_PATTERNS)
    files = list_safetensors(url)
    tensors = {}
    if not files:  # vLLM raises its own "Cannot find any safetensors model weights" here
        print(json.dumps({"files": files, "copied": os.listdir(folder), "tensors": tensors}))
        return
    with SafetensorsStreamer() as streamer:
        streamer.stream_files(files)
        for name, tensor in streamer.get_tensors():
            flat = tensor.contiguous().view(-1)
            tensors[name] = {"dtype": str(tensor.dtype).replace("torch.", ""), "shape": list(tensor.shape),
                             "sha256": hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest(),
                             "first": float(flat[0]) if flat.numel() else None}
    copied = sorted(os.path.relpath(os.path.join(root, f), folder)
                    for root, _, names in os.walk(folder) for f in names)
    print(json.dumps({"files": files, "copied": copied, "tensors": tensors}))


if __name__ == "__main__":
    main(sys.argv[1])
