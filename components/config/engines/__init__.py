"""The serving engines, one module each (``vllm.py``, ``nim.py``; the interface: ``base.py``),
keyed by the stack file's `engine` value. Code that differs per engine asks the model's variant
(``engine_of``) instead of comparing the name (tests/test_variant_switches.py counts such
comparisons outside the variants: none). What each engine renders is its server module in
``components/compile/engines/``, keyed the same way."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from .base import Engine
from .nim import NIM
from .vllm import VLLM

ENGINES: MappingProxyType[str, Engine] = MappingProxyType({engine.name: engine for engine in (VLLM, NIM)})


def check_name(name: str) -> str:
    """The `engine` value, if an engine of this program has it (a ``ValueError`` with the fix otherwise)."""
    if name == "generic":
        raise ValueError(
            "engine 'generic' is not supported on Kubernetes; use 'vllm' (open models) or 'nim'"
        )
    if name not in ENGINES:
        raise ValueError(f"engine '{name}' is unknown; use {' or '.join(repr(known) for known in ENGINES)}")
    return name


def engine_of(model: Any) -> Engine:
    """The variant of a model (a ``ModelConfig``, or anything with a validated `engine`)."""
    return ENGINES[model.engine]
