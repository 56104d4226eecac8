"""`python -m components validate|render`: exit codes, problem lines, nothing written when invalid."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components import cli
from tests.support.builders import NIM_IMAGE, ROOT, compile_stack, fixture_stack

GOOD = {
    "kubernetes:context": "kind-llm-serving",  # another project's key: ignored
    "llm-serving:platform": {"namespace": "inference"},
    "llm-serving:models": [
        {"name": "chat", "source": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"}},
        {"name": "nim-8b", "engine": "nim", "image": NIM_IMAGE, "source": {"repo": "meta-llama/Llama-3.1-8B-Instruct"}},
    ],
}


def stack_file(tmp_path: Path, config: dict, name: str = "Pulumi.test.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "components", *args], cwd=ROOT, capture_output=True, text=True)


def test_validate_good_config_exits_0(tmp_path, capsys):
    assert cli.main(["validate", "--config", str(stack_file(tmp_path, GOOD))]) == 0
    out = capsys.readouterr()
    assert "2 model(s)" in out.out and "inference" in out.out
    assert out.err == ""


def test_validate_names_the_router_topology_it_decided(tmp_path, capsys):
    config = {**GOOD, "llm-serving:router": {"image": "registry.example.com/llm/router:1.0.0", "replicas": 2,
                                             "backendRouter": {"image": "registry.example.com/llm/backend:1.0.0"}}}
    assert cli.main(["validate", "--config", str(stack_file(tmp_path, config))]) == 0
    out = capsys.readouterr().out
    assert "router llm-router: Deployment with 2 replicas: pylons reach each pod through the backend router" in out
    assert "clients call the gateway at http://llm-router-gateway.inference.svc.cluster.local:8000/v1 (open, no API keys)" in out


def test_validate_bad_config_exits_2_with_one_line_per_problem(tmp_path, capsys):
    bad = {**GOOD, "llm-serving:platform": {"vllmUid": 0},
           "llm-serving:models": [{"name": "Chat", "engine": "generic", "source": {"repo": "o/n"}},
                                  {"name": "ok", "gpus": "two", "source": {"repo": "o/n"}}]}
    assert cli.main(["validate", "--config", str(stack_file(tmp_path, bad))]) == cli.EXIT_INVALID == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        "platform.vllmUid", "models.0.name", "models.0.engine", "models.1.gpus",
    ]
    assert all(": " in line and line.split(": ", 1)[1] for line in lines)


def test_unknown_project_key_is_rejected(tmp_path, capsys):
    assert cli.main(["validate", "--config", str(stack_file(tmp_path, {**GOOD, "llm-serving:foo": 1}))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llm-serving:foo: unknown stack config key")
    assert "llm-serving:models" in err


def test_other_projects_keys_are_ignored(tmp_path):
    config = {**GOOD, "kubernetes:context": "prod", "kubernetes:namespace": "x",
              "aws:region": "eu-west-1", "other-project:models": "not ours"}
    assert cli.main(["validate", "--config", str(stack_file(tmp_path, config))]) == 0


def test_missing_stack_file_exits_2(tmp_path, capsys):
    assert cli.main(["validate", "--config", str(tmp_path / "Pulumi.nope.yaml")]) == 2
    assert "no stack file" in capsys.readouterr().err


def test_render_writes_one_file_per_manifest(tmp_path):
    out = tmp_path / "out"
    assert cli.main(["render", "--config", str(stack_file(tmp_path, GOOD)), "--out", str(out)]) == 0
    files = sorted(out.iterdir())
    docs = [yaml.safe_load(f.read_text()) for f in files]
    assert len(files) == 2 + 2 * 4  # namespace, service account, 4 objects per model
    assert [d["kind"] for d in docs][:2] == ["Namespace", "ServiceAccount"]
    assert {d["metadata"].get("namespace", "inference") for d in docs} == {"inference"}


@pytest.mark.parametrize("bad", [
    {"llm-serving:models": [{"name": "chat", "source": {"repo": "o/n"}, "replicas": 2}]},
    {"llm-serving:foo": 1},
], ids=["invalid-value", "unknown-key"])
def test_render_writes_nothing_when_invalid(tmp_path, capsys, bad):
    out = tmp_path / "out"
    assert cli.main(["render", "--config", str(stack_file(tmp_path, {**GOOD, **bad})), "--out", str(out)]) == 2
    assert not out.exists() or not any(out.iterdir())
    assert capsys.readouterr().err.strip()


def test_subprocess_validate_and_render(tmp_path):
    good = stack_file(tmp_path, GOOD)
    result = run("validate", "--config", str(good))
    assert result.returncode == 0, result.stderr

    bad = stack_file(tmp_path, {**GOOD, "llm-serving:models": [{"name": "chat", "source": {"repo": "o/n"},
                                                                "hfEndpoint": "http://localhost:8080"}]}, "Pulumi.bad.yaml")
    result = run("validate", "--config", str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith("models.0.hfEndpoint: ")
    assert "loopback" in result.stderr

    out = tmp_path / "rendered"
    result = run("render", "--config", str(bad), "--out", str(out))
    assert result.returncode == 2 and not out.exists()
    result = run("render", "--config", str(good), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert len(list(out.glob("*.yaml"))) == 10


def test_render_matches_compile_stack(tmp_path):
    fixture = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.rich.yaml"
    out = tmp_path / "out"
    assert cli.main(["render", "--config", str(fixture), "--out", str(out)]) == 0
    rendered = [yaml.safe_load(f.read_text()) for f in sorted(out.iterdir())]
    assert rendered == compile_stack(fixture_stack("rich"))


@pytest.mark.parametrize("emitter", ["libyaml", "pure-python"])
def test_render_bytes_are_the_reviewed_golden_whichever_emitter(tmp_path, monkeypatch, emitter):
    """`render` uses libyaml's dumper when PyYAML has it, for speed; its files must be byte for
    byte the reviewed golden record (tests/fixtures/golden/rich.yaml, written by the pure-Python
    emitter), so diffs between renders stay meaningful whichever is installed. Both paths run:
    without libyaml the "libyaml" case fails rather than silently testing the other emitter."""
    if emitter == "libyaml":
        assert yaml.__with_libyaml__, "PyYAML without libyaml: this case cannot check the C emitter"
    else:
        monkeypatch.delattr(yaml, "CSafeDumper")
    fixture = ROOT / "tests" / "fixtures" / "stacks" / "Pulumi.rich.yaml"
    out = tmp_path / "out"
    assert cli.main(["render", "--config", str(fixture), "--out", str(out)]) == 0
    # One file per manifest, in order; the golden is the same documents joined by `---`.
    rendered = "---\n".join(path.read_text() for path in sorted(out.iterdir()))
    assert rendered == (ROOT / "tests" / "fixtures" / "golden" / "rich.yaml").read_text()


def test_stack_option_reads_shipped_stacks(capsys):
    stacks = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))
    if not stacks:
        pytest.skip("no shipped stacks yet")
    name = stacks[0].name[len("Pulumi."):-len(".yaml")]
    assert cli.main(["validate", "--stack", name]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", [["validate"], ["render", "--out", "OUT"], ["status"], ["targets"]])
def test_a_directory_as_config_is_a_clear_refusal(tmp_path, command):
    argv = [part.replace("OUT", str(tmp_path / "out")) for part in command]
    result = run(*argv[:1], "--config", str(tmp_path), *argv[1:])
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"(stack): {tmp_path} is a directory; pass the stack file itself")
    assert not (tmp_path / "out").exists()


def test_an_unreadable_config_is_a_clear_refusal(tmp_path):
    path = tmp_path / "Pulumi.bin.yaml"
    path.write_bytes(b"\xff\xfe\x00config")
    result = run("validate", "--config", str(path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"(stack): cannot read {path}")


def test_render_into_a_file_is_a_clear_refusal(tmp_path):
    out = tmp_path / "not-a-dir"
    out.write_text("x")
    result = run("render", "--config", str(stack_file(tmp_path, GOOD)), "--out", str(out))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"--out {out}: is a file; pass a directory")


def test_an_unwritable_output_is_an_error_line_not_a_traceback(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run("render", "--config", str(stack_file(tmp_path, GOOD)), "--out", str(blocker / "sub"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and str(blocker / "sub") in result.stderr


def test_validate_warns_of_a_router_no_model_can_register_with(tmp_path, capsys):
    """Issue 38: without router.pylon no model registers with the router; it deploys and routes
    nothing. Valid (workers may register from elsewhere), so a warning, not a refusal."""
    router = {"image": "registry.example.com/llm/router:1.0.0"}
    assert cli.main(["validate", "--config", str(stack_file(tmp_path, {**GOOD, "llm-serving:router": router}))]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: router llm-router: router.pylon is unset, so no model of this stack registers")
    with_pylon = {**router, "pylon": {"image": "registry.example.com/llm/stargate-client:1.0.0"},
                  "workerAuth": {"mode": "open"}}
    assert cli.main(["validate", "--config", str(stack_file(tmp_path, {**GOOD, "llm-serving:router": with_pylon}))]) == 0
    assert capsys.readouterr().err == ""
