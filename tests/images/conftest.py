"""Fixtures of the image tests: the images built (cached: a warm run builds nothing) and imported
into a containerd of the tests' own, the local stack rendered with the images' names, and network
namespaces of the tests' own to reach a container's ports.

The containerd is private (its own config, root, state and socket under
``$LLM_SERVING_IMAGES_DIR/containerd``, the CRI plugin off): it never touches a node's containerd.
Its root is kept between runs, so an image already imported with the same manifest digest is
not imported again; the session stops the daemon and its shims at the end.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from components.compile.plan import compile_stack
from components.config import load_stack_config
from components.config.loader import read_stack_file, stack_file
from tests.images.imagekit import SCRIPTS, build, oci, private_containerd

# The names a stack names the images by (scripts/images/build.py RECIPES, docs/images.md).
ROUTER_IMAGE = "localhost/llm-serving/stargate:0.4.0"
VLLM_CPU_IMAGE = "docker.io/vllm/vllm-openai-cpu:v0.32.0"
HF_IMAGE = "localhost/llm-serving/hf:0.35.3"


@dataclass
class Image:
    name: str          # the first of the names it is imported as
    names: list[str]
    directory: Path    # its cache dir (oci/, provenance.json)
    config: dict       # the OCI image config


def ensure_containerd() -> None:
    """containerd and runc from Debian (the project installs what it runs; root here)."""
    if all(shutil.which(tool) for tool in ("containerd", "ctr", "runc")):
        return
    if os.geteuid() != 0:
        pytest.fail("the image tests need containerd and runc: apt-get install containerd runc")
    subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "containerd", "runc"],
                   check=True, capture_output=True)


@pytest.fixture(scope="session")
def containerd():
    ensure_containerd()
    daemon = private_containerd.Containerd().start()
    yield daemon
    daemon.stop()


@pytest.fixture(scope="session")
def image(containerd) -> Callable[[str], Image]:
    """``image(recipe)``: built when its inputs changed, imported when containerd lacks it."""
    done: dict[str, Image] = {}

    def get(recipe_name: str) -> Image:
        if recipe_name not in done:
            recipe = build.RECIPES[recipe_name]
            try:
                directory = build.build(recipe)
            except build.NoStargateSources as why:
                pytest.skip(f"image {recipe_name}: {why}")
            except build.BuildError as error:
                pytest.fail(f"image {recipe_name} did not build: {error}")
            read = oci.read_image(directory / "oci")
            listed = all(containerd.image_digest(name) == read["manifest_digest"] for name in recipe.names)
            unpacked = containerd.has_snapshot(read["config"]["rootfs"]["diff_ids"][-1])
            if not (listed and unpacked):
                if listed:  # the record without its snapshot: import it again, unpacked anew
                    containerd.remove_images(recipe.names)
                containerd.import_layout(directory / "oci", SCRIPTS / "oci.py")
            done[recipe_name] = Image(recipe.names[0], recipe.names, directory, read["config"])
        return done[recipe_name]

    return get


@pytest.fixture
def netns():
    """A network namespace of the test's own with loopback up: a container's ports are reached
    from inside it (``in_netns``), nothing else is."""
    name = f"llmimg-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True, capture_output=True)
    yield name
    subprocess.run(["ip", "netns", "delete", name], check=False, capture_output=True)


def netns_path(name: str) -> str:
    return f"/var/run/netns/{name}"


def http_in_netns(netns: str, url: str, body: Optional[bytes] = None, timeout: float = 10) -> tuple[int, str]:
    """One HTTP request from inside the namespace (a python3 of this machine's, run there)."""
    code = ("import sys, urllib.request, urllib.error\n"
            "data = sys.stdin.buffer.read() or None\n"
            "req = urllib.request.Request(sys.argv[1], data=data, headers={'content-type': 'application/json'})\n"
            "try:\n"
            "    r = urllib.request.urlopen(req, timeout=float(sys.argv[2])); print(r.status); print(r.read().decode())\n"
            "except urllib.error.HTTPError as e:\n"
            "    print(e.code); print(e.read().decode())\n")
    result = subprocess.run(["ip", "netns", "exec", netns, "python3", "-c", code, url, str(timeout)],
                            input=body or b"", capture_output=True, timeout=timeout + 10)
    if result.returncode != 0:
        raise ConnectionError(result.stderr.decode()[-500:])
    status, _, text = result.stdout.decode().partition("\n")
    return int(status), text


def wait_http(netns: str, url: str, timeout_s: float, alive: Callable[[], bool],
              context: Callable[[], str] = lambda: "") -> tuple[int, str]:
    """Poll until the URL answers 200; fails early when the container has exited."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if not alive():
            raise AssertionError(f"the container exited before {url} answered (last: {last!r})\n{context()}")
        try:
            status, text = http_in_netns(netns, url, timeout=5)
            if status == 200:
                return status, text
            last = (status, text[:200])
        except (ConnectionError, subprocess.TimeoutExpired, urllib.error.URLError) as error:
            last = error
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {url} (last: {last!r})\n{context()}")


def task_running(containerd, name: str) -> bool:
    listing = containerd.ctr("tasks", "list", check=False).stdout
    return any(line.split()[:1] == [name] and "RUNNING" in line for line in listing.splitlines())


def local_stack(lora: bool = True, **sections) -> list[dict]:
    """stacks/Pulumi.local.yaml rendered with the images built here: the router's public 0.4.0
    build (its line `public-0.4`), the vLLM CPU image and the hf image, LoRA on unless ``lora`` is
    false (its init container is the busybox one); ``sections`` merged over the stack's sections."""
    raw = copy.deepcopy(read_stack_file(stack_file("local")))
    raw["router"]["image"] = ROUTER_IMAGE
    raw["router"]["release"] = "public-0.4"
    raw["platform"]["vllmImage"] = VLLM_CPU_IMAGE
    raw["platform"]["pullerImage"] = HF_IMAGE
    if lora:
        raw["models"][0]["lora"] = {"enabled": True}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return compile_stack(load_stack_config(raw))


def find(objects: list[dict], kind: str, name_part: str) -> dict:
    """The one object of that kind named ``name_part`` exactly, else the one whose name holds it."""
    exact = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name_part]
    found = exact or [o for o in objects if o["kind"] == kind and name_part in o["metadata"]["name"]]
    assert len(found) == 1, f"expected one {kind} named like {name_part!r}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def container_of(obj: dict, name: str, init: bool = False) -> dict:
    containers = pod_spec(obj)["initContainers" if init else "containers"]
    return next(c for c in containers if c["name"] == name)


def with_pod_context(container: dict, pod: dict) -> dict:
    """The container with the pod-level security context filled in where it says nothing (the
    kubelet's merge: the container's own fields win)."""
    merged = copy.deepcopy(container)
    context = merged.setdefault("securityContext", {})
    for key in ("runAsUser", "runAsGroup", "runAsNonRoot"):
        if key in pod.get("securityContext", {}):
            context.setdefault(key, pod["securityContext"][key])
    return merged
