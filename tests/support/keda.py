"""KEDA's real CRDs and operator for the cluster modules that scale to zero
(tests/integration/conftest.py makes fixtures of them: ``keda_crd_installed``, ``keda_operator``).

KEDA 2.16.1's operator (built from its Go module: scripts/toolchain/operators.sh) runs on this
machine as a host process against the test's cluster, watching one namespace
(testkit/keda_operator.py). It needs every KEDA kind served (its controllers watch them all).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.keda_operator import start_operator, throwaway_certs
from tests.support.fixture_crds import FixtureCrds
from tests.support.real_crds import operator_crd

KEDA_CRD = FixtureCrds([operator_crd("keda", "keda.sh_scaledobjects.yaml")], "keda-crds")
KEDA_OPERATOR_CRDS = FixtureCrds([operator_crd("keda", name) for name in (
    "keda.sh_scaledjobs.yaml", "keda.sh_triggerauthentications.yaml", "keda.sh_clustertriggerauthentications.yaml",
    "eventing.keda.sh_cloudeventsources.yaml", "eventing.keda.sh_clustercloudeventsources.yaml")], "keda-operator-crds")

Started = tuple[subprocess.Popen, Path]


def operators(kube, certs_dir: Path) -> Iterator[Callable[[str], Started]]:
    """The body of a fixture (``KEDA_CRD`` installed first): yields ``start(namespace)``, which
    starts an operator watching ``namespace`` and returns it with its log's path; every operator
    started is stopped, and the other KEDA CRDs deleted, when the fixture ends."""
    binary = os.environ.get("LLM_SERVING_KEDA_OPERATOR", "")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"KEDA's operator is not built ({binary or 'LLM_SERVING_KEDA_OPERATOR unset'}); run "
                    "scripts/toolchain/operators.sh")
    KEDA_OPERATOR_CRDS.refuse_foreign(kube, "a real KEDA")
    KEDA_OPERATOR_CRDS.delete_ours(kube)
    KEDA_OPERATOR_CRDS.install(kube)
    certs = throwaway_certs(certs_dir)
    started = []

    def start(namespace: str) -> Started:
        log = open(certs / f"operator-{namespace}.log", "w")
        proc = start_operator(binary, namespace, certs, log)
        started.append((proc, log))
        return proc, certs / f"operator-{namespace}.log"

    yield start
    for proc, log in started:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    KEDA_OPERATOR_CRDS.delete_ours(kube)
