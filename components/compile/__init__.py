"""Pure compilers: typed config in, Kubernetes manifests (plain dicts, wire shape) out.

No Pulumi import and no I/O here, so every fact about the objects is testable without a
cluster or an engine.
"""

from .plan import compile_stack
from .stack import ModelManifests, compile_model

__all__ = ["ModelManifests", "compile_model", "compile_stack"]
