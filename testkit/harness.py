"""Harness for tests on the real Pulumi engine and the simulated cluster.

Each test module gets its own copy of the project, its own file-backend state and its own
namespace, so tests never touch the `local` stack a person may have up. `scripts/test.sh`
builds the toolchain and starts the cluster first; run alone, these tests fail (never skip)
when either is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "llm_serving", "components", "providers", "contract", "policies")


def require_engine() -> None:
    missing = [what for what, ok in (
        ("the pulumi CLI on PATH", shutil.which("pulumi")),
        ("KUBECONFIG (the simulated cluster)", os.environ.get("KUBECONFIG")),
    ) if not ok]
    if missing:
        pytest.fail(f"integration tests need {' and '.join(missing)}; run them through scripts/test.sh")


class Project:
    """A throwaway copy of the project with one stack."""

    def __init__(self, root: Path, stack: str, config: dict):
        self.root, self.stack = root, stack
        root.mkdir(parents=True, exist_ok=True)  # callers pass tmp_path / "<name>" as well as mktemp()
        self.use_program()
        (root / ".venv").symlink_to(REPO / ".venv")
        (root / "stacks").mkdir()
        self.state = root / ".state"
        self.state.mkdir()
        self.env = {
            **os.environ,
            "PULUMI_BACKEND_URL": f"file://{self.state}",
            "PULUMI_CONFIG_PASSPHRASE": "integration-tests",
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        }
        self.write_config(config)
        self.run("stack", "init", stack, stack_flag=False)

    def use_program(self, commit: str | None = None) -> None:
        """Put the program of ``commit`` (None: this checkout) in the project directory; the
        stack's state stays where it is, so a stack deployed by one program can be previewed,
        refreshed and destroyed by another."""
        for name in PROJECT_FILES:
            target = self.root / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
        if commit is not None:
            # An older commit may lack a folder added since (contract/ came with issue 24).
            present = set(subprocess.run(["git", "-C", str(REPO), "ls-tree", "--name-only", commit],
                                         capture_output=True, text=True, check=True).stdout.split())
            archive = subprocess.run(["git", "-C", str(REPO), "archive", commit,
                                      *(name for name in PROJECT_FILES if name in present)],
                                     capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(self.root)], input=archive, check=True)
            return
        for name in PROJECT_FILES:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, self.root / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(source, self.root / name)

    @property
    def config_file(self) -> Path:
        return self.root / "stacks" / f"Pulumi.{self.stack}.yaml"

    def write_config(self, config: dict) -> None:
        # A stack that renders to files talks to no cluster, but the Kubernetes provider still
        # reads the ambient KUBECONFIG and runs its discovery against that cluster when it can
        # reach it (provider.go: a render directory forbids a kubeconfig argument, not the
        # environment's): 15-20 s of a busy simulated cluster per preview. Such a stack runs with
        # KUBECONFIG naming no file (run()).
        self.renders = bool((config.get("cluster") or {}).get("renderYamlToDirectory"))
        existing = yaml.safe_load(self.config_file.read_text()) if self.config_file.exists() else {}
        document = {**(existing or {}), "config": {f"llm-serving:{k}": v for k, v in config.items()}}
        self.config_file.write_text(yaml.safe_dump(document, sort_keys=False))

    @contextlib.contextmanager
    def config_for_now(self, config: dict) -> Iterator[None]:
        """The stack file says ``config`` inside the block (a preview of a change), and exactly
        what it said before afterwards, whatever the block raised."""
        before, renders = self.config_file.read_text(), self.renders
        self.write_config(config)
        try:
            yield
        finally:
            self.config_file.write_text(before)
            self.renders = renders

    def run(self, *args: str, check: bool = True, stack_flag: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
        command = ["pulumi", *args, "--non-interactive"] + (["-s", self.stack] if stack_flag else [])
        env = {**self.env, "KUBECONFIG": str(self.root / "no-cluster-when-rendering")} if self.renders else self.env
        result = subprocess.run(command, cwd=self.root, env=env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-6000:]}\n{result.stderr[-4000:]}")
        return result

    def up(self, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("up", "--yes", "--skip-preview", *extra, check=check)

    def preview_steps(self) -> list[dict]:
        result = self.run("preview", "--json", "--diff")
        return json.loads(result.stdout).get("steps", [])

    def outputs(self) -> dict:
        return json.loads(self.run("stack", "output", "--json", "--show-secrets").stdout)

    def destroy(self) -> None:
        """Best-effort clean-up after a module: a test that failed mid-`up` can leave the stack
        locked, so cancel and retry once; if the stack still cannot be destroyed, delete its
        namespace so its volumes go back to the cluster's small PV pool (and say so)."""
        if self.run("destroy", "--yes", "--skip-preview", check=False).returncode == 0:
            return
        self.run("cancel", "--yes", check=False)
        result = self.run("destroy", "--yes", "--skip-preview", check=False)
        if result.returncode == 0:
            return
        namespace = getattr(self, "namespace", None)
        warnings.warn(f"pulumi destroy of stack {self.stack} failed; deleting namespace {namespace}: "
                      f"{(result.stdout + result.stderr)[-800:]}", stacklevel=2)
        if namespace:
            from kubernetes import client, config

            try:
                client.CoreV1Api(config.new_client_from_config(self.env.get("KUBECONFIG"))).delete_namespace(namespace)
            except Exception as error:  # noqa: BLE001 - clean-up reports, it does not fail the run
                warnings.warn(f"namespace {namespace} not deleted either: {error}", stacklevel=2)


def delete_namespaces(core, namespaces) -> None:
    """A module's teardown: delete each stack's namespace instead of running `pulumi destroy`
    (~10-30 s a stack; the tests that prove destroy run it themselves). The program declares
    nothing outside its namespace but the Namespace itself (components/compile: no cluster-scoped
    kind), so this removes every object of the stack at once, as destroy would; its volumes go
    Released either way (Retain, reclaimed by `scripts/cluster/cluster.sh reclaim` at cluster
    start), and the stack's state goes with the module's temporary directory. Background: the
    next module need not wait for the namespace to finish terminating (its own is another)."""
    for namespace in namespaces:
        for attempt in range(5):
            try:
                core.delete_namespace(namespace, propagation_policy="Background")
                break
            except Exception as error:  # noqa: BLE001 - clean-up reports, it does not fail the run
                if getattr(error, "status", None) in (404, 409):
                    # 404: never created (a refused preview) or destroyed by the test itself;
                    # 409: already terminating (the module deleted it itself).
                    break
                if attempt == 4:
                    warnings.warn(f"namespace {namespace} not deleted: {error}", stacklevel=2)
                time.sleep(2)


def small_model(name: str = "tiny", revision: str = "main", **overrides) -> dict:
    return {
        "name": name,
        "engine": "vllm",
        "source": {"repo": "acme/tiny-llm", "revision": revision},
        "gpus": 1,
        "resources": {"cpu": "1", "memory": "4Gi"},
        "weights": {"size": "1Gi"},
        **overrides,
    }


def stack_config(namespace: str, models: list[dict], **platform) -> dict:
    return {
        "platform": {
            "namespace": namespace,
            "storageClassName": "local-weights",
            "sharedMemorySizeLimit": "1Gi",
            "pendingTimeoutSeconds": 60,
            "pullTimeoutSeconds": 300,
            "startupTimeoutSeconds": 120,
            # Offline: the simulated cluster's tests never ask a hub (tests/puller covers that).
            "preflight": {"enabled": False},
            **platform,
        },
        "models": models,
    }


