"""A model's next revision: served beside the current one under the one name clients use, taking
`weight` percent of new conversations at the gateway until it is promoted or rolled back.

The next revision's server side is its own set of objects, named ``<model>-next`` (Deployment,
Service, status): ``model.revision_model`` derives that model (a ``model.RevisionServer``) from
the declaration, so every compiler that serves a model serves it, unchanged. What differs is asked
of ``served_name`` (the name the engine answers to and the router fronts: the model's, so a
client's `"model": "tiny"` reaches either revision) and ``is_next_revision``. The router tells the two revisions
apart by the id each pod's pylon registers, which is the object name (``<model>-next``).

Its weights (volume, puller Job, gate) are those the model will have once promoted
(``model.weights_model``): same objects, same logical names (compile/plan.py ``weights_names``), so a
promote keeps them, verified, and deletes the previous revision's; a revision on the model's own
source mounts the model's volume.

Promote: write the next revision's settings into the model and remove `next` (one change: the
model's Deployment rolls to them, the `-next` objects go). Roll back: `weight: 0` (it keeps
serving, gets no new conversations) or remove `next` (its objects go).

This module is the section alone (``next``, one type); what a revision may be given its model
(``next_problems``) is checked in ``model.py``, against the platform's image in ``stack.py``.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from .sources import WeightSource
from .types import Image, Strict
from .values import MODEL_NAME_MAX

# The next revision's objects are named `<model>-next...`: the model name leaves room for it.
NEXT_SUFFIX = "-next"
NEXT_NAME_MAX = MODEL_NAME_MAX - len(NEXT_SUFFIX)


class NextRevision(Strict):
    """The model's next revision: its own pods beside the serving ones, under the model's name,
    with a share of the traffic."""

    weight: int = Field(
        ge=0, le=100, description="Percent of new conversations the gateway sends to this revision "
        "(0-100); a conversation stays on the revision it started on (the affinity key). `0` rolls back "
        "without removing it.",
    )
    image: Optional[Image] = Field(None, description="The revision's server image; unset: the model's.")
    args: Optional[tuple[str, ...]] = Field(
        None, description="The revision's extra server arguments, in place of the model's `args`; unset: the model's.")
    replicas: int = Field(1, ge=1, description="Server replicas of this revision (fixed: it is not autoscaled).")
    source: Optional[WeightSource] = Field(
        None, description="The revision's weights; unset: the model's. Pulled and verified before the "
        "revision serves, as the model's.")
