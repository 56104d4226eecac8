"""The component tests' shared kit: Pulumi mocks, and a recorder of the resource graph a component declares.

A plain module (not a conftest), imported by name: pytest's prepend import mode puts this folder on
``sys.path``. Each test module declares its own ``graph`` fixture with ``record_graph``, naming any
dynamic resource class beyond the two every model declares.
"""

from __future__ import annotations

from types import ModuleType

import pulumi

import providers.resources as dynamic_resources
from components.compile.plan import stack_plan
from components.config import load_stack_config
from components.config.stack import StackConfig
from components.resources import kubernetes as kube_resources
from components.resources.stack import Declared, declare
from tests.support.names import stem


class Mocks(pulumi.runtime.Mocks):
    """Every resource's outputs are its inputs; a ModelStatus also reports the model serving."""

    def __init__(self, status_target: str = "alpha-0"):
        self.status_target = status_target

    def new_resource(self, args):
        outputs = dict(args.inputs)
        if args.typ.endswith("ModelStatus"):
            outputs.update(state="READY", message="serving", targets=[self.status_target], ready_replicas=1)
        return [f"{args.name}-id", outputs]

    def call(self, args):
        return {}


class Graph:
    """Every child resource declared, with the options it was declared with (and, for a dynamic
    resource, its props and provider)."""

    def __init__(self):
        self.opts: dict[str, pulumi.ResourceOptions] = {}
        self.objects: dict[str, pulumi.Resource] = {}
        self.manifests: dict[str, dict] = {}
        self.props: dict[str, dict] = {}
        self.providers: dict[str, object] = {}

    def depends(self, name: str) -> list[str]:
        """What ``name`` waits on; a weights child's source hash left out of both (``stem``)."""
        by_id = {id(r): stem(n) for n, r in self.objects.items()}
        return [by_id.get(id(d), "?") for d in (self.opts[self.named(name)].depends_on or [])]

    def named(self, name: str) -> str:
        """The declared name of ``name`` or, for a weights child (``<model>-weights``, ``-puller``,
        ``-weights-gate``), of the one named after its source (compile/plan.py weights_names)."""
        if name in self.opts:
            return name
        (found,) = [n for n in self.opts if stem(n) == name]
        return found



def _record_dynamic(module: ModuleType, cls_name: str, recorded: Graph, monkeypatch) -> None:
    original = getattr(module, cls_name)

    class Recording(original, module="llm-serving", name=cls_name):
        def __init__(self, name, props, provider, opts=None):
            recorded.opts[name], recorded.props[name], recorded.providers[name] = opts, props, provider
            super().__init__(name, props, provider, opts)
            recorded.objects[name] = self

    monkeypatch.setattr(module, cls_name, Recording)


def record_graph(monkeypatch, *dynamic: tuple[ModuleType, str]) -> Graph:
    """Record every Kubernetes object (through ``kubernetes.apply``) and every WeightsGate,
    ModelStatus and ``(module, class name)`` in ``dynamic`` declared from now on."""
    recorded = Graph()
    original_apply = kube_resources.apply

    def apply(name, manifest, opts=None):
        recorded.opts[name], recorded.manifests[name] = opts, manifest
        recorded.objects[name] = original_apply(name, manifest, opts)
        return recorded.objects[name]

    monkeypatch.setattr(kube_resources, "apply", apply)
    for module, cls_name in ((dynamic_resources, "WeightsGate"), (dynamic_resources, "ModelStatus"), *dynamic):
        _record_dynamic(module, cls_name, recorded, monkeypatch)
    return recorded


def declare_stack(raw: dict, mocks: Mocks | None = None) -> tuple[StackConfig, Declared]:
    """Install the mocks, load the stack config and declare its plan as `up` does (the platform,
    each model, the router): (stack, its components)."""
    pulumi.runtime.set_mocks(mocks or Mocks(), preview=False)
    stack = load_stack_config(raw)
    return stack, declare(stack_plan(stack))
