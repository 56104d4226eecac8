"""The puller proven (issue 8): the compiled Job's exact command line — the real `hf` CLI of the
pinned huggingface_hub — run against a Hub-compatible server on 127.0.0.1 serving a tiny model
generated here, into a temp dir standing for the weights volume.

Two substitutions, both made through the real code paths rather than around them:
- the weights mount (/model-store) is a temp dir: ``common.WEIGHTS_MOUNT`` is patched, so
  ``puller_args``/``puller_env`` produce it themselves;
- the platform's HF endpoint is the loopback server. Config validation refuses loopback for
  the puller (a pod cannot reach its own loopback); here the "pod" is this process, so the
  validated config is copied with the endpoint swapped (``model_copy`` skips validation).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from components.compile import common, weights
from components.config import load_stack_config
from components.preflight import ENDPOINT_ENV, PreflightError, preflight_stack
from tests.support.hf_server import read_safetensors_header, tiny_model_files

ROOT = Path(__file__).resolve().parents[2]
HF = ROOT / ".venv" / "bin" / "hf"
REPO = "acme/tiny"
RUN_TIMEOUT = 60
SERVED = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "model.safetensors", "README.md"}


@pytest.fixture
def volume(tmp_path, monkeypatch) -> Path:
    mount = tmp_path / "model-store"
    mount.mkdir()
    monkeypatch.setattr(common, "WEIGHTS_MOUNT", str(mount))
    return mount


def stack_for(hub, revision="main", **model_fields):
    config = load_stack_config({"models": [{
        "name": "tiny", "source": {"repo": REPO, "revision": revision}, "weights": {"size": "1Gi"},
        **model_fields,
    }]})
    platform = config.platform.model_copy(update={"hf_endpoint": hub.url})
    return config.model_copy(update={"platform": platform})


def run_puller(config, home: Path, secrets: dict | None = None, wait: bool = True):
    """Run the puller container of the compiled Job: its command and args, its env (Secret
    references resolved from ``secrets``), nothing from this process's environment."""
    job = weights.compile_puller_job(config.models[0], config.platform)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["hf"]
    argv = [str(HF), *container["args"]]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = (secrets or {})[(ref["name"], ref["key"])]
    if not wait:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def downloaded(volume: Path) -> set[str]:
    return {str(p.relative_to(volume)) for p in volume.rglob("*")
            if p.is_file() and not str(p.relative_to(volume)).startswith((".cache", ".hf-home"))}


def weight_requests(hub):
    return [r for r in hub.requests if r.path.startswith(("/api/models", f"/{REPO}/resolve"))]


def test_layout_is_what_the_server_reads(hub, volume, tmp_path):
    files = tiny_model_files()
    hub.commit(REPO, files)
    result = run_puller(stack_for(hub), tmp_path)
    assert result.returncode == 0, result.stderr
    # config, tokenizer and safetensors at the volume root; the default ignore patterns skip
    # the duplicate .bin and Meta-style original/ checkpoints.
    assert downloaded(volume) == SERVED
    for name in SERVED:
        assert (volume / name).read_bytes() == files[name], name
    header = read_safetensors_header((volume / "model.safetensors").read_bytes())
    assert header["model.embed_tokens.weight"]["dtype"] == "F32"
    # The client's state stays on the volume (HF_HOME points there), nothing half-written.
    assert (volume / ".hf-home").is_dir()
    assert not list(volume.rglob("*.incomplete"))


