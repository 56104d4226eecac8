"""The cluster-wide groups (tests/tiers.py): scripts/test.sh runs each group on a simulated cluster
of its own beside the isolated modules, so a cluster-wide module left out of every group would run
beside the others on the default cluster (where its CRDs or GPU counts meet theirs), and a module
in two groups would run twice, on two clusters, at once."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.support.xdist_groups import CLUSTER_WIDE, scope_of
from tests.tiers import CLUSTER_WIDE_GROUPS, CLUSTER_WIDE_MODULES, FOLDER_TIERS, TESTS, cluster_wide_files


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
