"""The rules over the graph the real components register (under Pulumi mocks): every resource
the program declares, with the dependency URNs and provider the engine would hand the pack.

This ties the rules to the components' actual wiring rather than to the test's model of it:
vLLM and NIM (raw path) models and the request router with its backend router, declared as the
program's __main__ declares them, in cluster stacks (WeightsGate present) and rendering stacks
(no dynamic resources).
"""

from __future__ import annotations

from dataclasses import replace

import pulumi
import pulumi_kubernetes as k8s
import pytest
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor

from components.compile.plan import stack_plan
from components.config import load_stack_config
from components.resources.stack import declare
from policies.rules import ALL_RULES
from policies.rules.base import violations
from policies.rules.kube import Stack, StackResource
from policies.rules.pack import plain
from policies.rules.stack import GATE_TYPE, server_weights_gate

STACK = {
    "platform": {"sharedMemorySizeLimit": "1Gi", "preflight": {"enabled": False}},
    "models": [
        # With a next revision (models[].next): its server waits on the gate of its own weights,
        # declared under the model's name (the weights it will keep once promoted).
        {"name": "alpha", "source": {"repo": "org/alpha", "revision": "main"}, "resources": {"memory": "8Gi"},
         "next": {"weight": 10, "source": {"repo": "org/alpha", "revision": "v2"}}},
        # A next revision on the model's own source: it waits on the model's gate.
        {"name": "epsilon", "source": {"repo": "org/epsilon"}, "resources": {"memory": "8Gi"},
         "weights": {"accessMode": "ReadWriteMany"}, "next": {"weight": 10, "args": ["--enforce-eager"]}},
        {"name": "beta", "source": {"repo": "org/beta", "revision": "v1"}, "resources": {"memory": "8Gi"},
         "gpus": 2, "tensorParallelSize": 2, "lora": {"enabled": True}},
        {"name": "gamma", "engine": "nim", "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3",
         "source": {"repo": "org/gamma"}, "resources": {"memory": "8Gi"}},
        # Streamed from an object store (source.load: stream): no volume, Job nor gate to wait on.
        {"name": "delta", "source": {"type": "s3", "load": "stream", "bucket": "models", "prefix": "delta/",
                                     "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "k"}},
         "resources": {"memory": "8Gi"}},
    ],
    "router": {"replicas": 2, "image": "ghcr.io/llm-serving/router:0.4.1",
               "backendRouter": {"image": "nvcr.io/nvidia/llm-backend-router:0.1.0"}},
}


class Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args):
        return [f"{args.name}-id", dict(args.inputs)]

    def call(self, args):
        return {}


class RecordingMonitor(MockMonitor):
    """Keeps what the engine would pass the analyzer: type, name, URN, inputs, dependencies."""

    def __init__(self, mocks):
        super().__init__(mocks)
        self.registered: list[dict] = []

    def RegisterResource(self, request):  # noqa: N802 - overrides MockMonitor's gRPC method name
        response = super().RegisterResource(request)
        deps = list(request.dependencies)
        for group in request.propertyDependencies.values():
            deps.extend(group.urns)
        self.registered.append({
            "type": request.type, "name": request.name, "urn": response.urn,
            "inputs": rpc.deserialize_properties(request.object) if request.type != "pulumi:pulumi:Stack" else {},
            "dependencies": tuple(dict.fromkeys(deps)), "provider": request.provider,
        })
        return response


def register(raw: dict) -> Stack:
    monitor = RecordingMonitor(Mocks())
    pulumi.runtime.set_mocks(Mocks(), preview=True, monitor=monitor)
    stack = load_stack_config(raw)

    @pulumi.runtime.test
    def program():
        provider = k8s.Provider("cluster", render_yaml_to_directory=stack.cluster.render_yaml_to_directory)
        # As the program's __main__ declares them (preflight off: no network under test).
        declared = declare(stack_plan(stack), provider=provider)
        return pulumi.Output.all(*[m.endpoint_url for m in declared.servers.values()])

    program()
    providers = {f"{r['urn']}::{r['name']}-id": r["inputs"] for r in monitor.registered
                 if r["type"].startswith("pulumi:providers:")}
    return Stack(tuple(
        StackResource(r["type"], r["name"], r["urn"], plain(r["inputs"]), r["dependencies"],
                      plain(providers.get(r["provider"])) if r["provider"] else None)
        for r in monitor.registered
    ))


@pytest.fixture(params=[False, True], ids=["cluster", "rendering"])
def graph(request) -> Stack:
    raw = {**STACK, "cluster": {"renderYamlToDirectory": "/tmp/render"}} if request.param else STACK
    return register(raw)


def test_the_graph_has_what_the_rules_look_for(graph):
    kinds = {obj.kind for _, obj in graph.k8s_objects()}
    assert {"Deployment", "Job", "PersistentVolumeClaim", "Service", "Role", "RoleBinding"} <= kinds
    components = {obj.component for _, obj in graph.k8s_objects()}
    assert {"server", "weights-puller", "router", "backend-router"} <= components
    gates = graph.of_type(GATE_TYPE)
    rendering = any((r.provider_props or {}).get("renderYamlToDirectory") for r, _ in graph.k8s_objects())
    # alpha, its next revision, beta, gamma, epsilon (whose revision shares its gate).
    assert (len(gates) == 0) if rendering else (len(gates) == 5)


def test_every_rule_accepts_the_components_graph(graph):
    for rule in ALL_RULES:
        if rule.scope == "stack":
            assert rule(graph) == [], rule.name
        else:
            for _, obj in graph.k8s_objects():
                assert rule(obj) == [], (rule.name, obj.display)


def test_weights_gate_rule_fails_when_the_wiring_breaks(graph):
    server_urns = {r.urn for r, obj in graph.k8s_objects() if obj.kind == "Deployment" and obj.component == "server"}
    cut = Stack(tuple(replace(r, dependencies=()) if r.urn in server_urns else r for r in graph.resources))
    found = violations(server_weights_gate(cut))
    # The streamed model's server has no weights to wait on: the other six (two of them next
    # revisions) are caught.
    streamed = {r.urn for r, obj in graph.k8s_objects() if obj.kind == "Deployment" and obj.label(
        "llm-serving.dev/model") == "delta"}
    assert len(found) == 6 and len(streamed) == 1 and {f.urn for f in found} == server_urns - streamed
