"""Pulumi.yaml's `config:` block and default providers under the real CLI (issue 33).

- The declared types: a section of the wrong type is refused by the engine, before the program
  runs and before any connection to the cluster; every shipped stack passes.
- Default providers: `kubernetes` is disabled, so a Kubernetes resource declared without the
  program's provider is refused; no resource of a deployed stack uses a default Kubernetes
  provider (tests/integration/test_local_stack.py reads the state).
- The stack secrets are not declared: what the engine does with a typed `secret: true` key is
  measured here (it makes the key required, and refuses a default), which is why; a plain-text
  `hfToken` is refused by the program (tests/faults/test_bad_input_preview.py) and, when set, by
  the CLI's own check.

The refusals need the CLI, not the simulated cluster: those stacks point at a loopback listener
that records connections (tests/support/no_cluster.py). The shipped stacks' previews read the
simulated cluster (nothing is created).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from testkit.harness import REPO, Project, require_engine, small_model, stack_config
from tests.support.no_cluster import ConnectionTrap, write_kubeconfig

pytestmark = pytest.mark.integration


def _require_pulumi() -> None:
    if not shutil.which("pulumi"):
        pytest.fail("these tests need the pulumi CLI on PATH; run them through scripts/test.sh")


def _trap_kubeconfig(path: Path, server: str, contexts: tuple[str, ...] = ()) -> Path:
    """The trap's kubeconfig, with extra context names (a stack may name its context)."""
    write_kubeconfig(path, server)
    document = yaml.safe_load(path.read_text())
    for name in contexts:
        document["contexts"].append({"name": name, "context": {"cluster": "trap", "user": "trap"}})
    path.write_text(yaml.safe_dump(document))
    return path


def _preview(project: Project, trap: ConnectionTrap, contexts: tuple[str, ...] = ()):
    project.env["KUBECONFIG"] = str(_trap_kubeconfig(project.root / "kubeconfig", trap.https_url, contexts))
    result = project.run("preview", check=False, timeout=600)
    return result.returncode, result.stdout + result.stderr


def _cluster_kubeconfig(path: Path, contexts: tuple[str, ...]) -> Path:
    """The simulated cluster's kubeconfig, with the stack's context names for its current one."""
    document = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    current = next(c for c in document["contexts"] if c["name"] == document["current-context"])
    document["contexts"] += [{"name": name, "context": current["context"]} for name in contexts]
    path.write_text(yaml.safe_dump(document))
    return path


def _preview_on_the_cluster(project: Project, contexts: tuple[str, ...] = ()):
    """A preview against the simulated cluster (read only): the cluster-dependent checks of a
    stack (the operators' CRDs) answer at once, where a dead cluster had them retry their reads
    for ~8 s each (providers/kube.py), about 45 s for the GPU stack."""
    project.env["KUBECONFIG"] = str(_cluster_kubeconfig(project.root / "kubeconfig", contexts))
    result = project.run("preview", check=False, timeout=600)
    return result.returncode, result.stdout + result.stderr


def test_a_section_of_the_wrong_type_is_refused_by_the_engine(tmp_path):
    _require_pulumi()
    with ConnectionTrap() as trap:
        project = Project(tmp_path / "p", "wrongtype", {"models": "llama-8b"})
        code, output = _preview(project, trap)
        connections = trap.count()
    assert code != 0
    assert "Stack 'wrongtype' with configuration key 'models' must be of type 'array<object>'" in output, output[-3000:]
    # Refused before the program ran (its own refusal says "invalid stack config").
    assert "invalid stack config" not in output and "Traceback" not in output
    assert connections == 0


