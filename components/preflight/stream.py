"""Preview's checks of a streamed s3 source (``source.load: stream``), on the listing s3.py reads.

Nothing copies or verifies the objects before the server loads them, so preview checks what the
server's loader will find, with the facts read in vLLM v0.11.0 and the streamer (0.14.0) it uses:

- vLLM reads ``config.json`` from the non-weight files it copies from the prefix, and loads only
  ``*.safetensors`` (``runai_streamer_loader.py``): both must be at the prefix's top.
- The streamer lists the prefix recursively and matches ``*.safetensors`` on the whole key
  (``runai_model_streamer_s3`` ``list_files``/``fnmatch``): a shard in a subfolder
  (``original/...``) would be loaded beside the model's own.
- That listing is one ListObjectsV2 call (no continuation): past 1000 keys it sees only the first
  page.
- The non-weight files go into the server's config folder (``streaming.CONFIG_SIZE_LIMIT``).

There is no size check against ``weights.size``: a streamed model has no volume. Pure.
"""

from __future__ import annotations

from fnmatch import fnmatch

from ..config import values
from ..config.sources import S3Object, S3Source
from ..config.streaming import CONFIG_SIZE_LIMIT
from .decide import Problem, human

# One ListObjectsV2 page: what the streamer's listing sees.
STREAMER_LIST_LIMIT = 1000
# What vLLM v0.11.0 does not copy into its config folder (ModelConfig.maybe_pull_model_tokenizer_for_runai).
WEIGHT_PATTERNS = ("*.pt", "*.safetensors", "*.bin", "*.tensors", "*.pth")


def decide_stream(source: S3Source, objects: tuple[S3Object, ...]) -> tuple[list[Problem], list[str]]:
    """(errors, notes) of a streamed source's listing (keys relative to the prefix)."""
    errors: list[Problem] = []
    where = source.location
    keys = {o.key for o in objects}
    shards = [o for o in objects if "/" not in o.key and o.key.endswith(".safetensors")]
    nested = sorted(o.key for o in objects if "/" in o.key and fnmatch(o.key, "*.safetensors"))
    config = [o for o in objects if not any(fnmatch(o.key, p) for p in WEIGHT_PATTERNS)]
    if len(objects) > STREAMER_LIST_LIMIT:
        errors.append(Problem("source.prefix", (
            f"{where} holds {len(objects)} objects; the streamer lists only the first {STREAMER_LIST_LIMIT} "
            "of a prefix; point source.prefix at one model's folder, or use source.load: copy")))
    if "config.json" not in keys:
        errors.append(Problem("source.prefix", (
            f"no config.json at the top of {where}: the streaming server reads it there; point source.prefix "
            "at the model's folder")))
    if not shards:
        errors.append(Problem("source.prefix", (
            f"no *.safetensors at the top of {where}: the streaming loader loads only safetensors; convert "
            "the weights, or use source.load: copy")))
    if nested:
        shown = ", ".join(nested[:5]) + (f" (+{len(nested) - 5} more)" if len(nested) > 5 else "")
        errors.append(Problem("source.prefix", (
            f"{where} has safetensors in subfolders ({shown}): the streamer would load them beside the "
            "model's own; move them out of the prefix, or use source.load: copy")))
    config_bytes = sum(o.size for o in config)
    if config_bytes > values.parse_quantity(CONFIG_SIZE_LIMIT):
        errors.append(Problem("source.prefix", (
            f"the files of {where} that are not weights total {human(config_bytes)}, more than the server's "
            f"{CONFIG_SIZE_LIMIT} config folder they are copied to; move them out of the prefix, or use "
            "source.load: copy")))
    total = sum(o.size for o in shards)
    notes = [f"{where}: streamed by the server at every start ({len(shards)} safetensors, {human(total)}); "
             "nothing checks the bytes before it loads them (source.load: stream)"]
    return errors, notes
