"""bench/wake.py's smallest case: one wake through KEDA's real operator. A module of its own, last
in the cluster tier's crds group (tests/tiers.py): wake.py installs KEDA's CRDs, which the group's
other modules need absent first; it takes them off again when they were not there before."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.bench.bench_runner import run_case
from tests.bench.smallest import SMALLEST

pytestmark = pytest.mark.cluster
KEDA_CRD = "scaledobjects.keda.sh"


def crd_present() -> bool:
    return subprocess.run(["kubectl", "get", "crd", KEDA_CRD], capture_output=True).returncode == 0


@pytest.mark.parametrize("case", [case for case in SMALLEST if case.tier == "crds"], ids=lambda c: c.script)
def test_the_smallest_case_runs(case, tmp_path):
    before = crd_present()
    try:
        result = run_case(case, tmp_path)
        assert result["wake_first_byte_s"], f"bench/wake.py woke nothing: {result}"
    finally:
        if not before:
            subprocess.run(["kubectl", "delete", "--wait=true", "-f", f"{os.environ['LLM_SERVING_CRDS_DIR']}/keda"],
                           capture_output=True, timeout=120)
