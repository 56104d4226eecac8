"""multiNode.weights: perPod — a volume per pod of a LeaderWorkerSet (issue 22 item 4).

The claims come from the LWS's volumeClaimTemplates; each pod's init containers are the puller
Job's own containers (same commands, same checks), pointed at a directory named after the source's
identity hash, then a prune of older revisions; the server mounts that directory only. The render
is checked against the real LWS v0.8.0 CRD schema; the model has no volume, Job or gate of its own.
"""

from __future__ import annotations

import copy

import jsonschema
import pytest

from components.compile import common, multinode, object_store, weights
from components.compile.plan import compile_stack, model_plan
from components.config import ConfigError
from contract.props import GroupObjects
from tests.support.builders import model, stack
from tests.support.real_crds import operator_crd, structural_schema

LWS_CRD = operator_crd("lws", "leaderworkerset.x-k8s.io_leaderworkersets.yaml")
LOCAL = {"size": "1Ti", "storageClassName": "local-nvme"}  # ReadWriteOnce (the default)
S3 = {"type": "s3", "endpoint": "http://minio.storage.svc:9000", "bucket": "models", "prefix": "big/",
      "credentials": {"secret": "models-reader"}}


def per_pod(mode: str = "ray", **fields) -> dict:
    spec = {"nodes": 2, "mode": mode, "weights": "perPod", **fields.pop("multiNode", {})}
    return model("big", **{"gpus": 8, "tensorParallelSize": 8, "weights": LOCAL, "multiNode": spec, **fields})


def lws_of(raw: dict) -> dict:
    (lws,) = [m for m in compile_stack(stack(raw)) if m["kind"] == "LeaderWorkerSet"]
    return lws


