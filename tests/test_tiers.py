"""The cluster-wide groups (tests/tiers.py): scripts/test.sh runs each group on a simulated cluster
of its own beside the isolated modules, so a cluster-wide module left out of every group would run
beside the others on the default cluster (where its CRDs or GPU counts meet theirs), and a module
in two groups would run twice, on two clusters, at once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from tests.support.xdist_groups import CLUSTER_WIDE, scope_of
from tests.tiers import (
    CLUSTER_WIDE_GROUPS,
    CLUSTER_WIDE_MODULES,
    FOLDER_TIERS,
    TESTS,
    TIER_FILES_ENV,
    cluster_wide_files,
    tier_files,
    write_tier_files,
)


def test_every_cluster_wide_module_is_in_exactly_one_group():
    counts = Counter(stem for stems in CLUSTER_WIDE_GROUPS.values() for stem in stems)
    assert set(counts) == set(CLUSTER_WIDE_MODULES), set(counts) ^ set(CLUSTER_WIDE_MODULES)
    assert [stem for stem, n in counts.items() if n > 1] == []


def test_group_names_make_cluster_names():
    # scripts/test.sh names the group's cluster llm-serving-<group> (cluster.sh: a DNS label).
    for group in CLUSTER_WIDE_GROUPS:
        assert group.isascii() and group.replace("-", "").isalnum() and group == group.lower(), group


def test_each_group_lists_cluster_tier_files_in_its_order():
    files = cluster_wide_files()
    assert list(files) == list(CLUSTER_WIDE_GROUPS)
    for group, paths in files.items():
        assert [Path(path).stem for path in paths] == list(CLUSTER_WIDE_GROUPS[group])
        for path in paths:
            assert (TESTS.parent / path).is_file(), path
            assert FOLDER_TIERS[Path(path).parts[1]] == "cluster", path
            # On one cluster under xdist (a developer's `-n`), they still share one worker.
            assert scope_of(f"{path}::test_x") == CLUSTER_WIDE


def test_the_command_line_prints_one_line_per_group():
    result = subprocess.run([sys.executable, "-m", "tests.tiers", "cluster-groups"], cwd=TESTS.parent,
                            capture_output=True, text=True, check=True)
    lines = [line.split() for line in result.stdout.splitlines()]
    assert {line[0]: line[1:] for line in lines} == cluster_wide_files()


class _Item:
    """What tier_files reads of a collected test: its file and its marks."""

    def __init__(self, path: str, *tiers: str):
        self.fspath, self.tiers = TESTS.parent / path, tiers

    def get_closest_marker(self, name: str):
        return name if name in self.tiers else None


ITEMS = [_Item("tests/engine/test_whole_path.py", "engine"), _Item("tests/gateway/test_gateway_js.py", "servers"),
         _Item("tests/security/test_secrets_engine.py", "unit"),
         _Item("tests/security/test_secrets_engine.py", "cluster"), _Item("tests/config/test_config.py", "unit")]


def test_each_tier_lists_the_files_of_its_tests_wherever_they_live():
    """A module marked for a tier outside its folder's is listed under that tier too: a file of a
    tier missing from the list would never run in the later tiers (scripts/test.sh tier_paths)."""
    assert tier_files(ITEMS) == {
        "unit": ["tests/config/test_config.py", "tests/security/test_secrets_engine.py"],
        "servers": ["tests/gateway/test_gateway_js.py"],
        "cluster": ["tests/security/test_secrets_engine.py"],
        "engine": ["tests/engine/test_whole_path.py"],
    }


def test_only_a_whole_collection_writes_them(tmp_path, monkeypatch):
    target = tmp_path / "tier-files.json"
    monkeypatch.setenv(TIER_FILES_ENV, str(target))
    narrowed = SimpleNamespace(rootpath=TESTS.parent, args=["tests/engine"])
    write_tier_files(narrowed, ITEMS)
    assert not target.exists()
    write_tier_files(SimpleNamespace(rootpath=TESTS.parent, args=["tests"]), ITEMS)
    assert json.loads(target.read_text()) == tier_files(ITEMS)
    assert not list(tmp_path.glob("tier-files.json.*")), "the temporary file is renamed into place"


def test_the_command_line_prints_a_tiers_files_or_nothing(tmp_path):
    target = tmp_path / "tier-files.json"
    command = [sys.executable, "-m", "tests.tiers", "files", "servers", str(target)]
    assert subprocess.run(command, cwd=TESTS.parent, capture_output=True, text=True, check=True).stdout == ""
    target.write_text(json.dumps({"servers": ["tests/gateway/test_a.py", "tests/ci/test_b.py"]}))
    out = subprocess.run(command, cwd=TESTS.parent, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["tests/gateway/test_a.py", "tests/ci/test_b.py"]


def test_the_cluster_scheduler_deals_the_longest_modules_first():
    from tests.support.xdist_groups import MODULE_SECONDS, longest_first, weight_of

    longest = max(MODULE_SECONDS, key=MODULE_SECONDS.get)
    queue = {"tests/faults/test_new_module.py": {"a": False}, longest: {"b": False},
             "tests/integration/test_render_stack.py": {f"t{i}": False for i in range(9)}}
    assert [scope for scope, _ in longest_first(queue)][0] == longest
    # A module not measured yet weighs by its tests; the cluster-wide unit is their sum.
    assert weight_of("tests/faults/test_new_module.py", 8) == 8 * weight_of("tests/faults/test_new_module.py", 1) > 0
    assert weight_of(CLUSTER_WIDE, 1) > MODULE_SECONDS["tests/integration/test_autoscaling_on_cluster.py"]
    # Every measured module still exists (a renamed one would fall back to the guess silently).
    assert [m for m in MODULE_SECONDS if not (TESTS.parent / m).is_file()] == []


def test_the_real_node_group_is_the_one_the_test_command_gives_the_real_node():
    """scripts/test.sh starts the real node (one per machine) only on the cluster of the group it
    names: a renamed group would run its module without the node, and the module would start a
    second cluster of its own."""
    script = (TESTS.parent / "scripts" / "test.sh").read_text()
    named = [line.split("=", 1)[1] for line in script.splitlines() if line.startswith("REAL_NODE_GROUP=")]
    assert named == ["realnode"] and "realnode" in CLUSTER_WIDE_GROUPS
    # The module whose last test stops the cluster (and checks nothing is left) runs last.
    assert CLUSTER_WIDE_GROUPS["realnode"][-1] == "test_real_node_cluster"
