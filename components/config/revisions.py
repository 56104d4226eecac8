"""A model's next revision: served beside the current one under the one name clients use, taking
`weight` percent of new conversations at the gateway until it is promoted or rolled back.

The next revision's server side is its own set of objects, named ``<model>-next`` (Deployment,
Service, status): ``revision_model`` derives that model from the declaration, so every compiler
that serves a model serves it, unchanged. What differs is asked of ``ModelConfig.served_name``
(the name the engine answers to and the router fronts: the model's, so a client's `"model":
"tiny"` reaches either revision) and ``is_next_revision``. The router tells the two revisions
apart by the id each pod's pylon registers, which is the object name (``<model>-next``).

Its weights (volume, puller Job, gate) are those the model will have once promoted
(``weights_model``): same objects, same logical names (compile/plan.py ``weights_names``), so a
promote keeps them, verified, and deletes the previous revision's; a revision on the model's own
source mounts the model's volume.

Promote: write the next revision's settings into the model and remove `next` (one change: the
model's Deployment rolls to them, the `-next` objects go). Roll back: `weight: 0` (it keeps
serving, gets no new conversations) or remove `next` (its objects go). Paths in problems are
relative to the model, as in ``rules.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import Field

from . import managed
from .streaming import streams
from .types import Image, Strict
from .values import MODEL_NAME_MAX, Problem

if TYPE_CHECKING:
    from .model import ModelConfig

# The next revision's objects are named `<model>-next...`: the model name leaves room for it.
NEXT_SUFFIX = "-next"
NEXT_NAME_MAX = MODEL_NAME_MAX - len(NEXT_SUFFIX)


class NextRevisionBase(Strict):
    """What a next revision changes; `source` is declared in ``model.NextRevision`` (the weight
    source union is defined there)."""

    weight: int = Field(
        ge=0, le=100, description="Percent of new conversations the gateway sends to this revision "
        "(0-100); a conversation stays on the revision it started on (the affinity key). `0` rolls back "
        "without removing it.",
    )
    image: Optional[Image] = Field(None, description="The revision's server image; unset: the model's.")
    args: Optional[tuple[str, ...]] = Field(
        None, description="The revision's extra server arguments, in place of the model's `args`; unset: the model's.")
    replicas: int = Field(1, ge=1, description="Server replicas of this revision (fixed: it is not autoscaled).")


def next_name(model: ModelConfig) -> str:
    return f"{model.name}{NEXT_SUFFIX}"


def revision_model(model: ModelConfig) -> ModelConfig:
    """The model that serves the next revision: the model with the revision's settings, named
    ``<model>-next``, fixed replicas, no next of its own; it answers to the model's name."""
    revision = model.next
    if revision is None:
        raise ValueError(f"model '{model.name}' declares no next revision")
    derived = model.model_copy(update={
        "name": next_name(model),
        "source": revision.source if revision.source is not None else model.source,
        "image": revision.image if revision.image is not None else model.image,
        "args": revision.args if revision.args is not None else model.args,
        "replicas": revision.replicas,
        "autoscaling": type(model.autoscaling)(),
        "next": None,
    })
    derived._revision_of = model.name
    return derived


def weights_model(model: ModelConfig) -> ModelConfig:
    """The model as it will be once promoted, as far as its weights go: its name, the revision's
    source. Its weights objects (volume, puller Job, gate) are the revision's, by name and spec."""
    revision = model.next
    if revision is None:
        raise ValueError(f"model '{model.name}' declares no next revision")
    return model.model_copy(update={"source": revision.source if revision.source is not None else model.source,
                                    "next": None})


def changes(model: ModelConfig, default_image: Optional[str] = None) -> list[str]:
    """What the next revision changes, in the words of the config (empty: nothing).
    ``default_image``: the image a model without its own runs (the platform's); the stack passes
    it, so a revision naming the image the model already runs changes nothing."""
    revision = model.next
    if revision is None:
        return []
    changed = []
    if revision.source is not None and revision.source != model.source:
        changed.append("source")
    if revision.image is not None and revision.image != (model.image or default_image):
        changed.append("image")
    if revision.args is not None and tuple(revision.args) != tuple(model.args):
        changed.append("args")
    return changed


