"""Test tiers: every test belongs to exactly one, by the folder it lives in.

The test command runs them cheapest first and stops at the first tier that fails
(scripts/test.sh), so a broken config check never waits for a cluster:

- ``unit``: starts nothing (no server, no real binary beyond Python, no cluster); needs only the
  venv. config, compile, component, providers, policies, ...
- ``servers``: real servers and binaries on loopback (nginx, rclone, S3 servers, the Stargate
  binaries, actionlint, the images built here run in a containerd of the tests' own). gateway, puller,
  streamer, conformance, ci, images (its vLLM image test is in the engine tier).
- ``cluster``: the simulated cluster and the Pulumi CLI. integration, faults.
- ``engine``: the real vLLM of each release line (the engine kit). engine.

A module that does not fit its folder's tier says so with ``pytestmark = pytest.mark.<tier>``
(an explicit tier wins over the folder's); the older ``integration`` marker means ``cluster``.
A test in a folder this table does not name fails the collection: a new folder is one line here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TIERS = ("unit", "servers", "cluster", "engine")

FOLDER_TIERS = {
    "": "unit",  # tests/test_*.py at the top (the hygiene test)
    "bench": "unit",  # each benchmark's smallest case says its own tier (tests/bench/smallest.py)
    "cli": "unit",
    "compile": "unit",
    "component": "unit",
    "config": "unit",
    "contract": "unit",
    "library": "unit",
    "policies": "unit",
    "preflight": "unit",
    "preview_report": "unit",
    "program": "unit",
    "providers": "unit",
    "security": "unit",
    "gateway": "servers",
    "puller": "servers",
    "streamer": "servers",
    "conformance": "servers",
    "ci": "servers",
    "integration": "cluster",
    "faults": "cluster",
    "engine": "engine",
    "images": "servers",
}

TESTS = Path(__file__).resolve().parent

# Cluster modules that change or need cluster-wide state, with why: marked ``cluster_wide`` and
# run in their groups below, each on a cluster of its own, beside the other cluster modules
# (scripts/test.sh; on one cluster under xdist, tests/support/xdist_groups.py keeps them on one
# worker together).
CLUSTER_WIDE_MODULES = {
    "test_autoscaling_on_cluster": "installs KEDA's CRD, needs it absent first",
    "test_metrics_on_cluster": "installs the ServiceMonitor CRD, needs it absent first",
    "test_nim_operator_cluster": "installs the NIM operator's CRDs, needs them absent first",
    "test_nim_multinode_cluster": "the NIM operator's CRDs; groups of 4- and 8-GPU pods",
    "test_config_property_on_cluster": "installs every operator CRD the others need absent",
    "test_multinode_on_cluster": "LWS groups on both GPU nodes; counts free nodes",
    "test_multinode_per_pod_on_cluster": "LWS groups on both GPU nodes; node-local volumes",
    "test_placement_on_cluster": "node-local volumes of every node (the local-node pool)",
    "test_real_node_cluster": "the real node: one per machine (scripts/node/), and its stop is tested",
    "test_real_pods_cluster": "a CPU model in real pods on the real node (one per machine)",
    "test_real_gateway_cluster": "gateway, router and a CPU model on the real node; KEDA's CRDs",
    "test_real_hub_verify_cluster": "a Hub puller refused by its verify step on the real node (one per machine)",
    "test_bench_wake_smoke": "installs KEDA's CRDs (bench/wake.py), which others need absent first",
}


# The cluster-wide modules in groups, each group on a simulated cluster of its own
# (``llm-serving-<group>``, or ``$LLM_SERVING_CLUSTER-<group>``; started by scripts/test.sh beside
# the default one), its modules one after the other: a group's modules share what makes them
# cluster-wide (CRDs that must be absent first; the GPU nodes' free GPUs and node-local volumes),
# another group's cluster has its own. The groups and the isolated modules (on the default
# cluster) run side by side.
CLUSTER_WIDE_GROUPS = {
    "crds": ("test_autoscaling_on_cluster", "test_config_property_on_cluster", "test_metrics_on_cluster",
             "test_nim_operator_cluster",
             # Last: it leaves KEDA's CRDs as it found them, but a failure mid-run could leave them.
             "test_bench_wake_smoke"),
    "gpus": ("test_multinode_on_cluster", "test_multinode_per_pod_on_cluster", "test_nim_multinode_cluster",
             "test_placement_on_cluster"),
    # The one cluster with the real node (scripts/test.sh REAL_NODE_GROUP starts it with the node).
    # Real pods first: the real-node module's last test stops the cluster. The gateway module
    # installs KEDA's CRDs (and takes them off): nothing else in this group needs them absent.
    "realnode": ("test_real_pods_cluster", "test_real_gateway_cluster", "test_real_hub_verify_cluster",
                 "test_real_node_cluster"),
}


def cluster_wide_files() -> dict[str, list[str]]:
    """Each group's test files, relative to the repository, in the order the group runs them."""
    found = {path.stem: path for path in TESTS.rglob("test_*.py")}
    return {group: [found[stem].relative_to(TESTS.parent).as_posix() for stem in stems]
            for group, stems in CLUSTER_WIDE_GROUPS.items()}


