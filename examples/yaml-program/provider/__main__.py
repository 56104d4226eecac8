"""llm-serving behind a component provider, for a Pulumi YAML program (docs/library.md, "Other
languages, measured"). Not ModelServing itself: the provider's schema is inferred from type
annotations, and ModelServing's arguments are dataclasses with unions and `Any` mappings in a
module with postponed annotations, which the analyzer cannot read. This facade takes plain types
(a TypedDict) and builds the library's arguments from them.
"""

from typing import Optional, TypedDict

import pulumi
from pulumi.provider.experimental import component_provider_host

import llm_serving as llm


class HubModel(TypedDict):
    name: pulumi.Input[str]
    repo: pulumi.Input[str]
    revision: pulumi.Input[str]
    gpus: Optional[pulumi.Input[int]]


class TeamServingArgs(TypedDict):
    namespace: pulumi.Input[str]
    models: pulumi.Input[list[HubModel]]
    storage_class_name: Optional[pulumi.Input[str]]


def whole(value) -> Optional[int]:
    # Numbers cross the provider boundary as doubles (1 arrives as 1.0), which the config model
    # refuses as "not a whole number": a whole double is the integer it encodes.
    return None if value is None else int(value) if float(value).is_integer() else value


class TeamServing(pulumi.ComponentResource):
    endpoints: pulumi.Output[dict[str, str]]
    states: pulumi.Output[dict[str, str]]

    def __init__(self, name: str, args: TeamServingArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("llm-serving:index:TeamServing", name, {}, opts)
        models = [llm.Model(m["name"], llm.HubSource(m["repo"], revision=m["revision"]), gpus=whole(m.get("gpus")),
                            resources=llm.Resources(cpu="1", memory="4Gi"), weights=llm.WeightsStorage(size="1Gi"))
                  for m in args["models"]]
        platform = llm.Platform(shared_memory_size_limit="1Gi", storage_class_name=args.get("storage_class_name") or None)
        serving = llm.ModelServing(name, llm.ModelServingArgs(
            namespace=args["namespace"], models=models, create_namespace=True, platform=platform),
            pulumi.ResourceOptions(parent=self))
        self.endpoints, self.states = serving.endpoints, serving.states
        self.register_outputs({"endpoints": self.endpoints, "states": self.states})


if __name__ == "__main__":
    component_provider_host(name="llm-serving", components=[TeamServing])
