"""llm-serving: the Pulumi program. The stack's plan (components.compile.plan.stack_plan), declared
by components.resources.stack.declare: the platform, one component per model, the router.

The config is validated in full before any resource is declared, so a bad stack never reaches
the cluster.
"""

import pulumi
import pulumi_kubernetes as k8s

from components import program
from components.compile.plan import stack_plan
from components.config import ConfigError
from components.config.loader import load_program_config
from components.resources.stack import declare

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
for line in program.stack_warnings(stack):
    pulumi.log.warn(line)
# The stack's one plan: the platform, one component per model and the router, what
# llm_serving.ModelServing declares under itself, declared here at the top of the stack (the URNs
# deployed stacks hold).
declared = declare(stack_plan(stack), provider=provider, secret_values=program.secret_values(stack))

pulumi.export("namespace", stack.platform.namespace)
pulumi.export("models", {name: component.outputs for name, component in declared.servers.items()})
if weights_revisions:
    pulumi.export("weights_revisions", weights_revisions)
if declared.router is not None:
    pulumi.export("router", declared.router.outputs)
