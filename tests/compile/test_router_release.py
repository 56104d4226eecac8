"""router.release: the flags each Stargate release line gets, and what validate refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.compile.router import compile_router
from components.config import ConfigError, load_stack_config, read_stack_file
from components.config.router_release import BACKEND_CHART_ONLY, READINESS_FLAGS
from tests.support.builders import model

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"


def render(release=None, **router):
    section = {"image": IMAGE, **router}
    if release:
        section["release"] = release
    return compile_router(load_stack_config({"models": [model("chat")], "router": section}))


def args(workload: dict) -> list[str]:
    return workload["spec"]["template"]["spec"]["containers"][0]["args"]


def flags(workload: dict) -> set[str]:
    return {a.split("=", 1)[0] for a in args(workload)}


def test_the_default_line_is_the_chart_render_every_stack_had():
    default, chart = render(replicas=3), render("chart-0.16", replicas=3)
    assert args(default.workload) == args(chart.workload)
    assert args(default.backend_deployment) == args(chart.backend_deployment)
    assert set(READINESS_FLAGS) <= flags(chart.workload)
    assert set(BACKEND_CHART_ONLY) <= flags(chart.backend_deployment)


def test_the_gpu_stack_names_its_line_and_renders_as_before():
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.gpu-cluster.yaml")
    assert raw["router"]["release"] == "chart-0.16"
    without = {**raw, "router": {k: v for k, v in raw["router"].items() if k != "release"}}
    assert compile_router(load_stack_config(raw)) == compile_router(load_stack_config(without))


def test_the_local_stack_runs_the_public_build_made_here_with_its_flags():
    # up-local runs the router image built from the vendored public 0.4.0 sources (docs/images.md).
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    assert (raw["router"]["image"], raw["router"]["release"]) == ("localhost/llm-serving/stargate:0.4.0", "public-0.4")
    assert not set(READINESS_FLAGS) & flags(compile_router(load_stack_config(raw)).workload)


def test_the_public_line_drops_exactly_the_flags_its_build_lacks():
    chart, public = render("chart-0.16", replicas=3), render("public-0.4", replicas=3)
    assert flags(chart.workload) - flags(public.workload) == set(READINESS_FLAGS)
    assert flags(chart.backend_deployment) - flags(public.backend_deployment) == set(BACKEND_CHART_ONLY)
    kept = [a for a in args(chart.workload) if a.split("=", 1)[0] not in READINESS_FLAGS]
    assert args(public.workload) == kept


@pytest.mark.parametrize("router, path, words", [
    ({"args": ["--readiness-warmup-ms=1000"]}, "router.args.0", "not a flag of the public-0.4 router"),
    ({"args": ["--no-such-flag"]}, "router.args.0", "set router.release"),
    ({"pylon": {"image": "nvcr.io/x/pylon:1", "args": ["--made-up"]}, "workerAuth": {"mode": "open"}},
     "router.pylon.args.0", "not a flag of the public-0.4 pylon"),
    ({"pylon": {"image": "nvcr.io/x/pylon:1"}, "workerAuth": {"mode": "token", "secretName": "t"}},
     "router.workerAuth.mode", "public-0.4 router"),
])
def test_validate_refuses_what_the_public_line_lacks(router, path, words):
    with pytest.raises(ConfigError) as error:
        render("public-0.4", **router)
    assert path in str(error.value) and words in str(error.value)


def test_known_public_flags_pass_and_the_chart_line_does_not_check_args():
    public = render("public-0.4", args=["--proxy-max-request-retries=3", "--metrics-prefix=sg"])
    assert args(public.workload)[-2:] == ["--proxy-max-request-retries=3", "--metrics-prefix=sg"]
    chart = render("chart-0.16", args=["--anything-the-chart-image-takes=1"])
    assert args(chart.workload)[-1] == "--anything-the-chart-image-takes=1"


def test_an_unknown_line_is_refused_with_the_choices():
    with pytest.raises(ConfigError) as error:
        render("0.18")
    assert "router.release" in str(error.value) and "public-0.4" in str(error.value)
