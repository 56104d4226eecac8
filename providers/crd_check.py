"""RequiredCrds: a stack that needs another operator's custom resources fails at preview, with the
setting that needs them and how to install them or switch it off, instead of half-way through an
`up` with "no matches for kind".

``check`` runs during preview as well: a definite answer (the CRD is missing, or does not serve
the version we write) fails it; a cluster that cannot be read now (unreachable, 403) is undecided
there and checked again by ``create``. Used by the router (cert-manager for TLS, the Prometheus
Operator for the ServiceMonitor) and by operator-path NIM models (the k8s-nim-operator).

Pickled into the stack's state: no import-time side effects, clients built inside methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from pulumi.dynamic import CheckFailure, CheckResult, CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from contract.props import STACK_CRDS_OWNER, NimOperatorCheckProps, RequiredCrdsProps

from . import kube
from .failures import Reported, reported
from .inputs import changed_inputs, now


class CrdsMissing(Reported):
    """The cluster lacks custom resource definitions the stack needs; the message says what to do."""


def apiextensions(clients: kube.Clients) -> Any:
    from kubernetes import client

    return client.ApiextensionsV1Api(clients.core.api_client)


def missing_crds(clients: kube.Clients, api: Any, required: list[tuple[str, str]]) -> list[str]:
    """Of ``required`` (CRD name, version), those the cluster lacks or does not serve.

    404 means missing; any other failure to read (403, unreachable) is raised: it proves nothing.
    """
    missing = []
    for name, version in required:
        try:
            crd = kube.to_dict(clients, kube.call(clients, api.read_custom_resource_definition, name))
        except Exception as error:
            if kube.is_not_found(error):
                missing.append(name)
                continue
            raise
        versions = ((crd or {}).get("spec") or {}).get("versions") or []
        if not any(v.get("name") == version and v.get("served") for v in versions):
            missing.append(f"{name} (version {version} not served)")
    return missing


def missing_message(props: RequiredCrdsProps, missing: list[str]) -> str:
    """One line per setting whose CRDs are missing: the setting, the CRDs, the fix. The stack's
    check (every CRD of the stack at once) puts them under a sentence, one per line."""
    lines = []
    for requirement in props.requirements:
        gone = [m for m in missing if m.split(" ", 1)[0] in requirement.crds]
        if gone:
            lines.append(f"{requirement.field} needs {', '.join(gone)}, missing on this cluster: {requirement.fix}")
    if props.owner == STACK_CRDS_OWNER:
        return (f"this cluster lacks {len(missing)} custom resource definition{'s' if len(missing) != 1 else ''} "
                "the stack needs; each with the setting that needs it and the fix:\n"
                + "\n".join(f"  - {line}" for line in lines))
    return f"{props.owner}: " + "; ".join(lines)


def check_required(props: dict, connect: Optional[Callable[[kube.Target], kube.Clients]] = None,
                   api_for: Optional[Callable[[kube.Clients], Any]] = None) -> None:
    """Raise ``CrdsMissing`` when the cluster lacks a CRD ``props`` (either wire shape) requires."""
    wanted = RequiredCrdsProps.from_dict(props)
    clients = (connect or kube.connect)(wanted.cluster.kube())
    required = list(dict.fromkeys((name, r.version) for r in wanted.requirements for name in r.crds))
    missing = missing_crds(clients, (api_for or apiextensions)(clients), required)
    if missing:
        raise CrdsMissing(missing_message(wanted, missing))


def multi_node_change(olds: dict, news: dict) -> Optional[str]:
    """Why an operator-path model's ``multiNode`` may not change, or None. The NIM operator's
    webhook refuses any change of a NIMService's ``spec.multiNode`` (k8s-nim-operator v3.1.2,
    validateMultiNodeImmutability; adding or removing it too), and a same-name replacement cannot be
    previewed (the dry run lands on the live object): so the change is refused here, at preview,
    before anything reaches the cluster. ``olds`` are the deployed check's inputs (empty at create)."""
    if not olds or "crds" not in olds or "crds" not in news:
        return None  # not deployed yet, or not an operator-path model's check
    key = NimOperatorCheckProps.MULTI_NODE_PROPERTY
    before, after = olds.get(key) or "", news.get(key) or ""
    if before == after:
        return None
    model = news.get("model") or "?"
    return (f"model {model}: multiNode cannot change on a deployed NIMService: the NIM operator refuses any "
            f"change of spec.multiNode (immutable), so `pulumi up` would stop halfway. Deployed: "
            f"{before or 'no multiNode'}; asked: {after or 'no multiNode'}. Fix: keep models[].multiNode as "
            "deployed, or take the model down first (remove it from models, `pulumi up`), then add it back "
            "with the new multiNode (its NIMCache downloads the weights again)")


class RequiredCrdsProvider(ResourceProvider):
    """The check as a resource, for the router's settings and for operator-path NIM models alike:
    the recorded props (``RequiredCrdsProps``, or the NIM check's ``model`` / ``crds`` shape) say
    what is required, the property a preview failure names and the resource's id."""

    serialize_as_secret_always = False
    # Tests hand in a fake; the deployed provider connects from its props (and, pickled into
    # the stack's state, carries no instance state).
    _connect: Optional[Callable] = None

    def __init__(self, connect: Optional[Callable] = None):
        if connect is not None:
            self._connect = connect

    def check(self, olds: dict, news: dict) -> CheckResult:
        failures = []
        changed = multi_node_change(olds, news)
        if changed:
            failures.append(CheckFailure(NimOperatorCheckProps.MULTI_NODE_PROPERTY, changed))
        try:
            check_required(news, self._connect)
        except CrdsMissing as missing:
            # No property: the engine then prints the reason as a sentence ("... has a problem:
            # <reason>"); with one it first dumps that property's whole value (`property
            # requirements value {[{map[crds:...`), which hid the message (issue 38).
            failures.append(CheckFailure("", str(missing)))
        except Exception:  # noqa: BLE001 - unreachable or forbidden: undecided, not failed
            pass
        return CheckResult(news, failures)

    @reported
    def create(self, props: dict) -> CreateResult:
        check_required(props, self._connect)
        return CreateResult(RequiredCrdsProps.from_dict(props).resource_id, {**props, "checked_at": now()})

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        changed = changed_inputs(olds, news)
        return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    @reported
    def update(self, _id: str, _olds: dict, news: dict) -> UpdateResult:
        check_required(news, self._connect)
        return UpdateResult({**news, "checked_at": now()})

    def read(self, id_: str, props: dict) -> ReadResult:
        return ReadResult(id_, props)

    def delete(self, _id: str, _props: dict) -> None:
        return None
