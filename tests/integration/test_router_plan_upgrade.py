"""A router and gateway deployed by the program before the router's plan (main at cd115e9: the
children wired by hand in RequestRouter, nginx.conf an f-string) taken over by this program, on
the simulated cluster (docs/09-upgrading.md, 2026-12-02):
- the preview replaces, creates and deletes nothing: every child keeps its URN (name, type and
  parent unchanged);
- the only updates are the gateway's ConfigMap (nginx.conf requoted, the scripts' header names
  from their settings) and its Deployment's config hash, with the limiter's when tenants have limits;
- after `up`, a second preview changes nothing.
"""

from __future__ import annotations

import pytest

from tests.support.harness import small_model, stack_config

pytestmark = pytest.mark.integration

BASELINE = "cd115e9"  # main before the router's plan and nginx.conf as data
ROUTER = "llm-router"
GATEWAY = f"{ROUTER}-gateway"
ROUTER_IMAGE = "registry.example.com/llm/request-router:0.16.2"
PYLON_IMAGE = "registry.example.com/llm/stargate-client:0.4.0"
# What this release changes on purpose in the gateway (each allowed by name, with its reason).
ALLOWED_UPDATES = {
    f"{GATEWAY}-config": "nginx.conf rendered from a directive tree (a few arguments quoted differently)",
    GATEWAY: "its pods' config hash follows the ConfigMap's files",
}


def config(namespace: str) -> dict:
    return {**stack_config(namespace, [small_model()]), "router": {
        "name": ROUTER, "image": ROUTER_IMAGE, "workerAuth": {"mode": "open"},
        "pylon": {"image": PYLON_IMAGE, "resources": {"cpu": "50m", "memory": "64Mi"}},
        "gateway": {"replicas": 2}}}


@pytest.fixture(scope="module")
def baseline(make_project):
    project = make_project(config)
    project.use_program(BASELINE)
    project.up()
    project.use_program()
    return project


def test_the_preview_keeps_every_child_and_updates_only_the_gateways_files(baseline):
    ops: dict[str, set[str]] = {}
    for step in baseline.preview_steps():
        name = step["urn"].split("::")[-1]
        if name.startswith(f"{ROUTER}-"):
            ops.setdefault(name, set()).add(step["op"])
    assert f"{ROUTER}-workload" in ops and GATEWAY in ops, sorted(ops)
    changed = {name: found - {"same", "read", "refresh"} for name, found in ops.items()
               if found - {"same", "read", "refresh"}}
    assert {name: found for name, found in changed.items() if found != {"update"}} == {}, changed
    assert set(changed) <= set(ALLOWED_UPDATES), changed


def test_after_up_a_second_preview_changes_nothing(baseline):
    baseline.up()
    result = baseline.run("preview", "--expect-no-changes", check=False)
    assert result.returncode == 0, f"the preview plans changes:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
