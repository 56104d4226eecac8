"""A CPU model (`gpus: 0`) for real: its rendered server — the KV cache, thread count and binding
the render derives from its resources — runs in the real vLLM of each line on this machine's CPU,
with none of the CPU substitutions the GPU model's server needs (tests/engine/rendered.py). The
substitutions left: the executable, mount paths, `--host`/`--port`, HOME, and
`VLLM_CPU_CI_ENV=1` (eager mode: a start in seconds instead of a graph compile; a product setting
it is not). The server runs as the rendered uid, 2000, which has no passwd entry here, as in
vLLM's upstream CPU image (it has root only): a user namespace maps it
(`unshare --user --map-user=2000`), a substitution of its own.

The weights come from the rendered puller (`hf download`, the image's client line) and the LoRA
adapter from the rendered init container, as for the GPU model (conftest.pull).

The 0.11 line only: the 0.32 line's CPU model runs in real pods, from the rendered manifests with
no substitution, where the same settings are read from the server process's environment and the
same KV cache from its log (tests/integration/test_real_pods_cluster.py); 0.32's adapter is served
by tests/engine/test_rendered_server.py. No vLLM CPU image of 0.11 is built here, so 0.11 stays.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import openai
import pytest

from components.compile import compile_stack
from components.config import load_stack_config, read_stack_file
from scripts.localmodel.hub_server import HubServer
from testkit.engine import ADAPTER, STACK_FILE, Engine, only, pull, ready
from testkit.engine_kit import kit_dir, tiny_model
from testkit.ports import free_port
from testkit.rendered import bind, set_env, set_flag

pytestmark = pytest.mark.engine

HOST_PATH = "/usr/bin:/bin"
RESOURCES = {"cpu": "2", "memory": "5Gi"}  # the machine's 2 cores; KV cache (5 - 3) / 2 = 1 GiB
# The lines run here (the module's docstring says why not 0.32).
CPU_LINES = ("0.11",)
# No binding, in the line's words (0.11 reads `nobind` as a core list).
CPU_SETTINGS = {"0.11": {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "2", "VLLM_CPU_OMP_THREADS_BIND": "all"}}


def cpu_stack_config(hub_url: str, line: str):
    """stacks/Pulumi.local.yaml's model as a CPU model of ``line`` with the test adapter, the hub the
    loopback one (as conftest.stack_config does)."""
    raw = read_stack_file(STACK_FILE)
    raw["platform"]["vllmRelease"] = line
    (model,) = raw["models"]
    model.update(gpus=0, resources=dict(RESOURCES), lora={"enabled": True, "adapters": [ADAPTER]})
    config = load_stack_config(raw)
    return config.model_copy(update={"platform": config.platform.model_copy(update={"hf_endpoint": hub_url})})


@pytest.fixture(scope="module", params=CPU_LINES, ids=[f"vllm-{line}" for line in CPU_LINES])
def cpu_engine(request, tmp_path_factory):
    line = request.param
    kit = kit_dir(line)
    made = tiny_model(line)
    tmp = tmp_path_factory.mktemp(f"cpu-model-{line}")
    with HubServer(tmp / "hub") as hub:
        config = cpu_stack_config(hub.url, line)
        (model,) = config.models
        hub.commit(model.source.repo, {p.name: p for p in (made / "model").iterdir()})
        hub.commit(ADAPTER["repo"], {p.name: p for p in (made / "adapter").iterdir()})
        objects = compile_stack(config)
        pod = only(objects, "Deployment", model.name)["spec"]["template"]["spec"]
        volumes = {v["name"]: tmp / "volumes" / v["name"] for v in pod["volumes"]}
        volumes["dshm"] = tmp / "volumes" / "dshm"
        pulls = pull(objects, model.name, volumes, tmp)
    (server,) = [c for c in pod["containers"] if c["name"] == "server"]
    run = bind(server, volumes, {"vllm": str(kit / "bin" / "vllm")},
               {"PATH": f"{kit / 'bin'}:{HOST_PATH}", "LANG": "C.UTF-8"})
    port = free_port()
    set_flag(run, "--host", "127.0.0.1")
    set_flag(run, "--port", str(port))
    set_env(run, "VLLM_CPU_CI_ENV", "1")
    set_env(run, "HOME", str(tmp / "home"))
    (tmp / "home").mkdir()
    uid = str(pod["securityContext"]["runAsUser"])
    argv = ["unshare", "--user", f"--map-user={uid}", f"--map-group={pod['securityContext']['runAsGroup']}", *run.argv]
    run.substitutions.append(("uid", uid, f"user namespace ({argv[:4]})"))
    process = subprocess.Popen(argv, env=run.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True, cwd=tmp)
    engine = Engine(line=line, config=config, objects=objects, server=server, pod=pod, run=run, pulls=pulls,
                    port=port, weights=volumes["weights"], adapters=volumes["lora-cache"], process=process,
                    started=time.monotonic())
    with ready(engine, kit.parent / "logs" / f"engine-{line}-cpu-model-server.log"):
        yield engine


def test_the_rendered_cpu_settings_reach_vllm_unchanged(cpu_engine):
    settings = CPU_SETTINGS[cpu_engine.line]
    rendered = {e["name"]: e.get("value") for e in cpu_engine.server["env"]}
    assert {name: rendered[name] for name in settings} == settings
    assert all(cpu_engine.run.env[name] == value for name, value in settings.items())
    subs = {what for what, _, _ in cpu_engine.run.substitutions}
    model_path = [*cpu_engine.server["command"], *cpu_engine.server["args"]].index("/model-store")
    assert subs == {"argv[0]", f"argv[{model_path}]", "--host", "--port", "env VLLM_LORA_RESOLVER_CACHE_DIR",
                    "env HOME", "env VLLM_CPU_CI_ENV", "uid"}
    assert cpu_engine.server["resources"]["limits"] == RESOURCES
    # The KV cache vLLM made is the rendered size: the tokens it logs × the bytes a token takes in
    # this model (keys and values, every layer and KV head, bf16).
    tokens = re.search(r"KV cache size: ([\d,]+) tokens", cpu_engine.log_text())
    assert tokens, cpu_engine.log_text()[-3000:]
    model = json.loads((cpu_engine.weights / "config.json").read_text())
    per_token = 2 * model["num_hidden_layers"] * model["num_key_value_heads"] * (
        model["hidden_size"] // model["num_attention_heads"]) * 2
    assert int(tokens[1].replace(",", "")) * per_token == int(settings["VLLM_CPU_KVCACHE_SPACE"]) * 2**30


def test_the_cpu_model_and_its_adapter_answer(cpu_engine):
    api = openai.OpenAI(base_url=f"{cpu_engine.base_url}/v1", api_key="unused", max_retries=0, timeout=60)
    assert {m.id for m in api.models.list().data} >= {"tiny-chat"}
    for name in ("tiny-chat", ADAPTER["name"]):
        reply = api.chat.completions.create(model=name, messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
        assert reply.choices[0].finish_reason in ("stop", "length"), name
