"""llm-serving as a library: vLLM and NVIDIA NIM model servers, a request router and its OpenAI
gateway, declared from your own Pulumi program (docs/library.md).

    import llm_serving as llm

    serving = llm.ModelServing("team-a", llm.ModelServingArgs(
        namespace=namespace.metadata.name,
        models=[llm.Model("chat", llm.HubSource("Qwen/Qwen2.5-0.5B-Instruct", revision="<commit>"))],
    ), opts=pulumi.ResourceOptions(providers=[cluster]))

The arguments are the stack config's sections (llm_serving/sections.py, generated from
components.config): every stack-file setting is a typed field, with the config's defaults,
checks and messages.
"""

from . import args as _args
from .args import Engine, ModelArgs, ModelServingArgs, RouterArgs
from .sections import *  # noqa: F403 (the generated sections: their __all__)
from .sections import __all__ as _sections
from .serving import ModelServing, stack_config_of

# The generated S3Source with the earlier `credentials_secret` argument (deprecated) beside it.
S3Source = _args.S3Source

__version__ = "0.1.0"

__all__ = ["Engine", "ModelArgs", "ModelServing", "ModelServingArgs", "RouterArgs", "S3Source", "__version__",
           "stack_config_of"]
__all__ += [name for name in _sections if name not in __all__]
