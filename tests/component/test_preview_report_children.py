"""The preview report classifies every child the components actually declare.

The report knows a model's weights, server and bookkeeping children by their role names
(components/children.py). This test declares real components under Pulumi mocks (a vLLM model, a
NIM model on each path, a router of each workload kind, the platform), records every resource the
engine would see (URN, type, parent) and checks that the report's classifier gives each child its
component and a role, and that a preview built from that graph reads as it should. Renaming a
child in components/resources without the report following fails here, where the report's own
tests (on captured previews) would stay green.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pulumi
import pytest
from pulumi.runtime.mocks import MockMonitor

from components import children as roles
from components.compile.plan import stack_plan
from components.config import load_stack_config
from components.preview_report import Preview, Step, component_of, role_of, summarize
from components.preview_report.summary import MODEL_TYPES, PLATFORM_TYPE, ROUTER_TYPE
from components.resources import stack as components_stack
from tests.support.component_kit import Mocks

NGC_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
MODELS = [
    # Two replicas (shared weights): the PodDisruptionBudget on both paths.
    {"name": "plain", "source": {"repo": "org/plain"}, "resources": {"memory": "8Gi"},
     "replicas": 2, "weights": {"accessMode": "ReadWriteMany"}},
    {"name": "op", "engine": "nim", "path": "operator", "image": NGC_IMAGE, "replicas": 2,
     "weights": {"accessMode": "ReadWriteMany"},
     "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}, "resources": {"memory": "48Gi"},
     "nim": {"authSecret": "ngc-api"}},
    {"name": "raw", "engine": "nim", "image": NGC_IMAGE, "source": {"repo": "org/raw"},
     "resources": {"memory": "48Gi"}, "nim": {"authSecret": "ngc-api"}},
    # Autoscaled: adds the KEDA CRD check and the ScaledObject.
    {"name": "scaled", "source": {"repo": "org/scaled"}, "resources": {"memory": "8Gi"},
     "weights": {"accessMode": "ReadWriteMany"}, "autoscaling": {"enabled": True, "maxReplicas": 3}},
    # A next revision (models[].next), two replicas of each: every next- role.
    {"name": "canary", "source": {"repo": "org/canary"}, "resources": {"memory": "8Gi"}, "replicas": 2,
     "weights": {"accessMode": "ReadWriteMany"},
     "next": {"weight": 10, "source": {"repo": "org/canary-2"}, "replicas": 2}},
]
STACKS = {
    # Every optional child: the models' NetworkPolicy and ServiceMonitor, the platform's metrics
    # CRD check and dashboard, the backend router, its ServiceMonitor, TLS (issuer, certificate),
    # the load-balancer file, the gateway's limiter (a rate-limited tenant), its metrics and its
    # TLS (issuer, certificate).
    "deployment": ({"networkPolicy": {"enabled": True}, "metrics": {"enabled": True}},
                   {"image": "nvcr.io/nvidia/llm-request-router:0.6.0", "replicas": 3,
                    "backendRouter": {"enabled": True}, "metrics": {"serviceMonitor": True},
                    "tls": {"enabled": True}, "loadBalancer": {"default": "power-of-n"},
                    "gateway": {"tls": {"enabled": True}, "apiKeys": {"secretName": "gateway-keys", "tenants": [
                        {"name": "team-a", "rateLimit": {"requestsPerMinute": 600}}]}}}),
    # A StatefulSet adds the headless Service.
    "statefulset": ({"metrics": {"enabled": True}},
                    {"image": "nvcr.io/nvidia/llm-request-router:0.6.0", "workload": {"kind": "StatefulSet"}}),
}
# A model's children, by what the report must say about them.
WEIGHTS_KINDS = {"PersistentVolumeClaim", "Job", "WeightsGate", "NIMCache"}
SERVER_KINDS = {"Deployment", "NIMService"}


@dataclass(frozen=True)
class Registered:
    urn: str
    type: str
    name: str
    parent: str

    @property
    def kind(self) -> str:
        return self.type.rsplit(":", 1)[-1]


class RecordingMonitor(MockMonitor):
    """The mock engine, keeping every registration as the engine would: URN, type, parent URN."""

    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: list[Registered] = []

    def RegisterResource(self, request):  # noqa: N802 (the engine's gRPC method name)
        response = super().RegisterResource(request)
        self.registered.append(Registered(response.urn, request.type, request.name, request.parent))
        return response


def declare(platform_config: dict, router: dict) -> list[Registered]:
    """Every resource a stack of MODELS, ``platform_config`` and ``router`` declares."""
    mocks = Mocks(status_target="plain-0")
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, preview=False, monitor=monitor)

    @pulumi.runtime.test
    def program():
        stack = load_stack_config({"platform": {"sharedMemorySizeLimit": "1Gi", **platform_config}, "models": MODELS,
                                   "router": router})
        components_stack.declare(stack_plan(stack))

    program()  # returns once every registration has reached the monitor
    return [r for r in monitor.registered if r.type != "pulumi:pulumi:Stack"]


@functools.cache
def graph_of(variant: str) -> tuple[Registered, ...]:
    return tuple(declare(*STACKS[variant]))


@pytest.fixture(params=sorted(STACKS))
def graph(request) -> tuple[Registered, ...]:
    return graph_of(request.param)


def _name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _type(urn: str) -> str:
    return urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1]


def _children(graph: tuple[Registered, ...]) -> list[tuple[Registered, str, str]]:
    """(child, parent component type, parent component name) for each child of a component."""
    components = {r.urn for r in graph if r.type in MODEL_TYPES or r.type in (ROUTER_TYPE, PLATFORM_TYPE)}
    return [(r, _type(r.parent), _name(r.parent)) for r in graph if r.parent in components]


def test_the_graphs_hold_every_role_on_each_model_path():
    found: dict[str, set[str]] = {}
    for variant in STACKS:
        for registered, parent_type, parent in _children(graph_of(variant)):
            # A weights child is named after its source too: by its role, as the report reads it.
            found.setdefault(parent, set()).add(role_of(registered.name, parent, parent_type)
                                                or registered.name.removeprefix(f"{parent}-"))
    raw_path = {roles.WEIGHTS, roles.PULLER, roles.WEIGHTS_GATE, roles.NETWORK_POLICY, roles.PULLER_NETWORK_POLICY, roles.SERVER,
                roles.SERVICE, roles.STATUS, roles.SERVICE_MONITOR}
    assert found["plain"] == raw_path | {roles.SERVER_PDB}  # vLLM, two replicas
    assert found["scaled"] == raw_path | {roles.SERVER_PDB, roles.CRD_CHECK, roles.SCALED_OBJECT}  # vLLM, autoscaled
    assert found["raw"] == raw_path  # NIM, raw objects, one replica: no budget
    assert found["canary"] == raw_path | {roles.SERVER_PDB} | set(roles.NEXT_ROLES)  # and its next revision
    assert found["op"] == {roles.NIM_OPERATOR_CHECK, roles.NIM_CACHE, roles.NETWORK_POLICY, roles.NIM_SERVICE,
                           roles.SERVER_PDB, roles.STATUS}  # NIM operator CRs, two replicas
    assert found["llm-router"] == set(roles.ROUTER_ROLES)
    assert found["platform"] == set(roles.PLATFORM_ROLES)
    # Between them, the paths use every role a model can have.
    assert found["scaled"] | found["op"] | found["canary"] == set(roles.MODEL_ROLES)


def test_every_child_is_classified_with_its_component_with_or_without_a_parent(graph):
    for registered, parent_type, parent_name in _children(graph):
        with_parent = Step("same", registered.urn, registered.type, parent=registered.parent)
        # The digest form's delete steps can lack a parent: the URN's type chain and the role decide.
        urn_only = Step("same", registered.urn, registered.type)
        assert component_of(with_parent) == (parent_type, parent_name), registered
        assert component_of(urn_only) == (parent_type, parent_name), registered


def test_every_model_and_router_child_has_a_role_the_report_knows(graph):
    for registered, parent_type, parent_name in _children(graph):
        role = role_of(registered.name, parent_name, parent_type)
        if parent_type == PLATFORM_TYPE and role is None:
            # Named after what they hold (a stack secret, a teardown object): reported generically.
            assert registered.name.startswith(f"{parent_name}-"), registered
            continue
        assert role is not None, f"{registered.name} ({registered.kind}) under {parent_name}: no role"
        if parent_type in MODEL_TYPES:
            # A next revision's children are its own model's roles (reported as the revision's).
            own = role.removeprefix(roles.NEXT_ROLE_PREFIX)
            assert (own in roles.MODEL_WEIGHTS_ROLES) == (registered.kind in WEIGHTS_KINDS), registered
            assert (own in roles.MODEL_SERVER_ROLES) == (registered.kind in SERVER_KINDS), registered
        dynamic = registered.type.startswith("pulumi-python:dynamic/") and registered.kind != "WeightsGate"
        assert (role in roles.BOOKKEEPING_ROLES) == dynamic, registered


def _preview_of(graph: tuple[Registered, ...]) -> Preview:
    """A preview of a change to every model's weights and image, and to the router's image:
    weights children replaced, servers and the router workload updated in their pod template,
    bookkeeping resources updated (as they are on any change), everything else unchanged."""
    template = ("spec", "template", "spec")
    preview = Preview("stream")
    for registered, parent_type, parent_name in _children(graph):
        role = role_of(registered.name, parent_name, parent_type)
        op, old, new, diff = "same", None, None, ()
        if role in roles.MODEL_WEIGHTS_ROLES:
            op, diff = "replace", ("spec",)
        elif role in roles.BOOKKEEPING_ROLES:
            op, diff = "update", ("deployment_revision",)
        elif registered.kind == "NIMService":
            op, diff = "update", ("spec.image.tag",)
            old, new = ({"spec": {"image": {"repository": "nvcr.io/nim/x", "tag": tag}}} for tag in ("1", "2"))
        elif role in roles.MODEL_SERVER_ROLES or role == roles.ROUTER_WORKLOAD:
            op, diff = "update", (".".join(template) + ".containers[0].image",)
            old, new = ({"spec": {"template": {"spec": {"containers": [{"image": f"r.io/x:{tag}"}]}}}}
                        for tag in ("1", "2"))
        preview.steps.append(Step(op, registered.urn, registered.type, registered.parent, old, new, diff, diff))
    return preview


def test_a_preview_of_the_graph_reads_per_model_and_for_the_router(graph):
    report = summarize(_preview_of(graph), "s")
    by_name = {s.name: s for s in report.sections}
    assert {s.name for s in report.models} == {"plain", "op", "raw", "scaled", "canary"}
    for model in ("plain", "op", "raw", "scaled", "canary"):
        lines = by_name[model].lines
        # One sentence for the weights, one for the pods: no child left to a generic line.
        assert len(lines) == 2, (model, lines)
        assert lines[0].startswith("**weights will be re-downloaded**"), (model, lines)
        assert lines[1] == "**GPU pods will restart** (image tag 1 → 2)", (model, lines)
    (router,) = [s for s in report.sections if s.kind == "router"]
    assert router.lines == ["**router pods will restart** (image tag 1 → 2)"]
    assert not [s for s in report.sections if s.kind in ("platform", "other") and s.changed]


def test_a_switch_to_autoscaling_says_the_count_drops_unless_handed_over():
    """Fixed replicas → autoscaling: the Deployment loses spec.replicas, which server-side apply
    resets to 1 (docs/05-day-2.md, Autoscaling); the report must not call it a harmless scale."""
    graph = graph_of("deployment")
    (server,) = [r for r, _, parent in _children(graph) if parent == "scaled" and r.kind == "Deployment"]
    old, new = {"spec": {"replicas": 2, "template": {}}}, {"spec": {"template": {}}}
    preview = Preview("stream")
    preview.steps.append(Step("update", server.urn, server.type, server.parent, old, new,
                              ("spec.replicas",), ("spec.replicas",)))
    (section,) = [s for s in summarize(preview, "s").sections if s.name == "scaled"]
    assert section.lines == ["scale only, **replicas 2 → left to the autoscaler**: the count drops to 1 at this "
                             "`up` unless handed over first (docs/05-day-2.md, Autoscaling)"]
