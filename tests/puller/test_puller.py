"""The puller proven (issue 8): the compiled Job's exact command line — the real `hf` CLI of the
vLLM image's huggingface_hub line (0.35.3, with hf_transfer: ``hf_server.hub_cli``) — run
against a Hub-compatible server on 127.0.0.1 serving a tiny model generated here, into a temp
dir standing for the weights volume.

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
from testkit.hf_server import hub_cli, read_safetensors_header, tiny_model_files

ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/tiny"
RUN_TIMEOUT = 60
SERVED = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "model.safetensors", "README.md"}


def stack_for(hub, revision="main", **model_fields):
    config = load_stack_config({"models": [{
        "name": "tiny", "source": {"repo": REPO, "revision": revision}, "weights": {"size": "1Gi"},
        **model_fields,
    }]})
    platform = config.platform.model_copy(update={"hf_endpoint": hub.url})
    return config.model_copy(update={"platform": platform})


def run_puller(config, home: Path, secrets: dict | None = None, wait: bool = True,
               env_override: dict | None = None):
    """Run the puller container of the compiled Job: its command and args, its env (Secret
    references resolved from ``secrets``; ``env_override`` on top), nothing from this process's
    environment."""
    job = weights.compile_puller_job(config.models[0], config.platform)
    # `hf download` is the init container; the Job's container verifies what it wrote
    # (tests/puller/test_hub_verify.py runs it).
    (container,) = job["spec"]["template"]["spec"]["initContainers"]
    assert container["command"] == ["hf"] and container["name"] == "puller"
    argv = [str(hub_cli()), *container["args"]]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            env[item["name"]] = (secrets or {})[(ref["name"], ref["key"])]
    env.update(env_override or {})
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
    # Only the revision is resolved again (one API call, for a branch or a pinned commit alike
    # in huggingface_hub 0.35.x); no file is asked for.
    assert [r.path for r in weight_requests(hub)] == [f"/api/models/{REPO}/revision/main"]
    hub.requests.clear()
    pinned = run_puller(stack_for(hub, revision=commit), tmp_path)
    assert pinned.returncode == 0, pinned.stderr
    assert [r.path for r in weight_requests(hub)] == [f"/api/models/{REPO}/revision/{commit}"]


def test_dropped_connection_fails_clearly_and_the_next_attempt_completes(hub, volume, tmp_path):
    """The image's client reads each file as one stream; a cut is an error it does not retry
    (huggingface_hub 0.35.x retries only ConnectionError and ReadTimeout, not the IncompleteRead
    of a short body), so the pod fails, naming the file; the Job's next pod resumes the file from
    what the cut one had written (a ``bytes=N-`` range; with hf_transfer on it would start over)."""
    files = tiny_model_files(weight_bytes=24 << 20)
    hub.commit(REPO, files)
    hub.drop_once("model.safetensors", after_bytes=15 << 20)
    failed = run_puller(stack_for(hub), tmp_path)
    assert failed.returncode != 0
    assert "Connection broken: IncompleteRead" in failed.stderr and "model.safetensors" in failed.stderr
    assert not (volume / "model.safetensors").exists()
    hub.requests.clear()
    result = run_puller(stack_for(hub), tmp_path)
    assert result.returncode == 0, result.stderr
    # It had written whole 10 MiB reads only.
    assert [r.range for r in hub.gets("model.safetensors")] == [f"bytes={10 << 20}-"]
    assert (volume / "model.safetensors").read_bytes() == files["model.safetensors"]


HF_TRANSFER_ON = {"HF_HUB_ENABLE_HF_TRANSFER": "1"}


def test_hf_transfer_fetches_big_files_as_ranges_and_retries_a_cut_one(hub, volume, tmp_path):
    """The path the puller leaves off (weights.hub_env says why; the bench measures both): with
    HF_HUB_ENABLE_HF_TRANSFER=1 the image's client hands a file over 50 MiB to hf_transfer, which
    the loopback hub serves as the Hub does: a ``bytes=0-0`` probe for the size, then closed
    10 MiB ranges; a range cut mid-way is fetched again (up to 5 tries) and the file is whole."""
    files = tiny_model_files(weight_bytes=64 << 20)
    size = len(files["model.safetensors"])
    hub.commit(REPO, files)
    hub.drop_once("model.safetensors", after_bytes=3 << 20, chunks_only=True)
    result = run_puller(stack_for(hub), tmp_path, env_override=HF_TRANSFER_ON)
    assert result.returncode == 0, result.stderr
    ranges = [r.range for r in hub.gets("model.safetensors")]
    assert ranges[0] is None and ranges[1] == "bytes=0-0"  # the client's first GET, then the probe
    chunk = 10 << 20
    wanted = {f"bytes={start}-{min(start + chunk - 1, size)}" for start in range(0, size, chunk)}
    assert set(ranges[2:]) == wanted
    assert len(ranges[2:]) == len(wanted) + 1  # the cut range, asked for twice
    assert (volume / "model.safetensors").read_bytes() == files["model.safetensors"]


def test_hf_transfer_gives_up_clearly_and_leaves_no_partial_file(hub, volume, tmp_path):
    """hf_transfer on and every range of the big file cut: it stops after its retries, the
    client says so, and no file stands in the volume for the weights."""
    files = tiny_model_files(weight_bytes=64 << 20)
    hub.commit(REPO, files)
    hub.drop_once("model.safetensors", after_bytes=1 << 20, chunks_only=True, times=10**6)
    result = run_puller(stack_for(hub), tmp_path, env_override=HF_TRANSFER_ON)
    assert result.returncode != 0
    assert "An error occurred while downloading using `hf_transfer`" in result.stderr
    assert not (volume / "model.safetensors").exists()
    assert not list(volume.rglob("*.incomplete"))


def test_killed_puller_completes_on_the_next_attempt(hub, volume, tmp_path):
    """A pod killed mid-download (eviction, deadline): the Job's next pod finishes the volume,
    fetching only what the killed one had not completed."""
    files = tiny_model_files(weight_bytes=4 << 20)
    hub.commit(REPO, files)
    release = hub.stall("model.safetensors")
    process = run_puller(stack_for(hub), tmp_path, wait=False)
    try:
        assert hub.stalled.wait(timeout=RUN_TIMEOUT), "the puller never started the weights"
        # Let the files beside the stalled one finish (the file, then the client's record of it,
        # which it writes just after), then kill like the kubelet does.
        records = volume / ".cache" / "huggingface" / "download"
        done, stable = set(), 0
        for _ in range(100):
            now = {name for name in SERVED if (records / f"{name}.metadata").exists()}
            stable = stable + 1 if now == done else 0
            done = now
            if stable >= 10:
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
    # Files the killed pod completed are not fetched again (the 0.35.x client runs only some
    # files at once, so the rest had not started).
    assert done and "model.safetensors" not in done
    assert {r.path.rsplit("/", 1)[-1] for r in hub.gets()} == SERVED - done
    assert downloaded(volume) == SERVED
    assert (volume / "model.safetensors").read_bytes() == files["model.safetensors"]


def test_wrong_revision_fails_clearly(hub, volume, tmp_path, monkeypatch):
    hub.commit(REPO, tiny_model_files())
    result = run_puller(stack_for(hub, revision="no-such-branch"), tmp_path)
    assert result.returncode != 0
    assert "Invalid rev id: no-such-branch" in result.stderr  # the hub's message, relayed
    assert downloaded(volume) == set()
    # The CLI does not name the revision; preflight does, at preview, before any object exists.
    monkeypatch.setenv(ENDPOINT_ENV, hub.url)
    with pytest.raises(PreflightError, match=f"models.0.source.revision: revision 'no-such-branch' not found in {REPO}"):
        preflight_stack(stack_for(hub, revision="no-such-branch"), token=False)


def test_gated_repo_reads_the_token_from_the_secret(hub, volume, tmp_path):
    hub.commit(REPO, tiny_model_files(), gated=True, allowed_tokens={"hf_good"})
    config = stack_for(hub, hfTokenSecret={"name": "hf-token", "key": "token"})
    refused = run_puller(config, tmp_path, secrets={("hf-token", "token"): "hf_other"})
    assert refused.returncode != 0
    assert f"Access to model {REPO} is restricted and you are not in the authorized list" in refused.stderr
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
