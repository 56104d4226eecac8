"""What the Pulumi program (``__main__.py``) does before it declares resources: the preflight
run, the stack secrets as secret Outputs, and the warnings about them. Kept here so the program
reads in one screen and each step is testable on its own.
"""

from __future__ import annotations

import pulumi

from .config import StackConfig
from .config.loader import PROJECT
from .config.stack_secrets import HF_TOKEN, configured, used


def preflight(stack: StackConfig) -> tuple[StackConfig, dict]:
    """Ask the HF endpoint before declaring anything: pin revisions to commits, check access and
    volume sizes. Off with platform.preflight.enabled: false; never when rendering. Returns the
    stack to deploy and the pinned revisions per model."""
    if not stack.platform.preflight.enabled or stack.cluster.render_yaml_to_directory:
        return stack, {}
    from .preflight import PreflightError, preflight_stack

    # The stack's own token, when it has one, for the models whose puller will use it. Read here
    # and handed only to the hub client: it never enters the config model or a message.
    hf_token = (pulumi.runtime.get_config(f"{PROJECT}:{HF_TOKEN.config_key}")
                if HF_TOKEN in configured(stack) else None)
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
