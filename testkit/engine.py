"""The real vLLM server of a release line, started exactly as `render` writes its container for a
stack (testkit/rendered.py lists what is substituted to run it here), on weights the real puller
wrote from the loopback hub, with the adapter the rendered LoRA init container placed: ``pull_for``
renders and pulls, ``serving`` starts it and waits for its startup probe (its log:
~/.cache/llm-serving-testtools/logs/engine-<line>-server.log). The engine tests' session fixture
(tests/engine/conftest.py) and bench/engine_path.py run it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from components.compile import compile_stack
from components.config import load_stack_config, read_stack_file
from scripts.localmodel.hub_server import HubServer
from testkit.engine_kit import CPU_ENV, kit_dir, tiny_model
from testkit.hf_server import hub_cli
from testkit.ports import free_port
from testkit.rendered import Runnable, bind, mounts_of, set_env, set_flag

ROOT = Path(__file__).resolve().parents[1]
STACK_FILE = ROOT / "stacks" / "Pulumi.local.yaml"
ADAPTER = {"name": "tiny-lora", "repo": "acme/tiny-lora"}
PULL_TIMEOUT = 120
POLL_SECONDS = 0.5
HOST_PATH = "/usr/bin:/bin"






def stack_config(hub_url: str, router: dict | None = None):
    """stacks/Pulumi.local.yaml's model, with a LoRA adapter, metrics (ServiceMonitor and
    dashboard) and queue autoscaling on, so every consumer of the engine's series is rendered.
    The hub endpoint is the loopback server (validation refuses loopback for a pod; here the pod
    is this machine, so the validated config is copied with the endpoint swapped). ``router``:
    settings merged into the stack's router section."""
    raw = read_stack_file(STACK_FILE)
    raw["router"].update(router or {})
    (model,) = raw["models"]
    # The GPU server as rendered, run on a CPU with the substitutions listed in engine_kit: the
    # local stack's model is a CPU model placed on the real node, with the CPU image's line
    # pinned (what tests/engine/test_cpu_model.py and the real-pods modules run as such); here
    # both lines run one render, so the line is the platform's default and the model has a GPU.
    model["gpus"] = 1
    for setting in ("nodeSelector", "tolerations", "args"):
        model.pop(setting, None)
    raw["platform"].pop("vllmRelease", None)
    model["lora"] = {"enabled": True, "adapters": [ADAPTER]}
    model["autoscaling"] = {"enabled": True, "maxReplicas": 2}
    model["weights"]["accessMode"] = "ReadWriteMany"  # what validation asks of autoscaling
    raw["platform"]["metrics"] = {"enabled": True}
    config = load_stack_config(raw)
    return config.model_copy(update={"platform": config.platform.model_copy(update={"hf_endpoint": hub_url})})


def only(objects: list[dict], kind: str, name: str | None = None) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


@dataclass
class Engine:
    line: str
    config: object
    objects: list[dict]
    server: dict                      # the rendered server container
    pod: dict                         # the rendered server pod spec
    run: Runnable                     # what was started
    pulls: dict[str, Runnable]        # the puller and the LoRA init container, as run
    port: int
    weights: Path
    adapters: Path
    process: subprocess.Popen
    started: float
    log: list[tuple[float, str]] = field(default_factory=list)
    polls: list[tuple[float, object]] = field(default_factory=list)  # (time, status or error)
    ready_at: float = 0.0
    models_at_ready: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def served_name(self) -> str:
        return self.server["args"][self.server["args"].index("--served-model-name") + 1]

    def log_text(self) -> str:
        return "\n".join(line for _, line in self.log)

    def get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


