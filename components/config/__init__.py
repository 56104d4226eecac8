"""Stack configuration: the typed model, and reading it from Pulumi stack files."""

from .loader import ConfigError, load_stack_config, read_stack_file, stack_file
from .model import ModelConfig
from .platform import PlatformConfig
from .stack import StackConfig

__all__ = [
    "ConfigError", "ModelConfig", "PlatformConfig", "StackConfig",
    "load_stack_config", "read_stack_file", "stack_file",
]
