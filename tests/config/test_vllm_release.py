"""vLLM release lines at `validate`: which line a model runs (setting, image tag, default), and a
model's own args, env and LoRA rank checked against that line's facts (the committed description
of its real parser: components/config/vllm_lines/; the engine tier compares the refusals with the
real `vllm serve`, tests/engine/test_vllm_args_real.py)."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from components.config.vllm_args import normalise
from components.config.vllm_checks import line_of
from components.config.vllm_release import RELEASES
from tests.support.builders import model

V032 = "docker.io/vllm/vllm-openai:v0.32.0"


def line(platform: dict | None = None, **fields) -> str:
    config = load_stack_config({"platform": platform or {}, "models": [model("m", **fields)]})
    return line_of(config.models[0], config.platform).name


def refusal(platform: dict | None = None, **fields) -> str:
    with pytest.raises(ConfigError) as error:
        load_stack_config({"platform": platform or {}, "models": [model("m", **fields)]})
    return str(error.value)


# --- which line -------------------------------------------------------------------------------

def test_a_stack_that_does_not_say_runs_0_11_as_before():
    config = load_stack_config({"models": [model("m")]})
    assert config.platform.vllm_image == "docker.io/vllm/vllm-openai:v0.11.0" and line() == "0.11"


def test_the_platform_setting_picks_the_line_and_its_image():
    config = load_stack_config({"platform": {"vllmRelease": "0.32"}, "models": [model("m")]})
    assert config.platform.vllm_image == V032 and line({"vllmRelease": "0.32"}) == "0.32"


@pytest.mark.parametrize("image, expected", [
    (V032, "0.32"), ("docker.io/vllm/vllm-openai:v0.32.1", "0.32"), ("docker.io/vllm/vllm-openai:v0.11.0", "0.11"),
    ("registry.example.com/mirror/vllm-openai:v0.32.0@sha256:" + "a" * 64, "0.32"),
    ("registry.example.com/mirror/vllm-openai:cpu-build", "0.11"),  # names no version: the default
])
def test_the_image_tag_decides_where_it_names_a_line(image, expected):
    assert line({"vllmImage": image}) == expected
    assert line(image=image) == expected


def test_a_models_own_setting_wins_over_the_platforms():
    assert line({"vllmRelease": "0.32"}, vllmRelease="0.11", image="docker.io/vllm/vllm-openai:v0.11.0") == "0.11"
    assert line({"vllmRelease": "0.32"}) == "0.32"


def test_a_setting_contradicting_the_image_tag_is_refused_with_the_fix():
    message = refusal({"vllmRelease": "0.32", "vllmImage": "docker.io/vllm/vllm-openai:v0.11.0"})
    assert "platform.vllmRelease: '0.32' does not match the image docker.io/vllm/vllm-openai:v0.11.0" in message
    assert V032 in message
    assert "models.0.vllmRelease: '0.11' does not match" in refusal(vllmRelease="0.11", image=V032)


def test_an_image_of_no_line_is_refused_naming_the_lines():
    message = refusal(image="docker.io/vllm/vllm-openai:v0.10.2")
    assert "models.0.image: the image docker.io/vllm/vllm-openai:v0.10.2 is vLLM 0.10.2" in message
    assert "0.11, 0.32" in message and "vllmRelease" in message


def test_a_nim_model_takes_no_vllm_release():
    message = refusal(engine="nim", image="nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3", vllmRelease="0.32")
    assert "models.0.vllmRelease: applies to vLLM models only" in message


# --- the model's args against the line's parser -----------------------------------------------

@pytest.mark.parametrize("args, path, said", [
    (["--max-num-seqs", "abc"], "models.0.args.0", "argument --max-num-seqs: invalid int value: 'abc'"),
    (["--enable-prefix-caching", "--no-such-flag"], "models.0.args.1", "unrecognized arguments: --no-such-flag"),
    (["--dtype", "float8"], "models.0.args.0", "argument --dtype: invalid choice: 'float8' (choose from"),
    (["--max-model-len"], "models.0.args.0", "argument --max-model-len: expected one argument"),
    (["--gpu_memory_utilization=lots"], "models.0.args.0", "invalid float value: 'lots'"),
    (["--max-cpu-loras", "many"], "models.0.args.0", "Value many cannot be converted to <class 'int'>."),
    (["--max-num-batched-tokens", "many"], "models.0.args.0", "invalid human_readable_int value: 'many'"),
])
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_a_bad_arg_is_refused_as_the_lines_parser_refuses_it(release, args, path, said):
    message = refusal({"vllmRelease": release}, args=args)
    assert f"{path}: vLLM {release} (`vllm serve`) refuses it: " in message and said in message


def test_an_unknown_flag_gets_the_close_spellings_the_line_has():
    assert "did you mean --max-num-seqs" in refusal(args=["--max-num-seq5", "4"])


@pytest.mark.parametrize("flag", ["--enable-lora-bias", "--lora-extra-vocab-size=256"])
def test_a_flag_0_32_removed_is_refused_there_naming_the_line_that_has_it(flag):
    message = refusal({"vllmRelease": "0.32"}, args=[flag])
    assert "models.0.args.0: vLLM 0.32 (`vllm serve`) refuses it: unrecognized arguments" in message
    assert "removed in vLLM 0.12" in message and "run vLLM 0.11 (vllmRelease)" in message
    assert line(args=[flag]) == "0.11"  # 0.11 still takes it


@pytest.mark.parametrize("args", [
    ["--max-model-len", "8k", "--max_num_seqs=8", "--no-enable-prefix-caching"],
    ["--compilation-config.level", "3"], ["--seed", "-1"], ["--max-num-seq", "4"],  # argparse abbreviation
])
def test_what_the_parser_takes_passes(args):
    assert line(args=args) == "0.11"


def test_the_args_are_rewritten_as_vllms_parser_rewrites_them():
    assert normalise(["--max_num_seqs=8", "--hf-overrides.rope.factor", "2", "-O3"]) == [
        "--max-num-seqs=8", "--hf-overrides", '{"rope": {"factor": 2}}', "-O", '{"level": 3}']


# --- env, LoRA ranks and API servers ----------------------------------------------------------

def test_a_variable_the_line_dropped_is_refused_there_only():
    message = refusal({"vllmRelease": "0.32"}, env={"VLLM_USE_V1": "1"})
    assert "models.0.env.VLLM_USE_V1: vLLM 0.32 no longer reads it (vLLM 0.11 did)" in message
    assert line(env={"VLLM_USE_V1": "1"}) == "0.11"


def test_a_misspelt_vllm_variable_is_refused_with_the_name_it_has():
    assert "did you mean VLLM_LOGGING_LEVEL" in refusal(env={"VLLM_LOGING_LEVEL": "DEBUG"})


def test_rank_1_is_a_0_32_rank_only():
    lora = {"enabled": True, "maxLoraRank": 1}
    message = refusal(lora=lora)
    assert "models.0.lora.maxLoraRank: 1 is not a rank vLLM 0.11 accepts" in message
    assert "use 8, or set vllmRelease: '0.32'" in message
    assert line({"vllmRelease": "0.32"}, lora=lora) == "0.32"


def test_lora_with_data_parallel_is_refused_on_0_32_where_it_starts_an_api_server_per_rank():
    lora = {"enabled": True}
    message = refusal({"vllmRelease": "0.32"}, lora=lora, args=["--data-parallel-size", "2"])
    assert "models.0.args.0: --data-parallel-size 2 starts 2 API servers on vLLM 0.32" in message
    assert "add --api-server-count 1" in message
    assert line({"vllmRelease": "0.32"}, lora=lora, args=["--data-parallel-size", "2", "--api-server-count", "1"])
    assert line(lora=lora, args=["--data-parallel-size", "2"]) == "0.11"  # 0.11: one API server by default


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_lora_with_more_api_servers_is_refused_on_every_line(release):
    message = refusal({"vllmRelease": release}, lora={"enabled": True}, args=["--api-server-count", "2"])
    assert "models.0.args.0: --api-server-count 2" in message and "more than one API server" in message


def test_a_models_own_image_tag_names_its_line_whatever_the_platform_says():
    assert line({"vllmRelease": "0.32"}, image="docker.io/vllm/vllm-openai:v0.11.0") == "0.11"
    assert line({"vllmRelease": "0.32"}, image="registry.example.com/own-build:2024") == "0.32"


def test_an_unquoted_line_is_refused_saying_yaml_read_a_number():
    assert "platform.vllmRelease: 0.32 is a number to YAML; write the line quoted" in refusal({"vllmRelease": 0.32})
