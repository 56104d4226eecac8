"""A model's LoRA settings: vLLM's `--enable-lora` flags and the adapters served by name.

The adapters are downloaded by the server pod's init container and found by vLLM's filesystem
resolver (see components/compile/server.py); here: what a valid setting is.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from . import values
from .types import PositiveQuantity, Strict
from .values import Problem
from .vllm_release import ALL_LORA_RANKS, RELEASES

# The ranks vLLM 0.11.0 accepts for --max-lora-rank (vllm/config/lora.py of its wheel); each
# line's own are in vllm_release.py (0.32 adds 1), checked per line by vllm_checks.py.
VLLM_MAX_LORA_RANKS = RELEASES["0.11"].lora_ranks
# An adapter's name is the directory vLLM's filesystem resolver looks it up in and the `model` a
# client requests: one path segment, no dot-only names that would leave the cache directory.
_ADAPTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class LoraAdapter(Strict):
    """One LoRA adapter from the Hugging Face hub, served under its own name."""

    name: str = Field(
        description="Name clients request as `model` (the adapter's directory in the resolver cache).",
    )
    repo: Annotated[str, AfterValidator(values.check_hf_repo)] = Field(
        description="Hugging Face repo id of the adapter, `owner/name` (it must hold adapter_config.json).",
    )
    revision: Annotated[str, AfterValidator(values.check_revision)] = Field(
        "main", description="Branch, tag or full 40-hex commit; pinned at preview like `source.revision`.",
    )

    @field_validator("name")
    @classmethod
    def _path_segment(cls, name: str) -> str:
        if not _ADAPTER_NAME.match(name):
            raise ValueError(f"'{name}' is not an adapter name; use letters, digits, '.', '_' or '-' "
                             "(at most 63 characters, starting with a letter or digit), e.g. 'sql-lora'")
        return name

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.revision}"


class Lora(Strict):
    enabled: bool = Field(False, description="Serve LoRA adapters.")
    max_loras: int = Field(4, gt=0, description="`--max-loras`: adapters resident at once.")
    max_lora_rank: int = Field(
        16, description="`--max-lora-rank`: one of 8, 16, 32, 64, 128, 256, 320, 512 (vLLM 0.11's "
        "ranks; 0.32 also takes 1); at least the largest rank of the adapters served.",
    )
    cache_size_limit: PositiveQuantity = Field("10Gi", description="Size limit of the adapter cache volume.")
    adapters: tuple[LoraAdapter, ...] = Field(
        (), description="Adapters downloaded into the adapter cache when a server pod starts (by an "
        "init container, so a change re-downloads the adapters, never the base weights) and served "
        "by name through vLLM's filesystem resolver. Each adapter's revision is pinned at preview.",
    )

    @field_validator("max_lora_rank")
    @classmethod
    def _vllm_rank(cls, rank: int) -> int:
        # Ranks no line accepts; a rank only another line accepts is the line's check (vllm_checks).
        if rank not in ALL_LORA_RANKS:
            allowed = ", ".join(map(str, VLLM_MAX_LORA_RANKS))
            bigger = [r for r in VLLM_MAX_LORA_RANKS if r >= rank]
            hint = f"; use {bigger[0]}" if bigger else ""
            raise ValueError(f"vLLM accepts only {allowed} (0.32 also 1){hint}")
        return rank

    @model_validator(mode="after")
    def _adapters(self) -> Lora:
        if self.adapters and not self.enabled:
            raise values.Problems([Problem("enabled", "adapters are listed but LoRA is off; set lora.enabled: true "
                                           "or remove lora.adapters")])
        seen: set[str] = set()
        for index, adapter in enumerate(self.adapters):
            if adapter.name in seen:
                raise values.Problems([Problem(f"adapters.{index}.name", f"'{adapter.name}' is listed twice; "
                                               "adapter names must be unique")])
            seen.add(adapter.name)
        return self