def next_problems(model: ModelConfig) -> list[Problem]:
    """Where a next revision cannot be served: each with the setting to change."""
    if model.next is None:
        return []
    problems: list[Problem] = []
    unsupported = [
        (model.engine != "vllm", "engine", "vLLM models only (a NIM's revision is its image, which its operator "
         "or its profile cache pins); deploy the new NIM as another model"),
        (model.multi_node is not None, "multiNode", "single-pod models only (two LeaderWorkerSets of one model "
         "would each need whole nodes); deploy the new revision as another model"),
        (model.lora.enabled, "lora.enabled", "models without LoRA adapters only (an adapter is asked for by its "
         "own name, which both revisions would register: the split could not hold); remove lora or next"),
        (model.autoscaling.enabled and model.autoscaling.min_replicas == 0, "autoscaling.minReplicas",
         "models that do not sleep (a sleeping model's revisions would wake apart); set minReplicas: 1 or remove next"),
        (len(model.name) > NEXT_NAME_MAX, "name", f"model names of at most {NEXT_NAME_MAX} characters ('{model.name}' "
         f"is {len(model.name)}: the revision's objects are named '{model.name}{NEXT_SUFFIX}-...', which must fit "
         "Kubernetes' 63-character limit); shorten the name"),
    ]
    problems += [Problem("next", f"a next revision can be declared for {why} (ruled out here by {setting})")
                 for bad, setting, why in unsupported if bad]
    if problems:
        return problems
    if not changes(model):
        problems.append(Problem("next", "declares the revision already serving (no source, image or args of its "
                                "own that differ); set what the new revision changes, or remove next"))
        return problems
    derived = revision_model(model)
    if streams(derived) != streams(model):
        problems.append(Problem("next.source", "loads its weights otherwise than the model (`load: stream` on one "
                                "of them only): their pullers share the model's network policy; give both the same "
                                "load, or deploy the revision as another model"))
    if ("source" not in changes(model) and model.weights.access_mode == "ReadWriteOnce" and not streams(model)):
        problems.append(Problem("next", "keeps the model's source, so both revisions mount the model's one weights "
                                "volume, which ReadWriteOnce attaches to one node; set weights.accessMode: "
                                "ReadWriteMany, or give the revision a source of its own"))
    if revision_rwo_shared(model):
        # The model's own replicas are checked in model.py; the revision's Deployment mounts its
        # weights volume (the model's, or the one it will have once promoted) from every pod too.
        problems.append(Problem("next.replicas", f"{model.next.replicas} replicas cannot share a ReadWriteOnce "
                                "weights volume (replicas on two nodes hit Multi-Attach and never start); set "
                                "weights.accessMode: ReadWriteMany, or next.replicas: 1"))
    problems += [p.under("next") for p in managed.arg_problems(derived.args, derived.engine, streams(derived))
                 if p.path.startswith("args")]
    return problems


def revision_rwo_shared(model: ModelConfig) -> bool:
    """The next revision runs several pods on one ReadWriteOnce weights volume."""
    return (model.next is not None and model.next.replicas > 1 and model.weights.access_mode == "ReadWriteOnce"
            and not streams(revision_model(model)))


def unchanged_problems(model: ModelConfig, default_image: str) -> list[Problem]:
    """At the stack, with the image a model without its own runs: a revision whose only change is
    the image the model already runs (the model-level check compares with the model's own `image`,
    unset there)."""
    if model.next is None or model.engine != "vllm" or not changes(model) or changes(model, default_image):
        return []
    return [Problem("next.image", f"'{model.next.image}' is the image the model already runs "
                    "(platform.vllmImage; the model sets no image of its own), so the revision changes nothing; "
                    "set the new image, source or args, or remove next")]