def folder_of(path: Path) -> str:
    relative = path.resolve().relative_to(TESTS)
    return relative.parts[0] if len(relative.parts) > 1 else ""


def tier_of(item: pytest.Item) -> str:
    explicit = [mark.name for mark in item.iter_markers() if mark.name in TIERS]
    if len(set(explicit)) > 1:
        raise pytest.UsageError(f"{item.nodeid}: in more than one tier ({', '.join(sorted(set(explicit)))}); keep one")
    if explicit:
        return explicit[0]
    if item.get_closest_marker("integration"):
        return "cluster"
    folder = folder_of(Path(str(item.fspath)))
    if folder not in FOLDER_TIERS:
        raise pytest.UsageError(
            f"{item.nodeid}: tests/{folder} is in no test tier; add it to FOLDER_TIERS in tests/tiers.py "
            f"(one of {', '.join(TIERS)})")
    return FOLDER_TIERS[folder]


def mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if not item.get_closest_marker(tier):
            item.add_marker(getattr(pytest.mark, tier))
        if tier == "cluster" and Path(str(item.fspath)).stem in CLUSTER_WIDE_MODULES:
            item.add_marker(pytest.mark.cluster_wide)


# Where a run that collects the whole suite (the unit tier, scripts/test.sh) writes which files
# hold each tier's tests, so the later tiers collect only those: collecting all 3,300 tests to
# select a tier's hundred cost ~12 s of CPU per process, and the cluster tier starts seven of them
# (xdist workers, the cluster-wide groups, the engine tier) at once on 2 cores.
TIER_FILES_ENV = "LLM_SERVING_TIER_FILES"


def tier_files(items: list[pytest.Item]) -> dict[str, list[str]]:
    """Each tier's test files (relative to the repository), from the marks of collected items."""
    files: dict[str, set[str]] = {tier: set() for tier in TIERS}
    for item in items:
        path = Path(str(item.fspath)).resolve().relative_to(TESTS.parent).as_posix()
        for tier in TIERS:
            if item.get_closest_marker(tier):
                files[tier].add(path)
    return {tier: sorted(paths) for tier, paths in files.items()}


def write_tier_files(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With LLM_SERVING_TIER_FILES set, write tier_files there, when this run collects the whole
    suite (no path given; `-m`/`-k` deselect after this): a narrowed collection would leave
    tests out of the later tiers."""
    target = os.environ.get(TIER_FILES_ENV)
    whole = [Path(str(config.rootpath), arg).resolve() for arg in config.args] == [TESTS]
    if not target or not items or not whole:
        return
    temporary = Path(f"{target}.{os.getpid()}")
    temporary.write_text(json.dumps(tier_files(items), indent=1) + "\n")
    temporary.replace(target)  # atomic: both unit workers write the same content


if __name__ == "__main__":
    # `python -m tests.tiers cluster-groups`: one line per group, "<group> <file> <file>...", for
    # scripts/test.sh.
    import sys

    if sys.argv[1:2] == ["files"] and len(sys.argv) == 4:
        # `python -m tests.tiers files <tier> <written file>`: the tier's files, one per line;
        # nothing when the file is missing (the tier then collects the whole suite).
        written = Path(sys.argv[3])
        if written.is_file():
            print("\n".join(json.loads(written.read_text()).get(sys.argv[2], [])))
        sys.exit(0)
    if sys.argv[1:] != ["cluster-groups"]:
        sys.exit("usage: python -m tests.tiers cluster-groups | files <tier> <tier files json>")
    for group, files in cluster_wide_files().items():
        print(group, *files)
