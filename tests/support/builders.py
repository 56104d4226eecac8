"""Small builders shared by the unit tests: raw config dicts in, typed config and manifests out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from components.compile import compile_model, compile_stack
from components.config import StackConfig, load_stack_config, read_stack_file

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
STACK_FIXTURES = FIXTURES / "stacks"

REPO = "Qwen/Qwen2.5-0.5B-Instruct"
NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3"


def model(name: str = "m", **fields: Any) -> dict:
    """A raw model section (stack-file spelling) that is valid unless ``fields`` make it not."""
    return {"name": name, "source": {"repo": REPO}, **fields}


def nim_model(name: str = "nim", **fields: Any) -> dict:
    return model(name, engine="nim", image=NIM_IMAGE, **fields)


def stack(*models: dict, **platform: Any) -> StackConfig:
    raw: dict = {"models": list(models)}
    if platform:
        raw["platform"] = platform
    return load_stack_config(raw)


def fixture_stack(name: str) -> StackConfig:
    return load_stack_config(read_stack_file(STACK_FIXTURES / f"Pulumi.{name}.yaml"))


def compiled(raw_model: dict, **platform: Any):
    """The ModelManifests of one model in an otherwise default stack."""
    config = stack(raw_model, **platform)
    return compile_model(config.models[0], config)


def pod_spec(manifest: dict) -> dict:
    return manifest["spec"]["template"]["spec"]


def containers(manifest: dict) -> list[dict]:
    """Every container of a pod-bearing manifest, init containers included."""
    spec = pod_spec(manifest)
    return [*spec.get("initContainers", []), *spec["containers"]]


def container(manifest: dict, name: str) -> dict:
    (found,) = [c for c in containers(manifest) if c["name"] == name]
    return found


def env_of(item: dict) -> dict[str, dict]:
    return {entry["name"]: entry for entry in item.get("env", [])}


def pod_manifests(manifests: list[dict]) -> list[dict]:
    return [m for m in manifests if m["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")]


__all__ = [
    "FIXTURES", "NIM_IMAGE", "REPO", "ROOT", "STACK_FIXTURES", "compile_stack", "compiled",
    "container", "containers", "env_of", "fixture_stack", "model", "nim_model", "pod_manifests",
    "pod_spec", "stack",
]