def roles(lws: dict) -> list[dict]:
    lwt = lws["spec"]["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        stack(raw)
    return [line.strip() for line in str(caught.value).splitlines() if line.strip().startswith("models.")]


def test_one_claim_per_pod_of_the_weights_size_and_class_deleted_with_the_lws():
    lwt = lws_of(per_pod())["spec"]["leaderWorkerTemplate"]
    assert lwt["volumeClaimTemplates"] == [{"metadata": {"name": "weights"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Ti"}},
        "storageClassName": "local-nvme"}}]
    assert lwt["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Delete"}
    for pod in roles(lws_of(per_pod())):
        # The claim template is the pods' `weights` volume: no template volume of that name.
        assert "weights" not in {v["name"] for v in pod["volumes"]}


def test_no_volume_job_gate_or_puller_policy_of_the_model():
    config = stack(per_pod(), networkPolicy={"enabled": True, "allowFrom": [{"namespaceSelector": {"team": "a"}}]})
    kinds = [(m["kind"], m["metadata"]["name"]) for m in compile_stack(config)]
    assert not [k for k in kinds if k[0] in ("PersistentVolumeClaim", "Job")]
    assert ("NetworkPolicy", "big-puller-egress") not in kinds
    plan = model_plan(config.models[0], config)
    assert {c.role for c in plan.children} & {"weights", "puller", "weights-gate"} == set()
    assert isinstance(plan.status.objects, GroupObjects) and plan.status.objects.puller_job == ""
    # The pull runs inside the pods: its budget is part of the status's wait.
    platform = config.platform
    assert plan.status.ready_timeout_seconds == (platform.startup_timeout_seconds + platform.pending_timeout_seconds
                                                 + platform.pull_timeout_seconds)


@pytest.mark.parametrize("source", ["hf", "s3"])
def test_every_pod_pulls_and_verifies_with_the_pullers_own_containers_before_its_server(source):
    raw = per_pod(source=S3) if source == "s3" else per_pod()
    config = stack(raw)
    m = config.models[0]
    ident = common.identity(m, config.platform)
    if source == "hf":
        expected = [weights.hub_container(m, config.platform, ident, common.tmp_volume()[1])]
    else:
        init, main = object_store.s3_containers(m, ident)
        expected = [*init, *main]
    revision = common.source_hash(m)
    for pod in roles(lws_of(raw)):
        steps = pod["initContainers"]
        names = [c["name"] for c in steps]
        assert names == (["weights-pull", "weights-verify", "weights-prune"] if source == "s3"
                         else ["weights-pull", "weights-prune"])
        for built, rendered in zip(expected, steps, strict=False):
            # Same image, command, args and env as the Job's: only the name and the mount differ.
            for key in ("image", "command", "args", "env", "securityContext"):
                assert rendered.get(key) == built.get(key), key
            (mount,) = [v for v in rendered["volumeMounts"] if v["name"] == "weights"]
            assert (mount["mountPath"], mount["subPath"]) == (common.WEIGHTS_MOUNT, revision)
        # The server reads this revision's directory only, read-only.
        (server,) = [c for c in pod["containers"] if c["name"] == "server"]
        (mount,) = [v for v in server["volumeMounts"] if v["name"] == "weights"]
        assert mount == {"name": "weights", "mountPath": common.WEIGHTS_MOUNT, "readOnly": True, "subPath": revision}
        # The pull writes a fresh volume: fsGroup, without a recursive chown on every start.
        assert pod["securityContext"]["fsGroup"] == ident.gid
        assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"
        assert "tmp" in {v["name"] for v in pod["volumes"]}


def test_a_new_revision_pulls_into_a_new_directory_and_prunes_the_others_last():
    old, new = (per_pod(source={"repo": "acme/big", "revision": rev}) for rev in ("v1", "v2"))
    old_pod, new_pod = roles(lws_of(old))[0], roles(lws_of(new))[0]
    old_dir, new_dir = (stack(raw).models[0] for raw in (old, new))
    assert common.source_hash(old_dir) != common.source_hash(new_dir)
    prune = new_pod["initContainers"][-1]
    assert prune["name"] == "weights-prune" and prune["args"] == [multinode.VOLUME_ROOT_MOUNT, common.source_hash(new_dir)]
    assert prune["volumeMounts"] == [{"name": "weights", "mountPath": multinode.VOLUME_ROOT_MOUNT}]  # the whole volume
    assert old_pod["initContainers"][0]["volumeMounts"][0]["subPath"] != new_pod["initContainers"][0]["volumeMounts"][0]["subPath"]


@pytest.mark.parametrize("mode", ["ray", "dataParallel"])
def test_the_render_validates_against_the_real_lws_crd_schema(mode):
    schema = structural_schema(LWS_CRD, "v1")
    lws = lws_of(per_pod(mode, source=S3))
    jsonschema.validate(lws, schema)
    broken = copy.deepcopy(lws)
    broken["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"][0]["spec"]["size"] = "1Ti"  # not a claim field
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_shared_weights_render_as_before():
    shared = model("big", gpus=8, tensorParallelSize=8, weights={"size": "1Ti", "accessMode": "ReadWriteMany"},
                   multiNode={"nodes": 2})
    explicit = copy.deepcopy(shared)
    explicit["multiNode"]["weights"] = "shared"
    assert compile_stack(stack(shared)) == compile_stack(stack(explicit))
    lwt = lws_of(shared)["spec"]["leaderWorkerTemplate"]
    assert "volumeClaimTemplates" not in lwt and "initContainers" not in lwt["leaderTemplate"]["spec"]


# --- refused, with the fix --------------------------------------------------------------------

def test_shared_weights_on_read_write_once_name_both_fixes():
    (line,) = problems_of(model("big", gpus=8, tensorParallelSize=8, multiNode={"nodes": 2}))
    assert line.startswith("models.0.weights.accessMode: every pod of a multi-node group mounts the shared weights")
    assert "ReadWriteMany" in line and "multiNode.weights: perPod" in line


def test_an_existing_claim_cannot_be_per_pod():
    lines = problems_of(per_pod(source={"type": "pvc", "claimName": "shared-weights"}, weights={"accessMode": "ReadWriteMany"}))
    assert any(line.startswith("models.0.multiNode.weights: an existing claim (source.type: pvc) is one volume")
               and "multiNode.weights: shared" in line for line in lines), lines


def test_a_puller_service_account_cannot_follow_the_pull_into_the_server_pods():
    lines = problems_of(per_pod(source={**S3, "serviceAccountName": "models-reader"}))
    assert any(line.startswith("models.0.source.serviceAccountName: per-pod weights are pulled inside the server pods")
               for line in lines), lines


def test_per_pod_groups_may_be_several_on_read_write_once():
    config = stack(per_pod(replicas=2))
    assert config.models[0].replicas == 2  # no claim is shared between pods


def test_claim_template_changes_replace_the_leader_worker_set():
    # A StatefulSet's claim templates are immutable: the LWS is replaced, not left failing.
    config = stack(per_pod())
    (server,) = [c for c in model_plan(config.models[0], config).children if c.role == "server"]
    assert server.replace_on_changes == ("spec.leaderWorkerTemplate.volumeClaimTemplates",)
    assert server.delete_before_replace  # the same name
    one_pod = stack(model("small"))
    (deployment,) = [c for c in model_plan(one_pod.models[0], one_pod).children if c.role == "server"]
    assert deployment.replace_on_changes == () and not deployment.delete_before_replace
