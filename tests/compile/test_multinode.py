"""multiNode: a LeaderWorkerSet instead of the Deployment (issue 22).

The rendered LeaderWorkerSet is checked against the LWS v0.8.0 CRD's own schema (the operators
cache, tests/real_crds.py), every vLLM option of both modes against vLLM 0.11's parser
(each release line's, components/config/vllm_lines/), and the settings a multi-node model cannot have are refused
with the fix."""

from __future__ import annotations

import copy
import re

import jsonschema
import pytest

from components.compile import network
from components.compile.plan import compile_stack, model_plan
from components.config import ConfigError
from components.config.vllm_checks import parser_of
from components.config.vllm_release import RELEASES
from contract.props import GroupObjects
from tests.support.builders import model, stack
from tests.support.real_crds import operator_crd, structural_schema

RWX = {"accessMode": "ReadWriteMany", "size": "1Ti"}
LWS_CRD = operator_crd("lws", "leaderworkerset.x-k8s.io_leaderworkersets.yaml")


def big(mode: str = "ray", nodes: int = 2, **fields) -> dict:
    spec = {"nodes": nodes, "mode": mode, **fields.pop("multiNode", {})}
    return model("big", **{"gpus": 8, "tensorParallelSize": 8, "weights": RWX, "multiNode": spec, **fields})


def lws_of(raw: dict, **platform) -> dict:
    config = stack(raw, **platform)
    (lws,) = [m for m in compile_stack(config) if m["kind"] == "LeaderWorkerSet"]
    return lws


def templates(lws: dict) -> tuple[dict, dict]:
    lwt = lws["spec"]["leaderWorkerTemplate"]
    return lwt["leaderTemplate"]["spec"]["containers"][0], lwt["workerTemplate"]["spec"]["containers"][0]


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        stack(raw)
    return [line.strip() for line in str(caught.value).splitlines() if line.strip().startswith("models.")]


# --- the LeaderWorkerSet ------------------------------------------------------------------------

