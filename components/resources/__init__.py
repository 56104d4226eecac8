"""Pulumi ComponentResources (the only part of ``components`` that imports Pulumi)."""

from .model import Deploy, VllmModel
from .platform import Platform

__all__ = ["Deploy", "Platform", "VllmModel"]
