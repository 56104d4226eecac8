"""NimModel: one NVIDIA NIM model server, on one of two paths (``path`` in the model's config).

raw: the vLLM path's objects and order with NIM's image, environment, health path and uid/gid.
operator: custom resources for the k8s-nim-operator, which renders the Deployment and Service,
after a check that fails early, with install instructions, on a cluster without the operator's
CRDs (only operator-path models declare it, so vLLM and raw-path stacks never need the CRDs).
Both plans come from ``components.compile.plan`` and are declared by ``ModelServer``.
"""

from __future__ import annotations

from typing import Optional

import pulumi

from ..compile.plan import ModelPlan
from ..config.engines import engine_of
from ..config.engines.nim import NIM
from .model import Deploy, ModelServer


class NimModel(ModelServer):
    def __init__(self, plan: ModelPlan, deploy: Deploy, opts: Optional[pulumi.ResourceOptions] = None):
        if engine_of(plan.model) is not NIM:
            raise ValueError(f"model '{plan.name}' has engine '{plan.model.engine}'; NimModel serves NIM only")
        super().__init__("llm-serving:index:NimModel", plan, deploy, opts)
