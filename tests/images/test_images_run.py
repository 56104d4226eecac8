"""The images built on this machine (scripts/images/build.py), imported into a containerd and run
as the local stack renders their containers: the rendered command and args (or the image's
ENTRYPOINT where none is rendered), the rendered uid/gid, read-only root, no capabilities, the
emptyDirs. The vLLM CPU server is in test_vllm_image.py (the engine tier).

Built only when their inputs changed (a warm run imports nothing and builds nothing); the
Stargate images need ../shared/vendor/stargate (built by build-stargate.sh when missing)."""

from __future__ import annotations

import json
import os
import time

from components.compile.engines.vllm import LORA_ADAPTERS_DIR
from components.compile.gateway import nginx as gateway_nginx
from scripts.localmodel.hub_server import HubServer
from testkit.hf_server import tiny_model_files
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
from tests.images.imagekit import private_containerd


def test_busybox_runs_the_lora_cache_init_as_rendered(containerd, image):
    busybox = image("busybox")
    server = find(local_stack(), "Deployment", "tiny-chat")
    init = with_pod_context(container_of(server, "lora-cache-init", init=True), pod_spec(server))
    assert init["image"] in busybox.names
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    result = containerd.run(busybox.name, busybox.config, init, "images-busybox")
    assert result.returncode == 0, result.stderr
    # The same container, showing what it ran as and that the root is read-only.
    rendered = init["command"][-1]
    probe = {**init, "command": ["sh", "-c", f"{rendered} && id -u && id -g && ls -d {LORA_ADAPTERS_DIR}"
                                 " && (touch /x 2>&1 || true)"]}
    result = containerd.run(busybox.name, busybox.config, probe, "images-busybox")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == ["2000", "0", LORA_ADAPTERS_DIR]
    assert "Read-only file system" in result.stdout


def test_busybox_has_nc_and_the_official_image_s_default_command(containerd, image):
    busybox = image("busybox")
    assert busybox.config["config"]["Cmd"] == ["sh"]
    result = containerd.run(busybox.name, busybox.config, {"command": ["sh", "-c", "nc --help 2>&1 | head -n 1"]},
                            "images-busybox")
    assert result.returncode == 0 and "BusyBox v1.37.0" in result.stdout, result.stdout + result.stderr


def test_the_gateway_serves_its_health_port_on_a_read_only_root_as_rendered(containerd, image, netns, tmp_path):
    nginx = image("nginx")
    objects = local_stack()
    gateway = find(objects, "Deployment", "gateway")
    container = with_pod_context(container_of(gateway, "gateway"), pod_spec(gateway))
    assert container["image"] in nginx.names
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["runAsUser"] == 101
    # The ConfigMap's files, where the kubelet would mount them; a resolv.conf as the kubelet writes one.
    config_map = find(objects, "ConfigMap", "gateway")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    for name, text in config_map["data"].items():
        (config_dir / name).write_text(text)
    config_dir.chmod(0o755)
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    volume = next(m["name"] for m in container["volumeMounts"] if m["mountPath"] == "/etc/llm-gateway")
    name = "images-gateway"
    result = containerd.run(nginx.name, nginx.config, container, name, detach=True, binds={volume: config_dir},
                            netns=netns_path(netns), files={"/etc/resolv.conf": resolv})
    assert result.returncode == 0, result.stderr
    try:
        health_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "health")
        status, _ = wait_http(netns, f"http://127.0.0.1:{health_port}/healthz", 60,
                              alive=lambda: task_running(containerd, name), context=lambda: containerd.log_tail(name))
        assert status == 200
        # The OpenAI port answers too (its js handlers loaded): the router is not there, so an error
        # from nginx's side, in the gateway's own JSON form, not a refused connection.
        http_port = next(p["containerPort"] for p in container["ports"] if p["name"] == "http")
        status, text = http_in_netns(netns, f"http://127.0.0.1:{http_port}/v1/models")
        assert status >= 400 and json.loads(text), text
        # The rendered preStop hook, run in the container as the kubelet would: nginx quits
        # gracefully and the container ends with status 0. (The hook's own process ends with the
        # container: killed, as the kubelet's would be, once nginx, the container's first process, exits.)
        hook = container["lifecycle"]["preStop"]["exec"]["command"]
        containerd.exec_in(name, hook, timeout_s=60)
        wait_until(lambda: not task_running(containerd, name), 30, "the gateway container to end after preStop")
        assert containerd.exit_code(name) == 0, containerd.log_tail(name)
    finally:
        containerd.remove_container(name)