def test_rerun_is_a_noop(hub, volume, tmp_path):
    commit = hub.commit(REPO, tiny_model_files())
    assert run_puller(stack_for(hub), tmp_path).returncode == 0
    hub.requests.clear()
    again = run_puller(stack_for(hub), tmp_path)
    assert again.returncode == 0, again.stderr
    assert hub.gets() == [] and not [r for r in hub.requests if r.method == "HEAD"]
    # Only the branch is resolved again; a pinned revision (a commit) asks the hub nothing.
    assert [r.path for r in weight_requests(hub)] == [f"/api/models/{REPO}/revision/main"]
    hub.requests.clear()
    pinned = run_puller(stack_for(hub, revision=commit), tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    assert weight_requests(hub) == []


def test_dropped_connection_resumes_with_range(hub, volume, tmp_path):
    # Bigger than the client's 10 MiB read chunk: it resumes from the last whole chunk it wrote.
    files = tiny_model_files(weight_bytes=24 << 20)
    hub.commit(REPO, files)
    hub.drop_once("model.safetensors", after_bytes=15 << 20)
    result = run_puller(stack_for(hub), tmp_path)
    assert result.returncode == 0, result.stderr
    first, second = hub.gets("model.safetensors")
    assert first.range is None and second.range == f"bytes={10 << 20}-"
    assert (volume / "model.safetensors").read_bytes() == files["model.safetensors"]


def test_killed_puller_completes_on_the_next_attempt(hub, volume, tmp_path):
    """A pod killed mid-download (eviction, deadline): the Job's next pod finishes the volume,
    fetching only what the killed one had not completed."""
    files = tiny_model_files(weight_bytes=4 << 20)
    hub.commit(REPO, files)
    release = hub.stall("model.safetensors")
    process = run_puller(stack_for(hub), tmp_path, wait=False)
    try:
        assert hub.stalled.wait(timeout=RUN_TIMEOUT), "the puller never started the weights"
        # Let the small files finish beside the stalled one, then kill like the kubelet does.
        others = SERVED - {"model.safetensors"}
        for _ in range(100):
            if {name for name in others if (volume / name).exists()} == others:
                break
            time.sleep(0.1)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=RUN_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
        release.set()
    hub._stalls.clear()
    assert not (volume / "model.safetensors").exists()
    hub.requests.clear()
    result = run_puller(stack_for(hub), tmp_path)
    assert result.returncode == 0, result.stderr
    assert [r.path.rsplit("/", 1)[-1] for r in hub.gets()] == ["model.safetensors"]
    assert downloaded(volume) == SERVED
    assert (volume / "model.safetensors").read_bytes() == files["model.safetensors"]


def test_wrong_revision_fails_clearly(hub, volume, tmp_path, monkeypatch):
    hub.commit(REPO, tiny_model_files())
    result = run_puller(stack_for(hub, revision="no-such-branch"), tmp_path)
    assert result.returncode != 0
    assert f"Revision not found in model '{REPO}'" in result.stderr
    assert downloaded(volume) == set()
    # The CLI does not name the revision; preflight does, at preview, before any object exists.
    monkeypatch.setenv(ENDPOINT_ENV, hub.url)
    with pytest.raises(PreflightError, match=f"models.0.source.revision: revision 'no-such-branch' not found in {REPO}"):
        preflight_stack(stack_for(hub, revision="no-such-branch"), token=False)


def test_gated_repo_reads_the_token_from_the_secret(hub, volume, tmp_path):
    hub.commit(REPO, tiny_model_files(), gated=True, allowed_tokens={"hf_good"})
    config = stack_for(hub, hfTokenSecret={"name": "hf-token", "key": "token"})
    refused = run_puller(config, tmp_path, secrets={("hf-token", "token"): "hf_other"})
    assert refused.returncode != 0 and f"'{REPO}' requires approval" in refused.stderr
    assert "hf_other" not in refused.stderr + refused.stdout  # the token is never printed
    allowed = run_puller(config, tmp_path, secrets={("hf-token", "token"): "hf_good"})
    assert allowed.returncode == 0, allowed.stderr
    assert downloaded(volume) == SERVED


def test_preflight_pins_the_commit_the_puller_then_downloads(hub, volume, tmp_path, monkeypatch):
    """Preview resolves main to its commit; the puller downloads that commit even after main
    moves; the next preview pins the new commit under new weights names (a re-pull)."""
    monkeypatch.setenv(ENDPOINT_ENV, hub.url)  # the puller endpoint itself may not be loopback
    first = hub.commit(REPO, tiny_model_files(seed=1))
    report = preflight_stack(stack_for(hub), token=False)
    assert report.stack.models[0].source.revision == first
    moved = hub.commit(REPO, tiny_model_files(seed=2))
    result = run_puller(report.stack, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (volume / "model.safetensors").read_bytes() == tiny_model_files(seed=1)["model.safetensors"]
    again = preflight_stack(stack_for(hub), token=False)
    assert again.stack.models[0].source.revision == moved
    assert common.ModelNames.of(again.stack.models[0]).weights != common.ModelNames.of(report.stack.models[0]).weights
