"""The shipped local stack on the simulated cluster's fake nodes, for the cluster-tier modules that
deploy its sections there (the real node's group deploys it as it is, scripts/up-local.sh).

stacks/Pulumi.local.yaml places the model, the router and the gateway on the real node (its
label and taint). These modules test what the program renders and how `up` rolls it, which KWOK
shows without running a container: on the default cluster there is no real node, so the same
sections go anywhere the scheduler finds room. Nothing else of the stack changes.
"""

from __future__ import annotations

from copy import deepcopy

PLACEMENT = ("nodeSelector", "tolerations")


def _unplaced(section: dict) -> dict:
    return {key: value for key, value in section.items() if key not in PLACEMENT}


def router_off_the_real_node(router: dict) -> dict:
    """The router section without the real-node placement of the router and its gateway."""
    moved = _unplaced(deepcopy(router))
    if "gateway" in moved:
        moved["gateway"] = _unplaced(moved["gateway"])
    return moved


def off_the_real_node(config: dict) -> dict:
    """A stack config (sections by their short names) with no real-node placement anywhere."""
    moved = deepcopy(config)
    moved["models"] = [_unplaced(model) for model in moved.get("models", [])]
    if "router" in moved:
        moved["router"] = router_off_the_real_node(moved["router"])
    return moved
