"""llm-serving as a library: vLLM and NVIDIA NIM model servers, a request router and its OpenAI
gateway, declared from your own Pulumi program (docs/library.md).

    import llm_serving as llm

    serving = llm.ModelServing("team-a", llm.ModelServingArgs(
        namespace="team-a",
        models=[llm.ModelArgs("chat", llm.HubSource("Qwen/Qwen2.5-0.5B-Instruct", revision="<commit>"))],
        router=llm.RouterArgs(),
    ), opts=pulumi.ResourceOptions(providers=[cluster], depends_on=[namespace]))
"""

from .args import Engine, HubSource, ModelArgs, ModelServingArgs, Resources, RouterArgs, S3Source, VolumeSource
from .serving import ModelServing, stack_config_of

__version__ = "0.1.0"

__all__ = ["Engine", "HubSource", "ModelArgs", "ModelServing", "ModelServingArgs", "Resources", "RouterArgs",
           "S3Source", "VolumeSource", "__version__", "stack_config_of"]
