"""Pulumi ComponentResources: the platform, the models and the router, each declaring its plan
through ``declare_plan`` (the one loop). Pulumi is imported in ``components`` here, in ``program.py``
and in ``config/loader.py``'s entry for the program only (docs/architecture.md; a test holds it)."""

from .model import Deploy, VllmModel
from .nim import NimModel
from .platform import Platform
from .router import RequestRouter

__all__ = ["Deploy", "NimModel", "Platform", "RequestRouter", "VllmModel"]