@pytest.mark.parametrize("stack", sorted(p.stem.removeprefix("Pulumi.") for p in (REPO / "stacks").glob("Pulumi.*.yaml")))
def test_every_shipped_stack_passes_the_engine_config_checks(stack, tmp_path):
    _require_pulumi()
    document = yaml.safe_load((REPO / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    raw = {key.split(":", 1)[1]: value for key, value in document.items() if key.startswith("llm-serving:")}
    if raw.get("cluster", {}).get("renderYamlToDirectory"):
        raw["cluster"] = {"renderYamlToDirectory": str(tmp_path / "render")}
    # The Hub preflight asks huggingface.co (no such network here); the engine's config checks,
    # which this test is about, come before it either way.
    raw["platform"] = {**raw.get("platform", {}), "preflight": {"enabled": False}}
    contexts = tuple(filter(None, [raw.get("cluster", {}).get("context")]))
    require_engine()
    project = Project(tmp_path / "p", stack, raw)
    code, output = _preview_on_the_cluster(project, contexts)
    assert "configuration key" not in output and "missing configuration" not in output, output[-3000:]
    assert "invalid stack config" not in output, output[-3000:]
    # The program ran and declared the stack's objects (a cluster-dependent check may still fail
    # against the trap: the gpu-cluster stack's operator CRDs are not there).
    assert "llm-serving:index:Platform" in output, output[-3000:]
    if stack == "render":
        assert code == 0, output[-3000:]


def _stray_program(project: Project) -> None:
    """The program plus one Kubernetes object declared without a provider."""
    main = project.root / "__main__.py"
    main.write_text(main.read_text() + "\n\nk8s.core.v1.ConfigMap('stray', metadata={'name': 'stray'}, data={'a': 'b'})\n")


def test_a_kubernetes_resource_without_the_program_provider_is_refused(tmp_path):
    _require_pulumi()
    config = {**stack_config("llm-serving", [small_model()]), "cluster": {"renderYamlToDirectory": str(tmp_path / "out")}}
    project = Project(tmp_path / "p", "stray", config)
    control = project.run("preview", check=False, timeout=600)
    assert control.returncode == 0, control.stdout[-3000:] + control.stderr[-2000:]
    _stray_program(project)
    result = project.run("preview", check=False, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "Default provider for 'kubernetes' disabled" in output, output[-3000:]


def _with_declaration(project: Project, declaration: dict) -> None:
    path = project.root / "Pulumi.yaml"
    document = yaml.safe_load(path.read_text())
    document["config"]["hfToken"] = declaration
    path.write_text(yaml.safe_dump(document, sort_keys=False))


@pytest.mark.parametrize("case", ["unset", "default", "plain"])
def test_a_typed_secret_declaration_would_make_hf_token_required(case, tmp_path):
    """Why `hfToken` is not declared `secret: true`: on pulumi 3.274 the engine enforces the
    secrecy of a typed key only, a typed key without a default is required, and a default is
    itself a plain value the secret check refuses; the token is optional."""
    _require_pulumi()
    config = {**stack_config("llm-serving", [small_model()]), "cluster": {"renderYamlToDirectory": str(tmp_path / "out")}}
    if case == "plain":
        config["hfToken"] = "hf_notARealTokenButLongEnough"
    project = Project(tmp_path / "p", f"typed{case}", config)
    _with_declaration(project, {"type": "string", "secret": True, **({"default": ""} if case == "default" else {})})
    result = project.run("preview", check=False, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    if case == "unset":
        assert f"Stack 'typed{case}' is missing configuration value 'hfToken'" in output, output[-3000:]
    else:
        assert f"Stack 'typed{case}' with configuration key 'hfToken' must be encrypted as it's secret" in output, output[-3000:]
    assert "hf_notARealTokenButLongEnough" not in output


def test_the_cli_refuses_to_store_a_token_like_hf_token_in_plain_text(tmp_path):
    _require_pulumi()
    project = Project(tmp_path / "p", "cliset", stack_config("llm-serving", [small_model()]))
    token = "hf_Zq8Lw2Rt7Yp4Xn6Vb1Mk"
    result = project.run("config", "set", "llm-serving:hfToken", token, check=False)
    assert result.returncode != 0
    assert "looks like a secret" in result.stdout + result.stderr
    assert token not in project.config_file.read_text()
    project.run("config", "set", "--secret", "llm-serving:hfToken", token)
    stored = yaml.safe_load(project.config_file.read_text())["config"]["llm-serving:hfToken"]
    assert set(stored) == {"secure"}