def wait_until(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")


def test_the_gateway_image_is_debian_13_nginx_with_njs(image):
    nginx = image("nginx")
    provenance = json.loads((nginx.directory / "provenance.json").read_text())
    packages = {p["package"]: p["version"] for p in provenance["debian"]["packages"]}
    assert packages["nginx"].startswith("1.26.3-")
    assert packages["libnginx-mod-http-js"].startswith("0.8.9-")
    assert provenance["debian"]["suite"] == "trixie"
    assert any("nginx version: nginx/1.26.3" in line for line in provenance["check"]["output"])
    # Where the rendered nginx.conf loads njs from (the official image's path; Debian's too).
    assert gateway_nginx.JS_MODULE == "/usr/lib/nginx/modules/ngx_http_js_module.so"


def test_the_puller_downloads_into_the_volume_as_rendered(containerd, image, tmp_path):
    """The rendered puller Job's init container, unchanged but for HF_ENDPOINT (a hub on this
    machine's loopback: the container shares the host's network here), writes the weights as uid
    2000 gid 0 into a volume the pod's fsGroup (0) made group-writable; the ignore patterns hold.
    Then the Job's container verifies them against the hub's records with the image's python3,
    as rendered, on its read-only root; and refuses the volume once a byte of the weights changed."""
    hf = image("hf")
    job = find(local_stack(), "Job", "pull")
    puller = with_pod_context(container_of(job, "puller", init=True), pod_spec(job))
    verify = with_pod_context(container_of(job, "verify"), pod_spec(job))
    repo = puller["args"][puller["args"].index("download") + 1]
    volume = tmp_path / "weights"
    volume.mkdir()
    os.chown(volume, 0, pod_spec(job)["securityContext"].get("fsGroup", 0))
    volume.chmod(0o2775)  # what fsGroup applies: the group owns it, group-writable, setgid
    weights_mount = next(m for m in puller["volumeMounts"] if m["mountPath"] == "/model-store")
    files = tiny_model_files()
    with HubServer(tmp_path / "hub") as hub:
        hub.commit(repo, files)
        env = [e if e["name"] != "HF_ENDPOINT" else {"name": "HF_ENDPOINT", "value": hub.url} for e in puller["env"]]
        result = containerd.run(hf.name, hf.config, {**puller, "env": env}, "images-puller", timeout_s=300,
                                netns=private_containerd.HOST_NETWORK, binds={weights_mount["name"]: volume})
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        weights = volume / "model.safetensors"
        assert weights.read_bytes() == files["model.safetensors"]
        assert (weights.stat().st_uid, weights.stat().st_gid) == (2000, 0)
        assert not (volume / "pytorch_model.bin").exists() and not (volume / "original").exists()
        assert verify["image"] == puller["image"] and verify["securityContext"]["readOnlyRootFilesystem"] is True
        checked = containerd.run(hf.name, hf.config, verify, "images-verify", timeout_s=120,
                                 binds={weights_mount["name"]: volume})
        assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
        assert "llm-serving: verified 6 files" in checked.stdout + checked.stderr
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0x01
        weights.write_bytes(bytes(data))
        refused = containerd.run(hf.name, hf.config, verify, "images-verify", timeout_s=120,
                                 binds={weights_mount["name"]: volume})
    assert refused.returncode == 44, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "llm-serving: not the hub's files: model.safetensors(" in refused.stdout + refused.stderr


def test_the_puller_image_runs_hf_as_the_rendered_uid_on_a_read_only_root(containerd, image):
    hf = image("hf")
    objects = local_stack()
    job = find(objects, "Job", "pull")
    puller = with_pod_context(container_of(job, "puller", init=True), pod_spec(job))
    assert puller["image"] in hf.names and puller["command"] == ["hf"]
    assert puller["securityContext"]["readOnlyRootFilesystem"] is True
    version = {**puller, "args": ["version"]}
    result = containerd.run(hf.name, hf.config, version, "images-hf")
    assert result.returncode == 0, result.stderr
    assert "huggingface_hub version: 0.35.3" in result.stdout
    # What the LoRA init container runs with this image when adapters are pinned: sh, python3 and
    # the hub library (the adapter rebase), as the same uid.
    check = {**puller, "command": ["sh", "-c", "mkdir -p /tmp/a && python3 -c 'import huggingface_hub, hf_transfer, "
                                   "hf_xet, os; print(os.getuid(), os.getgid())'"]}
    result = containerd.run(hf.name, hf.config, check, "images-hf")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2000", "0"]


def test_the_router_runs_as_rendered_and_answers_its_probes(containerd, image, netns, tmp_path):
    router_image = image("router")
    objects = local_stack()
    router = find(objects, "Deployment", "llm-router")
    container = with_pod_context(container_of(router, "router"), pod_spec(router))
    assert container["image"] in router_image.names
    assert "command" not in container  # the image's ENTRYPOINT runs: `stargate`
    assert router_image.config["config"]["Entrypoint"] == ["stargate"]
    name = "images-router"
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    fields = {"POD_NAME": "llm-router-0", "POD_NAMESPACE": "llm-serving", "POD_IP": "127.0.0.1"}
    result = containerd.run(router_image.name, router_image.config, container, name, detach=True,
                            netns=netns_path(netns), field_env=fields, files={"/etc/resolv.conf": resolv})
    assert result.returncode == 0, result.stderr
    try:
        probe = container["livenessProbe"]["httpGet"]
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == probe["port"])
        status, _ = wait_http(netns, f"http://127.0.0.1:{port}{probe['path']}", 60,
                              alive=lambda: task_running(containerd, name), context=lambda: containerd.log_tail(name))
        assert status == 200
        metrics = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
        status, text = http_in_netns(netns, f"http://127.0.0.1:{metrics}/metrics")
        assert status == 200 and "# TYPE" in text
    finally:
        containerd.remove_container(name)


