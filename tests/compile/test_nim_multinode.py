"""multiNode on the NIM operator path: NIMService ``spec.multiNode`` (issue 22, item 3).

The operator renders the LeaderWorkerSet itself (k8s-nim-operator v3.1.2); what we render is the
NIMService's ``multiNode`` as its CRD declares it (checked against the vendored CRDs of v3.1.2 and
main), the selectors that reach every pod of the operator's groups, the status props naming its
LeaderWorkerSet, the check's record of ``multiNode`` (immutable: a change is refused at preview),
and a refusal, with the field and the fix, for everything the operator refuses or ignores.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from components import children as roles
from components.compile import compile_stack, nim
from components.compile.plan import model_plan
from components.config import ConfigError
from contract.props import NimOperatorCheckProps, OperatorObjects, StatusProps
from tests.support.builders import model, stack
from tests.support.real_crds import NIM_CRDS_ABSENT, NIM_OPERATOR_RELEASES, nim_operator_crds, structural_schema

NGC_IMAGE = "nvcr.io/nim/deepseek-ai/deepseek-r1:1.7.3"
RWX = {"accessMode": "ReadWriteMany", "size": "1Ti"}
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"


def nim_group(name: str = "r1", mode: str = "ray", nodes: int = 2, **fields) -> dict:
    """A valid multi-node NIM model (2 nodes × 8 GPUs), unless ``fields`` make it not."""
    multi = {"nodes": nodes, "mode": mode, **fields.pop("multiNode", {})}
    nim_section = {"authSecret": "ngc-api", **fields.pop("nim", {})}
    return model(name, **{"engine": "nim", "path": "operator", "image": NGC_IMAGE, "nim": nim_section, "gpus": 8,
                          "tensorParallelSize": 8, "weights": RWX, "multiNode": multi, **fields})


def service_of(raw: dict, **platform) -> dict:
    config = stack(raw, **platform)
    return nim.compile_nim_operator(config.models[0], config).service


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        stack(raw)
    return [line.strip() for line in str(caught.value).splitlines() if line.strip().startswith("models.")]


# --- the render ---------------------------------------------------------------------------------

def test_ray_mode_renders_the_operators_multinode_with_one_pipeline_stage_per_node():
    spec = service_of(nim_group(nodes=3, replicas=2))["spec"]
    # LWS size = parallelism.pipeline; GPUS_PER_NODE = parallelism.tensor = each pod's GPUs.
    assert spec["multiNode"] == {"backendType": "lws", "parallelism": {"tensor": 8, "pipeline": 3},
                                 "ray": {"rayPort": 6379}}
    assert spec["replicas"] == 2  # one group per replica
    assert spec["resources"]["limits"]["nvidia.com/gpu"] == "8"  # leader and every worker
    # No JSON log formatter on Ray workers: the operator's default 1 is replaced.
    assert {"name": "NIM_JSONL_LOGGING", "value": "0"} in spec["env"]
    assert "affinity" not in spec  # the operator's LWS template has none


def test_mpi_mode_renders_mpi_and_never_both_launchers():
    spec = service_of(nim_group(mode="mpi", replicas=2))["spec"]
    assert spec["multiNode"] == {"backendType": "lws", "parallelism": {"tensor": 8, "pipeline": 2},
                                 "mpi": {"mpiStartTimeout": nim.MPI_START_TIMEOUT}}
    assert "ray" not in spec["multiNode"]  # CRD rule: mpi and ray are mutually exclusive
    assert all(e["name"] != "NIM_JSONL_LOGGING" for e in spec["env"])


def test_a_one_node_nim_model_has_no_multinode():
    raw = model("one", engine="nim", path="operator", image=NGC_IMAGE, nim={"authSecret": "ngc-api"}, replicas=2,
                weights=RWX)
    spec = service_of(raw)["spec"]
    assert "multiNode" not in spec and "affinity" in spec


@pytest.mark.parametrize("release", NIM_OPERATOR_RELEASES)
@pytest.mark.parametrize("mode", ["ray", "mpi"])
def test_the_multinode_nimservice_validates_against_the_operators_own_crds(mode, release):
    files = nim_operator_crds(release)
    if files is None:
        pytest.skip(NIM_CRDS_ABSENT)
    config = stack(nim_group(mode=mode))
    objects = nim.compile_nim_operator(config.models[0], config)
    jsonschema.validate(objects.cache, structural_schema(files[0], nim.VERSION))
    jsonschema.validate(objects.service, structural_schema(files[1], nim.VERSION))
    # Control: the schema does check inside multiNode (parallelism is required).
    broken = {**objects.service, "spec": {**objects.service["spec"], "multiNode": {"backendType": "lws"}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, structural_schema(files[1], nim.VERSION))


def test_the_network_policy_and_budget_select_every_pod_of_the_operators_groups():
    config = stack(nim_group(replicas=2), networkPolicy={"enabled": True, "allowFrom": []})
    manifests = compile_stack(config)
    (policy,) = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    (budget,) = [m for m in manifests if m["kind"] == "PodDisruptionBudget"]
    # The operator labels leader pods only; the LWS controller labels every pod with the set's name.
    group = {LWS_NAME_LABEL: "r1-lws"}
    assert policy["spec"]["podSelector"] == {"matchLabels": group}
    assert {"from": [{"podSelector": {"matchLabels": group}}]} in policy["spec"]["ingress"]  # Ray/MPI/NCCL
    assert budget["spec"]["selector"] == {"matchLabels": group}


def test_status_reads_the_operators_leader_worker_set_and_the_check_records_multinode():
    config = stack(nim_group(nodes=3))
    plan = model_plan(config.models[0], config)
    objects = plan.status.objects
    assert isinstance(objects, OperatorObjects)
    assert (objects.nim_service, objects.leader_worker_set, objects.group_size) == ("r1", "r1-lws", 3)
    assert StatusProps.from_dict(plan.status.to_dict()) == plan.status  # survives the engine's round trip
    assert plan.outputs["objects"]["leader_worker_set"] == "r1-lws"
    # spec.multiNode is immutable: the operator-path check records it and refuses a change at preview
    # (tests/providers/test_nim_status.py); the NIMService is never replaced or updated for it.
    (check,) = [c for c in plan.children if c.role == roles.NIM_OPERATOR_CHECK]
    wire = check.props.to_dict()
    assert json.loads(wire["multi_node"]) == nim.compile_nim_operator(config.models[0], config).service["spec"]["multiNode"]
    assert NimOperatorCheckProps.from_dict(wire) == check.props
    (service,) = [c for c in plan.children if c.role == roles.NIM_SERVICE]
    assert service.replace_on_changes == () and not service.delete_before_replace


def test_a_one_node_operator_model_records_the_same_inputs_as_before():
    raw = model("one", engine="nim", path="operator", image=NGC_IMAGE, nim={"authSecret": "ngc-api"})
    config = stack(raw)
    plan = model_plan(config.models[0], config)
    wire = plan.status.to_dict()
    assert "leader_worker_set" not in wire and "group_size" not in wire
    (check,) = [c for c in plan.children if c.role == roles.NIM_OPERATOR_CHECK]
    assert set(check.props.to_dict()) == {"model", "crds", "kubeconfig", "context"}


# --- what the operator refuses or ignores: the field and the fix ---------------------------------

REFUSED = [
    ("raw-path", {"path": "raw"}, "multiNode", "multi-node NIM is rendered by the NIM operator",
     "set path: operator"),
    ("rwo-cache", {"weights": {"accessMode": "ReadWriteOnce", "size": "1Ti"}}, "weights.accessMode",
     "mounts the NIMCache's volume", "set weights.accessMode: ReadWriteMany"),
    ("per-pod-weights", {"multiNode": {"weights": "perPod"}}, "multiNode.weights", "NIMCache's one volume",
     "set multiNode.weights: shared"),
    ("autoscaling", {"autoscaling": {"enabled": True, "maxReplicas": 2}, "replicas": 1}, "autoscaling.enabled",
     "autoScaling must be nil or disabled when multiNode is set", "remove autoscaling and set replicas"),
    ("tensor-not-gpus", {"tensorParallelSize": 4}, "tensorParallelSize", "tensor parallel across each pod's GPUs",
     "set tensorParallelSize: 8"),
    ("pipeline-not-nodes", {"multiNode": {"pipelineParallelSize": 4}}, "multiNode.pipelineParallelSize",
     "one pipeline stage per pod", "set it to 2"),
    ("data-parallel", {"multiNode": {"mode": "dataParallel"}}, "multiNode.mode", "Ray", "set multiNode.mode: ray or mpi"),
    ("expert-parallel", {"multiNode": {"expertParallel": True}}, "multiNode.expertParallel",
     "no expert-parallel setting", "remove it"),
    ("args", {"args": ["--foo"]}, "args", "leaves the NIMService's args out", "pass NIM settings as env"),
    ("operator-env", {"env": {"NIM_NODE_RANK": "0"}}, "env.NIM_NODE_RANK", "set by the NIM operator", "remove it"),
    ("json-logging-on-ray", {"env": {"NIM_JSONL_LOGGING": "1"}}, "env.NIM_JSONL_LOGGING", "Ray workers", "remove it"),
]


@pytest.mark.parametrize("fields, where, why, fix", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_each_refusal_names_the_field_and_the_fix(fields, where, why, fix):
    raw = nim_group(**fields)
    lines = problems_of(raw)
    (line,) = [line for line in lines if line.startswith(f"models.0.{where}:")]
    assert why in line and fix in line, line


def test_mpi_mode_keeps_json_logging_free():
    env = service_of(nim_group(mode="mpi", env={"NIM_JSONL_LOGGING": "1"}))["spec"]["env"]  # refused in ray mode only
    assert [e for e in env if e["name"] == "NIM_JSONL_LOGGING"] == [{"name": "NIM_JSONL_LOGGING", "value": "1"}]


def test_tensor_parallel_size_counts_on_hf_caches_too_when_multinode():
    """Elsewhere an hf cache refuses tensorParallelSize (no effect); multi-node, it is parallelism.tensor."""
    raw = nim_group(nim={"cacheSource": "hf", "authSecret": "hf-token", "pullSecret": "ngc-registry",
                         "modelPuller": "nvcr.io/nim/nvidia/llm-nim:1.12.0"}, source={"repo": "deepseek-ai/DeepSeek-R1"})
    assert service_of(raw)["spec"]["multiNode"]["parallelism"]["tensor"] == 8
