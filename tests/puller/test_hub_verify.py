"""The Hub puller's verify step (components/compile/hub_verify.py) run as rendered: the real `hf`
CLI of the image's line (tests/puller/test_puller.py ``run_puller``) downloads from the Hub
stand-in on 127.0.0.1 into a temp dir standing for the volume, then the Job's ``verify``
container runs its command line (``python3 -S -c <join and exec> <dir> <the script, a line per
argument>``: the Hub client venv's python3
stands for the image's) with its env. It passes on the real download and refuses, naming the
file, a changed byte, a truncated file, a file without its record, an ETag of neither shape, a
record of another commit and a recorded file gone; the gate's diagnosis of the refusal is the
one status shows (``gate_verdict``, as the s3 tests make it).
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from components.compile import weights
from testkit.hf_server import hub_cli, tiny_model_files
from tests.puller.test_puller import REPO, SERVED, run_puller, stack_for
from tests.puller.test_s3_puller import gate_verdict

RUN_TIMEOUT = 60
CORRUPTED_EXIT = 44


def verify_container(config) -> dict:
    job = weights.compile_puller_job(config.models[0], config.platform)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def run_verify(config, home: Path) -> subprocess.CompletedProcess:
    """The Job's container, its command and args as rendered (python3 is the Hub client venv's)
    and its env, nothing of this process's environment but PATH's basics."""
    container = verify_container(config)
    assert container["name"] == "verify" and container["command"][:3] == ["python3", "-S", "-c"]
    argv = [str(hub_cli().parent / "python3"), *container["command"][1:], *container["args"]]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **{e["name"]: e["value"] for e in container["env"]}}
    env["HOME"] = str(home)  # the pod's /tmp emptyDir
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def pulled(hub, volume, tmp_path, pinned: bool = True, **files):
    """A tiny model committed to the hub and downloaded by the rendered puller: its config."""
    commit = hub.commit(REPO, {**tiny_model_files(), **files})
    config = stack_for(hub, revision=commit if pinned else "main")
    result = run_puller(config, tmp_path)
    assert result.returncode == 0, result.stderr
    return config


def record(volume: Path, name: str) -> Path:
    return volume / ".cache" / "huggingface" / "download" / f"{name}.metadata"


def refusal(result: subprocess.CompletedProcess) -> str:
    """The one `llm-serving:` line a refusal ends with."""
    assert result.returncode == CORRUPTED_EXIT, (result.returncode, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("llm-serving: not the hub's files: "), result.stderr
    return last


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned commit", "branch"])
def test_the_real_download_verifies(hub, volume, tmp_path, pinned):
    config = pulled(hub, volume, tmp_path, pinned=pinned)
    result = run_verify(config, tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"llm-serving: verified {len(SERVED)} files" in result.stdout
    assert ("of commit " in result.stdout) == pinned
    # What the Hub stand-in sent is what the real client recorded: an LFS file's sha256 (from
    # X-Linked-Etag), a regular file's git blob id (from ETag), the commit (X-Repo-Commit).
    files = tiny_model_files()
    commit, etag, _ = record(volume, "model.safetensors").read_text().splitlines()
    assert etag == hashlib.sha256(files["model.safetensors"]).hexdigest()
    blob = files["config.json"]
    assert record(volume, "config.json").read_text().splitlines()[1] == \
        hashlib.sha1(b"blob %d\0" % len(blob) + blob).hexdigest()
    assert commit == hub.repos[REPO].refs["main"]


@pytest.mark.parametrize("name,what", [("model.safetensors", "sha256"), ("config.json", "git blob id")])
def test_a_changed_byte_is_refused_and_the_next_attempt_fetches_the_file_again(hub, volume, tmp_path, name, what):
    config = pulled(hub, volume, tmp_path)
    data = bytearray((volume / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (volume / name).write_bytes(bytes(data))
    result = run_verify(config, tmp_path)
    line = refusal(result)
    assert f"{name}(its {len(data)} bytes are not the hub's {what}, removed)" in line
    assert "run `pulumi up` again" in line and hub.url in line
    assert line.count("(") == 1  # only that file
    verdict = gate_verdict(result, "verify")
    assert verdict.reason == "source-corrupted"
    assert verdict.message.startswith(f"weights files are not what the hub named: {name}(")
    assert "hfEndpoint" in verdict.message
    # Removed, its record kept: the Job's next attempt downloads it again (the client would skip
    # a file whose record names the pinned commit), and then it verifies.
    assert not (volume / name).exists() and record(volume, name).exists()
    hub.requests.clear()
    assert run_puller(config, tmp_path).returncode == 0
    assert {r.path.rsplit("/", 1)[-1] for r in hub.gets()} == {name}
    assert run_verify(config, tmp_path).returncode == 0


def test_a_hub_that_alters_a_file_is_refused_on_every_attempt(hub, volume, tmp_path):
    """A mirror or proxy that changes a body under the hub's headers: the real client writes it
    (it checks the length only), verify refuses it, and the Job's next attempt fetches it again
    and is refused the same way, so the Job fails with the file named."""
    commit = hub.commit(REPO, tiny_model_files())
    hub.alter("model.safetensors")
    config = stack_for(hub, revision=commit)
    for attempt in range(2):
        hub.requests.clear()
        pulled_again = run_puller(config, tmp_path)
        assert pulled_again.returncode == 0, pulled_again.stderr
        assert hub.gets("model.safetensors"), attempt
        line = refusal(run_verify(config, tmp_path))
        assert line.startswith("llm-serving: not the hub's files: model.safetensors(its ")
        assert "config.json" not in line


def test_a_truncated_file_is_refused_with_its_size(hub, volume, tmp_path):
    config = pulled(hub, volume, tmp_path)
    path = volume / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    line = refusal(run_verify(config, tmp_path))
    assert "model.safetensors(its 1000 bytes are not the hub's sha256, removed)" in line


def test_a_file_without_its_record_is_refused(hub, volume, tmp_path):
    config = pulled(hub, volume, tmp_path)
    record(volume, "tokenizer.json").unlink()
    (volume / "extra.safetensors").write_bytes(b"not from the hub")
    line = refusal(run_verify(config, tmp_path))
    assert "extra.safetensors(no download record) tokenizer.json(no download record)" in line
    # Left in place: the client re-checks (LFS: hashes) or re-downloads a file it has no record of.
    assert (volume / "tokenizer.json").exists()


def test_an_etag_of_neither_shape_is_refused(hub, volume, tmp_path):
    """A mirror that does not pass the hub's ETags through (its own, an MD5 here)."""
    config = pulled(hub, volume, tmp_path)
    path = record(volume, "config.json")
    commit, _, stamp = path.read_text().splitlines()
    path.write_text(f"{commit}\n{hashlib.md5(b'x').hexdigest()}\n{stamp}\n")
    line = refusal(run_verify(config, tmp_path))
    assert f"config.json(the hub's ETag '{hashlib.md5(b'x').hexdigest()}' is no sha256 nor git blob id)" in line


def test_a_record_of_another_commit_is_refused(hub, volume, tmp_path):
    """A mirror that answers another commit than the pinned one (X-Repo-Commit)."""
    config = pulled(hub, volume, tmp_path)
    pinned = config.models[0].source.revision
    path = record(volume, "README.md")
    _, etag, stamp = path.read_text().splitlines()
    path.write_text(f"{'0' * 40}\n{etag}\n{stamp}\n")
    line = refusal(run_verify(config, tmp_path))
    assert f"README.md(downloaded from commit 000000000000, not the pinned {pinned[:12]})" in line


def test_a_recorded_file_gone_is_refused(hub, volume, tmp_path):
    config = pulled(hub, volume, tmp_path)
    (volume / "generation_config.json").unlink()
    line = refusal(run_verify(config, tmp_path))
    assert "generation_config.json(recorded, not on the volume)" in line


def test_an_empty_volume_is_refused_as_incomplete(hub, volume, tmp_path):
    hub.commit(REPO, tiny_model_files())
    result = run_verify(stack_for(hub), tmp_path)
    assert result.returncode == 43, result.stderr
    assert gate_verdict(result, "verify").reason == "weights-incomplete"