def test_the_backend_router_command_is_in_the_router_image(containerd, image):
    router_image = image("router")
    objects = local_stack(router={"replicas": 2})
    backend = find(objects, "Deployment", "backend-router")
    container = with_pod_context(container_of(backend, "backend-router"), pod_spec(backend))
    assert container["image"] in router_image.names
    result = containerd.run(router_image.name, router_image.config, {**container, "args": ["--help"]},
                            "images-backend-router")
    assert result.returncode == 0, result.stderr
    for arg in container["args"]:  # every rendered flag is one the backend router's CLI knows
        assert arg.split("=", 1)[0] in result.stdout, f"{arg} is not in stargate-k8s-router --help"


def test_pylon_s_entrypoint_takes_the_rendered_flags(containerd, image):
    pylon_image = image("pylon")
    server = find(local_stack(), "Deployment", "tiny-chat")
    container = with_pod_context(container_of(server, "pylon"), pod_spec(server))
    assert container["image"] in pylon_image.names and "command" not in container
    assert pylon_image.config["config"]["Entrypoint"] == ["pylon"]
    result = containerd.run(pylon_image.name, pylon_image.config, {**container, "args": ["--help"]}, "images-pylon")
    assert result.returncode == 0, result.stderr
    for arg in container["args"]:  # every rendered flag is one pylon's CLI knows
        flag = arg.split("=", 1)[0]
        assert flag in result.stdout, f"{flag} is not in pylon --help"
