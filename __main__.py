"""llm-serving: the Pulumi program. One component per configured model.

The config is validated in full before any resource is declared, so a bad stack never reaches
the cluster.
"""

import json

import pulumi
import pulumi_kubernetes as k8s
from pulumi.runtime import config as runtime_config

from components.config import ConfigError, load_stack_config
from components.config.loader import PROJECT, SECTIONS, section_values
from components.config.model import SECRET_SECTIONS
from components.config.router import fronted_models
from components.compile.secrets import stack_secrets, unused_stack_secrets
from components.resources import Deploy, NimModel, Platform, RequestRouter, VllmModel

config = pulumi.Config(PROJECT)


def _section(name: str):
    """A section as `validate` reads it from the stack file: JSON (objects, lists, numbers), or
    the raw string when it is not JSON, so a wrong type is reported at its field."""
    value = config.get(name)
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def _unknown_keys() -> list[str]:
    """`llm-serving:*` keys the program does not read: a typo must not silently drop a section."""
    keys = {*runtime_config.CONFIG.get(), *runtime_config.get_config_env()}
    names = {key.partition(":")[2].removeprefix("config:") for key in keys if key.partition(":")[0] == PROJECT}
    choices = ", ".join(f"{PROJECT}:{section}" for section in SECTIONS)
    return [f"{PROJECT}:{name}: unknown stack config key; use one of {choices}"
            for name in sorted(names - set(SECTIONS))]


raw = section_values(_section, [name for name in SECTIONS if name not in SECRET_SECTIONS])
for name in SECRET_SECTIONS:
    # Presence and secrecy only: the plaintext never reaches the config model.
    if pulumi.runtime.get_config(f"{PROJECT}:{name}") is not None:
        raw[name] = ({"secure": "(held by the Pulumi engine)"}
                     if runtime_config.is_config_secret(f"{PROJECT}:{name}") else "(plain text)")
problems = _unknown_keys()
try:
    stack = load_stack_config(raw)
except ConfigError as error:
    problems += error.problems
if problems:
    # Raised before any resource exists: preview and up stop here with one line per problem.
    raise pulumi.RunError(str(ConfigError(problems))) from None

weights_revisions = {}
if stack.platform.preflight.enabled and not stack.cluster.render_yaml_to_directory:
    # Ask the HF endpoint before declaring anything: pin revisions to commits, check access and
    # volume sizes. Off with platform.preflight.enabled: false; never when rendering.
    from components.preflight import PreflightError, preflight_stack

    # The stack's own token, when it has one, for the models whose puller will use it. Read
    # here and handed only to the hub client: it never enters the config model or a message.
    hf_token = pulumi.runtime.get_config(f"{PROJECT}:hfToken") if "hfToken" in raw else None
    try:
        report = preflight_stack(stack, stack_token=hf_token)
    except PreflightError as error:
        raise pulumi.RunError(str(error)) from None
    for line in report.warnings:
        pulumi.log.warn(line)
    for line in report.notes:
        pulumi.log.info(line)
    stack, weights_revisions = report.stack, report.revisions

provider = k8s.Provider(
    "cluster",
    # Rendering talks to no cluster, and the provider refuses a kubeconfig beside a render
    # directory: an empty value keeps the ambient KUBECONFIG out of a render stack.
    kubeconfig="" if stack.cluster.render_yaml_to_directory else stack.cluster.kubeconfig,
    context=stack.cluster.context,
    render_yaml_to_directory=stack.cluster.render_yaml_to_directory,
)
# Stack secrets stay secret Outputs from here to the Kubernetes Secret (see compile/secrets.py).
secret_values = {name: config.require_secret(name) for name in SECRET_SECTIONS
                 if pulumi.runtime.get_config(f"{PROJECT}:{name}") is not None}
for name in unused_stack_secrets(stack):
    pulumi.log.warn(f"{PROJECT}:{name} is set but no model reads it; remove it (`pulumi config rm {name}`)")
if stack.cluster.render_yaml_to_directory:
    for secret in stack_secrets(stack):
        pulumi.log.warn(
            f"rendering: Secret {secret.ref.name} (from {PROJECT}:{secret.config_key}) is not written, "
            "so the files hold no credential; create it in namespace "
            f"{stack.platform.namespace} with key {secret.ref.key} before applying them"
        )
platform = Platform("platform", stack, provider, secret_values=secret_values)
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
