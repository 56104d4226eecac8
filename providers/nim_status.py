"""Old import paths of the operator-path NIM providers: deployed stacks still name them.

The engine stores each dynamic resource's provider pickled by module path and class name, and
runs that stored provider on `pulumi refresh` and `pulumi destroy`. Stacks deployed before the two
model paths shared one status provider and one CRD check hold ``providers.nim_status.
NimStatusProvider`` and ``providers.nim_status.NimOperatorCheckProvider``; both names resolve to
the shared providers, which read the props those stacks recorded (``StatusProps`` and
``RequiredCrdsProps`` accept them). Nothing new should import from here.

No import-time side effects: imported by pickled providers.
"""

from __future__ import annotations

from .crd_check import CrdsMissing, RequiredCrdsProvider
from .resources import NimOperatorCheck
from .status import ModelNotServing, ModelStatusProvider

NimStatusProvider = ModelStatusProvider
NimOperatorCheckProvider = RequiredCrdsProvider
NimModelNotServing = ModelNotServing
NimOperatorMissing = CrdsMissing

__all__ = ["NimModelNotServing", "NimOperatorCheck", "NimOperatorCheckProvider", "NimOperatorMissing", "NimStatusProvider"]
