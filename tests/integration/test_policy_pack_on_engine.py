"""The policy pack under the real engine: `pulumi preview --policy-pack policies` (issue 7).

The pack's PulumiPolicy.yaml runs it with the project's virtualenv (`virtualenv: ../.venv`,
which already has pulumi-policy), so nothing is installed and nothing needs a network. The
shipped stacks pass; a deliberately bad stack (tests/fixtures/stacks/Pulumi.policy-bad.yaml,
mutated by Pulumi transforms since no valid config can express it) fails, naming every rule it
breaks; a pack config can tighten a rule until a compliant stack fails, or relax it to advisory.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from testkit.harness import REPO, Project, require_engine
from tests.support.local_stack import off_the_real_node

sys.path.insert(0, str(REPO / "tests" / "fixtures" / "stacks"))
import mutating_program

pytestmark = pytest.mark.integration

PACK = ("--policy-pack", "policies")
CI_CONFIG = ("--policy-pack-config", "policies/config.example.json")
FIXTURES = REPO / "tests" / "fixtures" / "stacks"
# The CLI's violation heading; `[severity: <level>]` since the pack sets pulumi-policy's severity.
# (Optional in the pattern: a CLI that prints no severity still has its violations found.)
RULE_LINE = re.compile(r"- \[(mandatory|advisory)\](?: \[severity: (?:low|medium|high|critical)\])?\s+(llm-serving-[a-z0-9-]+)\s+\(")


def _stack_config(path: Path) -> dict:
    document = yaml.safe_load(path.read_text())["config"]
    return {k.split(":", 1)[1]: v for k, v in document.items() if k.startswith("llm-serving:")}


def _violations(output: str) -> set[tuple[str, str]]:
    return {(level, rule) for level, rule in RULE_LINE.findall(output)}


def _preview(project: Project, *extra: str):
    return project.run("preview", *PACK, *extra, check=False, timeout=300)


def _assert_passes(result) -> None:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "llm-serving@v0.2.0" in output, "the pack did not run"
    assert _violations(output) == set(), output[-6000:]


@pytest.fixture
def render_project(tmp_path):
    require_engine()

    def make(config: dict, stack: str = "render") -> Project:
        (tmp_path / stack).mkdir(parents=True, exist_ok=True)
        return Project(tmp_path / stack, stack, config)

    return make


def test_shipped_render_stack_passes(render_project):
    project = render_project(_stack_config(REPO / "stacks" / "Pulumi.render.yaml"))
    _assert_passes(_preview(project, *CI_CONFIG))


def test_shipped_gpu_cluster_stack_passes_when_rendered(render_project):
    # The GPU example (LoRA, tensor parallel, NIM on both paths, a 3-replica router with its
    # backend router and TLS, the teardown identity) without its cluster: rendered to files.
    config = _stack_config(REPO / "stacks" / "Pulumi.gpu-cluster.yaml")
    config["cluster"] = {"renderYamlToDirectory": "build/gpu-cluster"}
    project = render_project(config, "gpu-cluster")
    _assert_passes(_preview(project, *CI_CONFIG))


def test_local_stack_deploys_on_the_simulated_cluster_under_the_pack(make_project):
    def config(namespace: str) -> dict:
        # On the default simulated cluster: the real-node placement left out (tests/support/local_stack.py).
        raw = off_the_real_node(_stack_config(REPO / "stacks" / "Pulumi.local.yaml"))
        raw["platform"] = {**raw["platform"], "namespace": namespace}
        return raw

    project = make_project(config)
    # `up` runs the pack on the preview and again on the real values of the update.
    result = project.run("up", "--yes", *PACK, *CI_CONFIG, check=False, timeout=600)
    _assert_passes(result)
    _assert_passes(_preview(project, *CI_CONFIG, "--expect-no-changes"))


def test_bad_stack_fails_naming_each_broken_rule(render_project):
    fixture = FIXTURES / "Pulumi.policy-bad.yaml"
    project = render_project(_stack_config(fixture), "policy-bad")
    mutating_program.install(project.root)
    document = yaml.safe_load(project.config_file.read_text())
    document["config"]["fixture:mutations"] = yaml.safe_load(fixture.read_text())["config"]["fixture:mutations"]
    project.config_file.write_text(yaml.safe_dump(document, sort_keys=False))

    result = _preview(project, *CI_CONFIG)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-6000:]
    found = _violations(output)
    assert found == {("mandatory", rule) for rule in (
        "llm-serving-pod-engine-identity",               # runAsUser 0
        "llm-serving-pod-run-as-non-root",
        "llm-serving-pod-puller-server-identity-match",  # the puller still runs as 2000
        "llm-serving-image-fully-qualified",             # vllm/vllm-openai:latest
        "llm-serving-image-no-latest",
        "llm-serving-pod-no-privileged",
        "llm-serving-pod-no-privilege-escalation",
        "llm-serving-pod-no-host-path",
    )}, output[-6000:]
    assert "qwen-small-server" in output
    # The same program without mutations is compliant: the failures are the mutations'.
    document["config"].pop("fixture:mutations")
    project.config_file.write_text(yaml.safe_dump(document, sort_keys=False))
    _assert_passes(_preview(project, *CI_CONFIG))


def test_pack_config_tightens_and_relaxes_a_rule(render_project, tmp_path):
    project = render_project(_stack_config(REPO / "stacks" / "Pulumi.render.yaml"))
    tight = tmp_path / "tight.json"
    tight.write_text(json.dumps({"llm-serving-pod-engine-identity": {"vllmUid": 1234}}))
    result = _preview(project, "--policy-pack-config", str(tight))
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert _violations(output) == {("mandatory", "llm-serving-pod-engine-identity")}, output[-4000:]
    assert "vllm server pods must use 1234" in output

    advisory = tmp_path / "advisory.json"
    advisory.write_text(json.dumps({"llm-serving-pod-engine-identity": {"vllmUid": 1234, "enforcementLevel": "advisory"}}))
    result = _preview(project, "--policy-pack-config", str(advisory))
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert _violations(result.stdout) == {("advisory", "llm-serving-pod-engine-identity")}