def test_a_group_per_replica_sized_by_nodes_recreated_whole_and_never_surging():
    lws = lws_of(big(nodes=3, replicas=2, multiNode={"pipelineParallelSize": 3}))
    spec = lws["spec"]
    assert (lws["apiVersion"], lws["kind"]) == ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert spec["replicas"] == 2 and spec["leaderWorkerTemplate"]["size"] == 3
    assert spec["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert spec["startupPolicy"] == "LeaderCreated"
    assert spec["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxUnavailable": 1, "maxSurge": 0}
    for container in templates(lws):
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"  # the node's share


def test_a_group_takes_one_node_per_pod():
    lwt = lws_of(big())["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        affinity = lwt[role]["spec"]["affinity"]["podAntiAffinity"]
        (term,) = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["matchLabelKeys"] == ["leaderworkerset.sigs.k8s.io/group-key"]
        assert term["labelSelector"]["matchLabels"].items() <= lwt[role]["metadata"]["labels"].items()


def test_the_service_selects_the_leaders_only():
    config = stack(big())
    (service,) = [m for m in compile_stack(config) if m["kind"] == "Service"]
    lws = lws_of(big())
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    labels = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    assert {k: v for k, v in service["spec"]["selector"].items() if k in labels} .items() <= labels.items()


def test_ray_mode_runs_the_head_on_the_leader_and_workers_join_it():
    leader, worker = templates(lws_of(big("ray")))
    assert leader["command"][:2] == ["sh", "-c"] and "ray start --head --port=6379" in leader["command"][2]
    assert 'exec vllm serve "$@"' in leader["command"][2]
    args = leader["args"]
    assert args[args.index("--distributed-executor-backend") + 1] == "ray"
    assert args[args.index("--pipeline-parallel-size") + 1] == "2"
    assert args[args.index("--tensor-parallel-size") + 1] == "8"
    assert 'ray start --address="$LWS_LEADER_ADDRESS:6379" --block' in worker["command"][2]
    assert worker["args"] == []
    # Only the leader serves HTTP: probes and port there, none on the workers.
    assert "readinessProbe" in leader and leader["ports"][0]["name"] == "http"
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "ports"} & worker.keys()


def test_data_parallel_mode_without_ray_workers_headless_from_their_start_rank():
    leader, worker = templates(lws_of(model("moe", gpus=8, tensorParallelSize=4, weights=RWX,
                                            multiNode={"nodes": 2, "mode": "dataParallel", "expertParallel": True})))
    args = leader["args"]
    assert leader["command"] == ["vllm", "serve"] and "--distributed-executor-backend" not in args
    assert args[args.index("--data-parallel-size") + 1] == "4"  # 2 nodes × 8 GPUs / TP 4
    assert args[args.index("--data-parallel-size-local") + 1] == "2"
    assert args[args.index("--data-parallel-address") + 1] == "$(LWS_LEADER_ADDRESS)"
    assert args[args.index("--data-parallel-rpc-port") + 1] == "13345"
    assert "--enable-expert-parallel" in args and "--headless" not in args
    assert worker["args"] == args
    assert '--headless --data-parallel-start-rank "$((LWS_WORKER_INDEX * 2))"' in worker["command"][2]


@pytest.mark.parametrize("line", sorted(RELEASES))
def test_each_role_parses_on_its_line_as_internal_load_balancing_with_headless_workers(line):
    """The leader gives no start rank (on 0.32 a start rank without --headless is hybrid load
    balancing) and no API server count (vLLM's default: 1 on 0.11, the data-parallel size on 0.32,
    which only runtime LoRA updating would refuse, and multi-node models take no LoRA)."""
    raw = model("moe", gpus=8, tensorParallelSize=4, weights=RWX, multiNode={"nodes": 2, "mode": "dataParallel"})
    leader, worker = templates(lws_of(raw, vllmRelease=line))
    parser = parser_of(line)
    parsed = parser.parse_args(leader["args"])
    assert parsed.data_parallel_start_rank is None and not parsed.headless and parsed.api_server_count is None
    worker_args = [*worker["args"], "--headless", "--data-parallel-start-rank", "2"]  # as its script runs it
    assert parser.parse_args(worker_args).headless
    assert "multi-node models do not offer them" in " ".join(problems_of({**raw, "lora": {"enabled": True}}))


def _vllm_options(container: dict) -> set[str]:
    """Every option given to `vllm serve`, in the args and in a wrapper script."""
    words = [*container.get("args", [])]
    script = container["command"][2] if container["command"][:2] == ["sh", "-c"] else ""
    if "vllm serve" in script:
        words += script.split("vllm serve", 1)[1].split()
    return {w.split("=", 1)[0] for w in words if w.startswith("-")}


@pytest.mark.parametrize("line", sorted(RELEASES))
@pytest.mark.parametrize("mode", ["ray", "dataParallel"])
def test_every_vllm_option_of_both_roles_is_one_the_line_accepts(mode, line):
    extra = {"expertParallel": True} if mode == "dataParallel" else {}
    roles = templates(lws_of(big(mode, multiNode=extra), vllmRelease=line))
    options = set().union(*(_vllm_options(c) for c in roles))
    assert options - RELEASES[line].options == set()
    mode_options = ({"--distributed-executor-backend", "--pipeline-parallel-size"} if mode == "ray" else
                    {"--data-parallel-size", "--data-parallel-size-local", "--data-parallel-address",
                     "--data-parallel-rpc-port", "--data-parallel-start-rank", "--headless", "--enable-expert-parallel"})
    assert mode_options <= options  # the check above saw them


@pytest.mark.parametrize("mode", ["ray", "dataParallel"])
def test_the_render_validates_against_the_real_lws_crd_schema(mode):
    schema = structural_schema(LWS_CRD, "v1")
    lws = lws_of(big(mode))
    jsonschema.validate(lws, schema)
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RestartGroup"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["groupSize"] = 2
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_the_status_reads_the_groups():
    config = stack(big())
    plan = model_plan(config.models[0], config)
    objects = plan.status.objects
    assert isinstance(objects, GroupObjects) and objects.group_size == 2
    # Not the model's name: the LWS controller's headless Service takes the LeaderWorkerSet's.
    assert objects.leader_worker_set == "big-lws" and objects.service == "big"
    assert plan.outputs["objects"]["leader_worker_set"] == "big-lws"


def test_a_one_node_model_keeps_its_deployment():
    kinds = [m["kind"] for m in compile_stack(stack(model("small")))]
    assert "Deployment" in kinds and "LeaderWorkerSet" not in kinds


def test_the_network_policy_lets_group_pods_talk():
    config = stack(big(), networkPolicy={"enabled": True, "allowFrom": [{"namespaceSelector": {"team": "a"}}]})
    (policy,) = [m for m in compile_stack(config) if m["kind"] == "NetworkPolicy" and m["metadata"]["name"] == "big-ingress"]
    group = {"podSelector": {"matchLabels": network.server_pods(config.models[0])}}
    assert {"from": [group]} in policy["spec"]["ingress"]
    single = stack(model("small"), networkPolicy={"enabled": True, "allowFrom": [{"namespaceSelector": {"team": "a"}}]})
    (policy,) = [m for m in compile_stack(single) if m["kind"] == "NetworkPolicy" and m["metadata"]["name"] == "small-ingress"]
    assert len(policy["spec"]["ingress"]) == 1


# --- what a multi-node model cannot be ----------------------------------------------------------

def test_ray_parallelism_must_cover_the_groups_gpus():
    (line,) = problems_of(big(multiNode={"pipelineParallelSize": 3}))
    assert re.search(r"multiNode.pipelineParallelSize: tensorParallelSize 8 × pipelineParallelSize 3 = 24 GPUs, "
                     r"but a group has 2 × 8 = 16", line)


@pytest.mark.parametrize("fields, where", [
    ({"autoscaling": {"enabled": True, "maxReplicas": 2}, "replicas": 1}, "autoscaling.enabled"),
    ({"multiNode": {"expertParallel": True}}, "multiNode.expertParallel"),
    ({"lora": {"enabled": True}}, "lora.enabled"),
])
def test_settings_a_multi_node_model_cannot_have_are_refused(fields, where):
    lines = problems_of(big(**fields))
    assert any(line.startswith(f"models.0.{where}:") for line in lines), lines


def test_nim_raw_mpi_on_vllm_and_data_parallel_pipeline_are_refused():
    # NIM multi-node is the operator path's (tests/compile/test_nim_multinode.py); the raw path is refused.
    nim = model("n", engine="nim", image="nvcr.io/nim/meta/llama-3.1-8b-instruct:1.3.3", weights=RWX,
                multiNode={"nodes": 2})
    assert any(line.startswith("models.0.multiNode: multi-node NIM is rendered by the NIM operator")
               and "set path: operator" in line for line in problems_of(nim))
    lines = problems_of(big("mpi"))
    assert any(line.startswith("models.0.multiNode.mode: mpi is the NIM operator's launcher")
               and "set multiNode.mode: ray" in line for line in lines), lines
    lines = problems_of(big("dataParallel", multiNode={"pipelineParallelSize": 2}))
    assert any(line.startswith("models.0.multiNode.pipelineParallelSize: pipeline parallel is offered in mode ray")
               for line in lines)


def test_metrics_scrape_the_leaders_through_the_service():
    config = stack(big(), metrics={"enabled": True})
    manifests = compile_stack(config)
    (monitor,) = [m for m in manifests if m["kind"] == "ServiceMonitor"]
    (service,) = [m for m in manifests if m["kind"] == "Service"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "http" == service["spec"]["ports"][0]["name"]
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
