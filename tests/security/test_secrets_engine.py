"""The HF token under the real engine: set with `pulumi config set --secret hfToken`, it reaches
the cluster's Secret `llm-serving-hf-token` and nothing else holds it in plain text — not the
exported stack state, not the stack outputs, not the rendered manifests, not the CLI or engine
logs of preview / up / refresh.

Logs are taken at `--logtostderr -v=7 --logflow` (engine and provider tracing) and checked for the
token and for its base64 form. At `-v=9 --logflow` the engine still masks the token, but the
kubernetes provider's RPC trace prints the Secret's `data`, i.e. the base64 form: checked for
the plaintext only, and a documented limitation (Pulumi's logging docs: audit verbose logs
before sharing them).

Three runs: a preview against a cluster that isn't there (tests/support/no_cluster.py), a render
stack `up` (renderYamlToDirectory), and an `up` on the simulated cluster. Each has a control
showing the grep would find the value if it were there: the decrypted config, `stack export
--show-secrets`, and the Secret in the cluster.
"""

from __future__ import annotations

import base64
import json
import shutil
import uuid

import pytest

from testkit.harness import Project, require_engine, small_model, stack_config
from tests.support.no_cluster import ConnectionTrap, write_kubeconfig

pytestmark = pytest.mark.integration

TOKEN = "hf_EngineSecretProbe" + uuid.uuid4().hex  # unique per run: no false hit from old files
VERBOSE = ("--logtostderr", "-v=7", "--logflow")
MOST_VERBOSE = ("--logtostderr", "-v=9", "--logflow")



def _require_pulumi() -> None:
    if not shutil.which("pulumi"):
        pytest.fail("these tests need the pulumi CLI on PATH; run them through scripts/test.sh")


def _with_token(project: Project) -> Project:
    project.run("config", "set", "--secret", "hfToken", TOKEN)
    assert TOKEN not in project.config_file.read_text(), "the stack file must hold only ciphertext"
    # Control: the engine does hold the value.
    assert project.run("config", "get", "hfToken").stdout.strip() == TOKEN
    return project


def _assert_nowhere(where: str, text: str, encoded_too: bool = True) -> None:
    assert TOKEN not in text, f"the token is in plain text in {where}"
    if encoded_too:
        assert base64.b64encode(TOKEN.encode()).decode() not in text, f"the token is base64 in {where}"


def _grep_state_and_outputs(project: Project) -> None:
    _assert_nowhere("stack export", project.run("stack", "export").stdout)
    _assert_nowhere("stack export --show-secrets=false", project.run("stack", "export", "--show-secrets=false").stdout)
    _assert_nowhere("stack outputs", project.run("stack", "output", "--json").stdout)
    # Not even shown on request: no output carries it at all.
    _assert_nowhere("stack outputs --show-secrets", project.run("stack", "output", "--json", "--show-secrets").stdout)
    for path in project.state.rglob("*"):
        if path.is_file():
            _assert_nowhere(f"state file {path.name}", path.read_text(errors="replace"))


def test_preview_without_a_cluster_logs_no_token(tmp_path):
    _require_pulumi()
    root = tmp_path / "preview"
    root.mkdir()
    with ConnectionTrap() as cluster:
        project = _with_token(Project(root, "secrets", stack_config("llm-serving", [small_model()])))
        project.env["KUBECONFIG"] = str(write_kubeconfig(root / "kubeconfig", cluster.https_url))
        result = project.run("preview", "--diff", *VERBOSE, timeout=600)
        most = project.run("preview", "--diff", *MOST_VERBOSE, timeout=600)
    _assert_nowhere("preview output and engine logs", result.stdout + result.stderr)
    _assert_nowhere("preview at -v=9 --logflow", most.stdout + most.stderr, encoded_too=False)
    assert "kubernetes:core/v1:Secret" in result.stdout and "llm-serving-hf-token" in result.stdout
    preview_json = project.run("preview", "--json", timeout=600, check=False).stdout
    _assert_nowhere("preview --json", preview_json)
    _grep_state_and_outputs(project)


def test_render_stack_writes_and_logs_no_token(tmp_path):
    _require_pulumi()
    root, rendered = tmp_path / "render", tmp_path / "manifests"
    root.mkdir()
    config = {**stack_config("llm-serving", [small_model()]), "cluster": {"renderYamlToDirectory": str(rendered)}}
    project = _with_token(Project(root, "render", config))
    result = project.up(*VERBOSE)
    _assert_nowhere("up output and engine logs", result.stdout + result.stderr)
    assert "Secret llm-serving-hf-token" in result.stdout + result.stderr  # the warning: not written
    files = [p for p in rendered.rglob("*") if p.is_file()]
    assert files, "nothing rendered"
    for path in files:
        _assert_nowhere(f"rendered {path.name}", path.read_text())
    assert not [p for p in files if "secret" in p.name.lower()], "render must not write the Secret"
    assert any("llm-serving-hf-token" in p.read_text() for p in files), "the puller must reference it"
    _grep_state_and_outputs(project)


@pytest.fixture
def deployed(tmp_path):
    require_engine()
    namespace = f"it-sec-{uuid.uuid4().hex[:6]}"
    root = tmp_path / "cluster"
    root.mkdir()
    project = _with_token(Project(root, f"sec{namespace[-6:]}", stack_config(namespace, [small_model()])))
    project.namespace = namespace
    project.result = project.up(*VERBOSE)
    yield project
    project.destroy()


def test_up_on_the_cluster_keeps_the_token_in_the_secret_only(deployed, tmp_path):
    from kubernetes import client, config

    _assert_nowhere("up output and engine logs", deployed.result.stdout + deployed.result.stderr)
    _grep_state_and_outputs(deployed)
    refresh = deployed.run("refresh", "--yes", "--skip-preview", *VERBOSE)
    _assert_nowhere("refresh output and engine logs", refresh.stdout + refresh.stderr)
    again = deployed.run("up", "--yes", "--skip-preview", *MOST_VERBOSE)
    _assert_nowhere("up at -v=9 --logflow", again.stdout + again.stderr, encoded_too=False)
    # Controls: the state holds it (encrypted), and the cluster's Secret holds exactly it.
    assert TOKEN in deployed.run("stack", "export", "--show-secrets").stdout
    config.load_kube_config()
    secret = client.CoreV1Api().read_namespaced_secret("llm-serving-hf-token", deployed.namespace)
    assert base64.b64decode(secret.data["token"]).decode() == TOKEN
    job = json.loads(deployed.run("stack", "output", "--json").stdout)["models"]["tiny"]["objects"]["puller"]
    # The Hub's download is the Job's init container `puller` (its `verify` container reads no token).
    pod = client.BatchV1Api().read_namespaced_job(job, deployed.namespace).spec.template.spec
    (puller,) = [c for c in pod.init_containers if c.name == "puller"]
    pod_env = puller.env
    (hf,) = [e for e in pod_env if e.name == "HF_TOKEN"]
    assert (hf.value, hf.value_from.secret_key_ref.name, hf.value_from.secret_key_ref.key) == (
        None, "llm-serving-hf-token", "token")
