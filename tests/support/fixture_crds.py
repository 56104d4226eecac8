"""The operators' real CRDs on the shared simulated cluster, installed by the test modules that
need them, and the polling helper the cluster modules wait with.

A module that needs a CRD no controller here installs (KEDA's ScaledObject, the Prometheus
Operator's ServiceMonitor, the NIM operator's kinds) creates it from the operator's own generated
file (``tests/real_crds.py`` says where each comes from), adding the label
``llm-serving.dev/test-fixture: <value>`` as it creates it. The API server then enforces the
operator's real schema, defaults and CEL rules on everything the tests apply. The label is how a
module tells its own copy (possibly left by an interrupted run) from a foreign one (a real
operator's, or another module's): it deletes only its own, and waits until it is gone so that the
next module sees the cluster as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Optional

import pytest
import yaml

FIXTURE_LABEL = "llm-serving.dev/test-fixture"
WAIT = 120  # seconds for the API server to establish, serve or drop a CRD


def wait_for(predicate: Callable[[], bool], timeout: float, what: str,
             stop: Optional[Callable[[str], None]] = None) -> None:
    """Poll ``predicate`` until it is true; an exception it raises counts as "not yet" (and is
    named if time runs out). ``stop``, called with ``what`` between tries, raises to give up early."""
    deadline, last_error = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as error:  # noqa: BLE001 - retried until the deadline
            last_error = error
        if stop is not None:
            stop(what)
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


class FixtureCrds:
    """The CRDs in ``files`` (one CRD per file, as the operators ship them), each created with the
    label ``FIXTURE_LABEL: label_value``."""

    def __init__(self, files: Sequence[Path], label_value: str):
        self.label_value = label_value
        self.documents = [yaml.safe_load(Path(path).read_text()) for path in files]
        for path, document in zip(files, self.documents, strict=True):
            if (document or {}).get("kind") != "CustomResourceDefinition":
                raise ValueError(f"{path} is not one CustomResourceDefinition")
            # Unlabelled, the module would take its own CRD for a foreign one and never delete it.
            document["metadata"].setdefault("labels", {})[FIXTURE_LABEL] = label_value
        self.names = [document["metadata"]["name"] for document in self.documents]

    def ours(self, crd: dict) -> bool:
        return ((crd.get("metadata") or {}).get("labels") or {}).get(FIXTURE_LABEL) == self.label_value

    def installed(self, kube) -> dict[str, dict]:
        """Those of the names the cluster has now (ours or not), by name."""
        api, found = kube.ApiextensionsV1Api(), {}
        for name in self.names:
            try:
                found[name] = api.read_custom_resource_definition(name).to_dict()
            except kube.exceptions.ApiException as error:
                if error.status != 404:
                    raise
        return found

    def foreign(self, kube) -> list[str]:
        return [name for name, crd in self.installed(kube).items() if not self.ours(crd)]

    def refuse_foreign(self, kube, whose: str) -> None:
        """Fail the module when the cluster has a copy it did not install (``whose``: what that
        copy probably is): the module's tests need the CRD absent first, then as the fixture."""
        foreign = self.foreign(kube)
        if foreign:
            pytest.fail(f"the cluster has {', '.join(foreign)}, not installed by this module ({whose}); "
                        "it needs a cluster without them")

    def absent_until_installed(self, kube, whose: str) -> Iterator[None]:
        """The body of the autouse fixture of a module whose first tests need the CRDs absent:
        fail on a foreign copy, delete ours if an interrupted run left it, and delete it again
        when the module ends (after ``make_project`` has destroyed the stacks that used it)."""
        self.refuse_foreign(kube, whose)
        self.delete_ours(kube)
        yield
        self.delete_ours(kube)

    def install(self, kube) -> None:
        """Create every CRD, then wait until each is Established and its kind is served: a CRD is
        Established before every API server path lists its kind."""
        api = kube.ApiextensionsV1Api()
        for document in self.documents:
            api.create_custom_resource_definition(document)

        def established() -> bool:
            crds = self.installed(kube)
            return len(crds) == len(self.names) and all(
                any(c["type"] == "Established" and c["status"] == "True" for c in (crd["status"]["conditions"] or []))
                for crd in crds.values())

        wait_for(established, WAIT, f"{', '.join(self.names)} to be Established")
        custom = kube.CustomObjectsApi()

        def served() -> bool:
            for document in self.documents:
                spec = document["spec"]
                for version in (v["name"] for v in spec["versions"] if v.get("served")):
                    custom.list_cluster_custom_object(spec["group"], version, spec["names"]["plural"])
            return True

        wait_for(served, WAIT, f"the kinds of {', '.join(self.names)} to be served")

    def delete_ours(self, kube) -> None:
        """Delete the CRDs this module installed (a foreign copy is left alone), waiting until
        they are gone."""
        api = kube.ApiextensionsV1Api()
        for name, crd in self.installed(kube).items():
            if self.ours(crd):
                try:
                    api.delete_custom_resource_definition(name)
                except kube.exceptions.ApiException as error:
                    if error.status != 404:
                        raise
        wait_for(lambda: not any(self.ours(crd) for crd in self.installed(kube).values()), WAIT,
                 f"the fixture's {', '.join(self.names)} to be deleted")
