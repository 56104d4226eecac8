"""The router's load-balancer file (``router.loadBalancer``): a ConfigMap, its mount, the flag.

Stargate reads ``--lb-config-path`` once at startup (NVIDIA/nvcf@fadc0f8
``docs/load-balancer-configuration.md``), so the pod template carries the file's hash: a changed
file rolls the router pods instead of waiting for their next restart.
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional

from ...config.router import RouterConfig
from ...config.stack import StackConfig
from .names import ROUTER_COMPONENT, metadata

LB_VOLUME = "lb-config"
LB_MOUNT = "/etc/stargate/lb"
LB_FILE = "lb-config.json"
LB_PATH = f"{LB_MOUNT}/{LB_FILE}"
LB_HASH_ANNOTATION = "llm-serving.dev/lb-config-sha256"


def lb_config_name(router: RouterConfig) -> str:
    return f"{router.name}-lb-config"


def lb_config_json(router: RouterConfig) -> Optional[str]:
    if router.load_balancer is None:
        return None
    return json.dumps(router.load_balancer.to_file(), indent=2) + "\n"


def lb_args(router: RouterConfig) -> list[str]:
    return [] if router.load_balancer is None else [f"--lb-config-path={LB_PATH}"]


def lb_pod_parts(router: RouterConfig) -> tuple[list[dict], list[dict], dict[str, str]]:
    """(volumes, mounts, pod annotations) for the router pod; empty without loadBalancer."""
    content = lb_config_json(router)
    if content is None:
        return [], [], {}
    volume = {"name": LB_VOLUME, "configMap": {"name": lb_config_name(router), "defaultMode": 0o444}}
    mount = {"name": LB_VOLUME, "mountPath": LB_MOUNT, "readOnly": True}
    return [volume], [mount], {LB_HASH_ANNOTATION: hashlib.sha256(content.encode()).hexdigest()}


def compile_lb_config(stack: StackConfig) -> Optional[dict]:
    router = stack.router
    content = lb_config_json(router)
    if content is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(lb_config_name(router), stack.platform.namespace, router, ROUTER_COMPONENT),
        "data": {LB_FILE: content},
    }
