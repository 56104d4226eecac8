"""Pulumi ComponentResources (the only part of ``components`` that imports Pulumi)."""

from .model import Deploy, VllmModel
from .nim import NimModel
from .platform import Platform
from .router import RequestRouter

__all__ = ["Deploy", "NimModel", "Platform", "RequestRouter", "VllmModel"]
