"""llm-serving: the Pulumi program. One component per configured model.

The config is validated in full before any resource is declared, so a bad stack never reaches
the cluster.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.config import ConfigError, load_stack_config
from components.config.loader import PROJECT, section_values
from components.config.router import fronted_models
from components.resources import Deploy, NimModel, Platform, RequestRouter, VllmModel

try:
    stack = load_stack_config(section_values(pulumi.Config(PROJECT).get_object))
except ConfigError as error:
    # Raised before any resource exists: preview and up stop here with one line per problem.
    raise pulumi.RunError(str(error)) from None

weights_revisions = {}
if stack.platform.preflight.enabled and not stack.cluster.render_yaml_to_directory:
    # Ask the HF endpoint before declaring anything: pin revisions to commits, check access and
    # volume sizes. Off with platform.preflight.enabled: false; never when rendering.
    from components.preflight import PreflightError, preflight_stack

    try:
        report = preflight_stack(stack)
    except PreflightError as error:
        raise pulumi.RunError(str(error)) from None
    for line in report.warnings:
        pulumi.log.warn(line)
    for line in report.notes:
        pulumi.log.info(line)
    stack, weights_revisions = report.stack, report.revisions

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
