"""llm-serving: the Pulumi program. One component per configured model.

The config is validated in full before any resource is declared, so a bad stack never reaches
the cluster.
"""

import pulumi
import pulumi_kubernetes as k8s

from components import program
from components.config import ConfigError
from components.config.loader import load_program_config
from components.config.stack import fronted_models
from components.resources import Deploy, NimModel, Platform, RequestRouter, VllmModel

# First: the SDK's per-resource debug messages cost the program a blocking call each (see there).
program.quiet_sdk_debug_log()
try:
    stack = load_program_config()
except ConfigError as error:
    # Raised before any resource exists: preview and up stop here with one line per problem.
    raise pulumi.RunError(str(error)) from None
stack, weights_revisions = program.preflight(stack)

provider = k8s.Provider(
    "cluster",
    # Rendering talks to no cluster, and the provider refuses a kubeconfig beside a render
    # directory: an empty value keeps the ambient KUBECONFIG out of a render stack.
    kubeconfig="" if stack.cluster.render_yaml_to_directory else stack.cluster.kubeconfig,
    context=stack.cluster.context,
    render_yaml_to_directory=stack.cluster.render_yaml_to_directory,
)
for line in program.secret_warnings(stack):
    pulumi.log.warn(line)
platform = Platform("platform", stack, provider, secret_values=program.secret_values(stack))
deploy = Deploy(provider=provider, cluster=stack.cluster, depends_on=platform.ready)

models = {}
for model in stack.models:
    if model.engine == "vllm":
        models[model.name] = VllmModel(model, stack, deploy)
    elif model.engine == "nim":
        # path raw: the vLLM objects with NIM's image and identity; path operator: NIMCache +
        # NIMService, after a check that the cluster has the operator's CRDs.
        models[model.name] = NimModel(model, stack, deploy)
    else:
        raise pulumi.RunError(f"model '{model.name}': engine '{model.engine}' has no component yet")

pulumi.export("namespace", stack.platform.namespace)
pulumi.export("models", {name: component.outputs for name, component in models.items()})
if weights_revisions:
    pulumi.export("weights_revisions", weights_revisions)

if stack.router is not None:
    # The router's pods start once the models it fronts are declared and ready to be routed to.
    fronted = fronted_models(stack.router, [m.name for m in stack.models])
    router = RequestRouter(stack, deploy, fronts=[models[name] for name in fronted])
    pulumi.export("router", router.outputs)
