"""The caller's kubeconfig content for the dynamic resources that read the cluster (status, weights
gate, CRD checks, the router's targets): a library user's program hands it over
(``llm_serving.ModelServingArgs.kubeconfig_content``), so those resources reach the cluster the
program's ``kubernetes.Provider`` does, with no kubeconfig file on the machine that runs `up`,
`refresh` or `destroy`. A secret input: encrypted in the state, `[secret]` in previews. The stack
program passes none: its records keep the kubeconfig path and context they always held.
"""

from __future__ import annotations

from typing import Optional

import pulumi

from contract.props import ClusterTarget


def with_kubeconfig(props: dict, content: Optional[pulumi.Input[str]],
                    opts: pulumi.ResourceOptions) -> tuple[dict, pulumi.ResourceOptions]:
    """``props`` with the content beside its cluster target, and ``opts`` keeping it secret in the
    outputs too (a dynamic provider echoes its inputs); both unchanged without content, or for a
    resource that does not read the cluster (no cluster target in its props)."""
    if content is None or "kubeconfig" not in props:
        return props, opts
    return ({**props, ClusterTarget.DATA_KEY: pulumi.Output.secret(content)},
            pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(additional_secret_outputs=[ClusterTarget.DATA_KEY])))
