"""What the Pulumi program (``__main__.py``) does before it declares resources: the preflight
run, the stack secrets as secret Outputs, and the warnings about them. Kept here so the program
reads in one screen and each step is testable on its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Optional

import pulumi

from .config import StackConfig
from .config.loader import PROJECT
from .config.pylon import no_pylon_warning
from .config.stack_secrets import HF_TOKEN, configured, used


def preflight(stack: StackConfig, stack_token: Optional[str] = None) -> tuple[StackConfig, dict]:
    """Ask the HF endpoint before declaring anything: pin revisions to commits, check access and
    volume sizes. Off with platform.preflight.enabled: false; never when rendering. Returns the
    stack to deploy and the pinned revisions per model. ``stack_token``: the stack's hfToken as a
    library program gives it (the stack program's is read from its config here)."""
    if not stack.platform.preflight.enabled or stack.cluster.render_yaml_to_directory:
        return stack, {}
    # The hub client (huggingface_hub, httpx2) loads only when preflight runs: a render or a
    # stack with preflight off never pays its import.
    from .preflight import PreflightError, preflight_stack

    # The stack's own token, when it has one, for the models whose puller will use it. Read here
    # and handed only to the hub client: it never enters the config model or a message.
    hf_token = stack_token if stack_token is not None else (
        pulumi.runtime.get_config(f"{PROJECT}:{HF_TOKEN.config_key}") if HF_TOKEN in configured(stack) else None)
    try:
        report = preflight_stack(stack, stack_token=hf_token)
    except PreflightError as error:
        raise pulumi.RunError(str(error)) from None
    for line in report.warnings:
        pulumi.log.warn(line)
    for line in report.notes:
        pulumi.log.info(line)
    return report.stack, report.revisions


def secret_values(stack: StackConfig) -> dict[str, pulumi.Output]:
    """Every stack secret the stack sets, as a secret Output: secret from here to the Kubernetes
    Secret (see compile/secrets.py)."""
    config = pulumi.Config(PROJECT)
    return {spec.config_key: config.require_secret(spec.config_key) for spec in configured(stack)}


def stack_warnings(stack: StackConfig) -> list[str]:
    """What the program warns of before declaring: the stack secrets' and the router's."""
    return secret_warnings(stack) + router_warnings(stack)


def router_warnings(stack: StackConfig) -> list[str]:
    return [] if stack.router is None else [w for w in [no_pylon_warning(stack.router)] if w]


def secret_warnings(stack: StackConfig) -> list[str]:
    """Stack secrets no model reads, and, when rendering, the Secrets the files expect to exist."""
    read = used(stack)
    lines = [f"{PROJECT}:{spec.config_key} is set but no model reads it; remove it "
             f"(`pulumi config rm {spec.config_key}`)" for spec in configured(stack) if spec not in read]
    if stack.cluster.render_yaml_to_directory:
        lines += [
            f"rendering: Secret {spec.ref.name} (from {PROJECT}:{spec.config_key}) is not written, "
            "so the files hold no credential; create it in namespace "
            f"{stack.platform.namespace} with key {spec.ref.key} before applying them"
            for spec in read
        ]
    return lines


# Set to keep the Pulumi SDK's own debug messages (see quiet_sdk_debug_log).
SDK_DEBUG_LOG = "LLM_SERVING_SDK_DEBUG_LOG"


def quiet_sdk_debug_log(environ: Mapping[str, str] = os.environ) -> bool:
    """Stop the Pulumi Python SDK from sending its debug messages to the engine, unless
    ``LLM_SERVING_SDK_DEBUG_LOG`` is set. Returns whether it did.

    Why: the SDK (pulumi 3.272, pulumi/log.py and runtime/resource.py) logs about four debug
    lines per resource ("preparing resource", "registering resource", ...), each a synchronous
    gRPC call to the engine on the program's only thread: in a preview of 100 models (500-700
    resources) that was about 3,100 calls and 3.8 s of the program's 13.5 s of CPU, every one
    waiting on the engine. The engine shows these lines only under `pulumi --debug` or `-v`, so
    nobody reading a preview or an `up` sees a difference; our own warnings and notes (warn,
    info) still go through. Set the variable when debugging the SDK itself."""
    if environ.get(SDK_DEBUG_LOG):
        return False
    pulumi.log.debug = _no_debug
    return True


def _no_debug(msg: str, resource=None, stream_id=None, ephemeral=None) -> None:
    return None