def parse_samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition -> series name -> (labels, value) of each of its samples."""
    series: dict[str, list[tuple[dict[str, str], float]]] = {}
    sample = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
    pair = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
    for line in text.splitlines():
        match = sample.match(line)
        if match and not line.startswith("#"):
            labels = dict(pair.findall(match.group(2) or ""))
            series.setdefault(match.group(1), []).append((labels, float(match.group(3))))
    return series


def parse_exposition(text: str) -> dict[str, list[dict[str, str]]]:
    """Prometheus text exposition -> series name -> the label sets of its samples."""
    return {name: [labels for labels, _ in samples] for name, samples in parse_samples(text).items()}


def run_container(run: Runnable, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(run.argv, env=run.env, capture_output=True, text=True, timeout=timeout)


def pull(objects: list[dict], model_name: str, volumes: dict[str, Path], tmp: Path) -> dict[str, Runnable]:
    """The puller Job's init container (`hf download`, the image's client line) into the weights
    volume and its container (the check of those bytes against the hub's records, with the
    client venv's python3), then the server pod's LoRA init container into the adapter cache.
    Each must exit 0: the Job's success is what the weights gate reads (providers/gate.py:
    job_succeeded)."""
    job = only(objects, "Job")
    (puller,) = job["spec"]["template"]["spec"]["initContainers"]
    (verify,) = job["spec"]["template"]["spec"]["containers"]
    hf = str(hub_cli())
    hub_bin = str(Path(hf).parent)
    job_volumes = {"weights": volumes["weights"], "tmp": tmp / "puller-tmp"}
    runs = {"puller": bind(puller, job_volumes, {"hf": hf}, {"PATH": HOST_PATH, "LANG": "C.UTF-8"}),
            "verify": bind(verify, job_volumes, {"python3": str(Path(hub_bin) / "python3")},
                           {"PATH": HOST_PATH, "LANG": "C.UTF-8"})}
    for step in ("puller", "verify"):
        result = run_container(runs[step], PULL_TIMEOUT)
        assert result.returncode == 0, f"the rendered {step} failed:\n{result.stderr[-3000:]}"
    pod = only(objects, "Deployment", model_name)["spec"]["template"]["spec"]
    (init,) = [c for c in pod.get("initContainers", []) if c["name"] == "lora-cache-init"]
    (server,) = [c for c in pod["containers"] if c["name"] == "server"]
    # The image has `hf` and `python3` on its PATH: the Hub client venv has both. BASE_MODEL names
    # the server container's weights path (written into each adapter_config.json).
    runs["lora-cache-init"] = bind(init, volumes, {"sh": "/bin/sh"},
                                   {"PATH": f"{hub_bin}:{HOST_PATH}", "LANG": "C.UTF-8"},
                                   pod_paths=mounts_of(server, volumes))
    result = run_container(runs["lora-cache-init"], PULL_TIMEOUT)
    assert result.returncode == 0, f"the rendered LoRA init container failed:\n{result.stderr[-3000:]}"
    return runs


def cpu_server(server: dict, volumes: dict[str, Path], kit: Path, home: Path,
               secrets: dict | None = None) -> tuple[Runnable, int]:
    """The rendered server container with the CPU substitutions, and only those."""
    run = bind(server, volumes, {"vllm": str(kit / "bin" / "vllm")},
               {"PATH": f"{kit / 'bin'}:{HOST_PATH}", "LANG": "C.UTF-8"}, secrets=secrets)
    port = free_port()
    set_flag(run, "--host", "127.0.0.1")
    set_flag(run, "--port", str(port))
    set_flag(run, "--tensor-parallel-size", "1")
    for name, value in CPU_ENV.items():
        set_env(run, name, value)
    # The image's HOME (/tmp, the container's own filesystem in the server: no volume there).
    set_env(run, "HOME", str(home))
    return run, port


def probe_port(container: dict, probe: dict) -> int:
    """The containerPort a probe's httpGet names (by name or number)."""
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    (found,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return found


def read_log(engine: Engine, path: Path) -> None:
    with path.open("w") as sink:
        for line in engine.process.stdout:
            engine.log.append((time.monotonic(), line.rstrip("\n")))
            sink.write(line)
            sink.flush()


def wait_ready(engine: Engine) -> None:
    """Poll the startup probe's path as the kubelet would, from the moment the process starts,
    within the startup probe's budget; at the first success, read /v1/models at once."""
    probe = engine.server["startupProbe"]
    budget = probe.get("initialDelaySeconds", 0) + probe["failureThreshold"] * probe["periodSeconds"]
    deadline = engine.started + budget
    while time.monotonic() < deadline and engine.process.poll() is None:
        try:
            status, _ = engine.get(probe["httpGet"]["path"], timeout=probe["timeoutSeconds"])
        except (OSError, http.client.HTTPException) as error:  # not up yet, or not vLLM answering
            status = error
        engine.polls.append((time.monotonic(), status))
        if status == 200:
            engine.ready_at = engine.polls[-1][0]
            _, body = engine.get("/v1/models")
            engine.models_at_ready = [m["id"] for m in json.loads(body)["data"]]
            return
        time.sleep(POLL_SECONDS)
    lines = [line for _, line in engine.log]
    # The engine core logs its root cause first; the API server's traceback, last, only says it died.
    first = next((i for i, line in enumerate(lines) if " ERROR " in line), max(0, len(lines) - 60))
    shown = "\n".join(lines[first:first + 40])
    tail = "\n".join(lines[max(first + 40, len(lines) - 60):])
    raise AssertionError(f"vLLM {engine.line} never answered its startup probe within {budget}s "
                         f"(exit {engine.process.poll()}):\n{shown}\n...\n{tail}")


def stop(process: subprocess.Popen, grace: float) -> None:
    """SIGTERM to the server (PID 1 of the container), then its whole group at the grace's end."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # engine core children, as the runtime would
    except ProcessLookupError:
        pass
    process.wait(timeout=30)


@dataclass
class Pulled:
    """A line's server as rendered, with its volumes holding what the rendered pullers wrote."""
    line: str
    config: object
    objects: list[dict]
    server: dict
    pod: dict
    volumes: dict[str, Path]
    pulls: dict[str, Runnable]


def pull_for(line: str, tmp: Path) -> Pulled:
    """Render the stack, serve the tiny model and its adapter from a loopback hub, and run the
    rendered puller and LoRA init container into temp dirs under ``tmp`` standing for the volumes."""
    made = tiny_model(line)
    with HubServer(tmp / "hub") as hub:
        config = stack_config(hub.url)
        (model,) = config.models
        hub.commit(model.source.repo, {p.name: p for p in (made / "model").iterdir()})
        hub.commit(ADAPTER["repo"], {p.name: p for p in (made / "adapter").iterdir()})
        objects = compile_stack(config)
        deployment = only(objects, "Deployment", model.name)
        pod = deployment["spec"]["template"]["spec"]
        (server,) = [c for c in pod["containers"] if c["name"] == "server"]
        # The pod's volumes, each a temp dir; the memory-backed /dev/shm is the host's own.
        volumes = {v["name"]: tmp / "volumes" / v["name"] for v in pod["volumes"]}
        volumes["dshm"] = Path("/dev/shm")
        pulls = pull(objects, model.name, volumes, tmp)
    return Pulled(line, config, objects, server, pod, volumes, pulls)


@contextmanager
def serving(pulled: Pulled, tmp: Path) -> Iterator[Engine]:
    """The pulled server started (CPU substitutions only) and ready: its startup probe answered
    within the probe's budget; stopped on exit. Each start is a fresh process on the same volumes."""
    kit = kit_dir(pulled.line)
    home = tmp / "home"
    run, port = cpu_server(pulled.server, pulled.volumes, kit, home)
    home.mkdir(exist_ok=True)
    process = subprocess.Popen(run.argv, env=run.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True, cwd=tmp)
    engine = Engine(line=pulled.line, config=pulled.config, objects=pulled.objects, server=pulled.server,
                    pod=pulled.pod, run=run, pulls=pulled.pulls, port=port, weights=pulled.volumes["weights"],
                    adapters=pulled.volumes["lora-cache"], process=process, started=time.monotonic())
    # The server's log outlives pytest's temp dirs (which keep only the last few sessions).
    with ready(engine, kit.parent / "logs" / f"engine-{pulled.line}-server.log"):
        yield engine


@contextmanager
def ready(engine: Engine, log: Path) -> Iterator[Engine]:
    """A started server's output copied to ``log`` as it comes, its startup probe answered
    (wait_ready), and the server stopped on exit as the runtime stops a container."""
    log.parent.mkdir(parents=True, exist_ok=True)
    reader = threading.Thread(target=read_log, args=(engine, log), daemon=True)
    reader.start()
    try:
        wait_ready(engine)
        yield engine
    finally:
        stop(engine.process, grace=30)
        reader.join(timeout=10)
