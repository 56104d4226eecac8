"""llm-serving: the Pulumi program. One component per configured model.

The config is validated in full before any resource is declared, so a bad stack never reaches
the cluster.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.config import ConfigError, load_stack_config
from components.config.loader import PROJECT, section_values
from components.resources import Deploy, Platform, VllmModel

try:
    stack = load_stack_config(section_values(pulumi.Config(PROJECT).get_object))
except ConfigError as error:
    # Raised before any resource exists: preview and up stop here with one line per problem.
    raise pulumi.RunError(str(error)) from None

provider = k8s.Provider(
    "cluster",
    kubeconfig=stack.cluster.kubeconfig,
    context=stack.cluster.context,
    render_yaml_to_directory=stack.cluster.render_yaml_to_directory,
)
platform = Platform("platform", stack, provider)
deploy = Deploy(provider=provider, cluster=stack.cluster, depends_on=platform.ready)

models = {}
for model in stack.models:
    if model.engine == "vllm":
        models[model.name] = VllmModel(model, stack, deploy)
    else:
        raise pulumi.RunError(f"model '{model.name}': engine '{model.engine}' has no component yet")

pulumi.export("namespace", stack.platform.namespace)
pulumi.export("models", {name: component.outputs for name, component in models.items()})
