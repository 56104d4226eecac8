"""Preview of a streamed s3 source (source.load: stream): the listing is still read and pinned,
there is no volume to size, and what the server's loader would trip on is refused at preview with
the key to change (components/preflight/stream.py has the facts each check rests on)."""

from __future__ import annotations

import pytest

from components.config import load_stack_config
from components.config.sources import S3Object
from components.preflight import PreflightError, preflight_stack
from components.preflight.s3 import Listing

GiB = 1 << 30
MODEL = (S3Object(key="config.json", size=700, etag="a" * 32),
         S3Object(key="tokenizer.json", size=9 << 20, etag="c" * 32),
         S3Object(key="model-00001-of-00002.safetensors", size=40 * GiB, etag="b" * 32 + "-8"),
         S3Object(key="model-00002-of-00002.safetensors", size=30 * GiB, etag="d" * 32 + "-6"))


def stack(pin: bool = True):
    return load_stack_config({"platform": {"pin": pin}, "models": [{"name": "m", "source": {
        "type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/"}}]})


def preview(objects, pin: bool = True):
    return preflight_stack(stack(pin), env={}, list_objects=lambda *a, **k: Listing(tuple(objects)))


def test_a_model_bigger_than_any_default_volume_streams_and_is_pinned():
    report = preview(MODEL)  # 70 GiB: the default weights.size (50Gi) is no volume here
    assert report.stack.models[0].source.manifest == MODEL
    assert any("streamed by the server at every start (2 safetensors, 70.0 GiB)" in n
               and "nothing checks the bytes" in n for n in report.notes)
    assert preview(MODEL, pin=False).stack.models[0].source.manifest is None


@pytest.mark.parametrize("objects, line", [
    ([o for o in MODEL if o.key != "config.json"], "models.0.source.prefix: no config.json at the top of s3://models/llama/"),
    ([o for o in MODEL if not o.key.endswith(".safetensors")] + [S3Object(key="pytorch_model.bin", size=9, etag="")],
     "models.0.source.prefix: no *.safetensors at the top of s3://models/llama/: the streaming loader loads only "
     "safetensors"),
    ([*MODEL, S3Object(key="original/consolidated.safetensors", size=9, etag="")],
     "models.0.source.prefix: s3://models/llama/ has safetensors in subfolders (original/consolidated.safetensors)"),
    ([*MODEL, *(S3Object(key=f"extra/{i}.json", size=1, etag="") for i in range(1000))],
     "models.0.source.prefix: s3://models/llama/ holds 1004 objects; the streamer lists only the first 1000"),
    ([*MODEL, S3Object(key="model.gguf", size=3 * GiB, etag="")],
     "models.0.source.prefix: the files of s3://models/llama/ that are not weights total 3.0 GiB, more than "
     "the server's 2Gi config folder"),
])
def test_what_the_loader_would_trip_on_is_refused_at_preview(objects, line):
    with pytest.raises(PreflightError) as caught:
        preview(objects)
    assert line in str(caught.value)
