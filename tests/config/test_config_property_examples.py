"""The counter-examples the property test found (tests/config/test_config_property.py), each a
fixed example now: stacks the config model accepted before issue 25 and Kubernetes would have
refused, that carried a credential in plain text, or whose refusal repeated a credential. Found by running the property test's
strategies against the config model as it was (main at 5fab70f, 2026-12-01, 400 stacks at seed
2025 and 1200 at seed 99); each is refused at its field now, without repeating a credential.
docs/validation.md lists them."""

from __future__ import annotations

import pytest

from components.config import ConfigError, load_stack_config
from tests.config.test_config_property import check_one
from tests.support.builders import NIM_IMAGE, model
from tests.support.config_strategies import CREDENTIALS

INT32_OVER = 2**31
RWX = {"accessMode": "ReadWriteMany"}
OPERATOR = {"engine": "nim", "image": NIM_IMAGE, "path": "operator", "nim": {"authSecret": "ngc"}}
ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.18.0"}

# (id, stack, the field the refusal names, what happened before)
FOUND = [
    ("deployment-replicas", {"models": [model(replicas=INT32_OVER, weights=RWX)]}, "models.0.replicas",
     "Deployment spec.replicas beyond int32: refused by the API server at `up`"),
    ("nimservice-replicas", {"models": [model("n", replicas=INT32_OVER, weights=RWX, **OPERATOR)]},
     "models.0.replicas", "NIMService spec.replicas beyond int32"),
    ("router-replicas", {"models": [model()], "router": {**ROUTER, "replicas": INT32_OVER}}, "router.replicas",
     "router Deployment/StatefulSet replicas beyond int32"),
    ("backend-router-replicas", {"models": [model()], "router": {**ROUTER, "backendRouter": {
        "enabled": True, "replicas": INT32_OVER}}}, "router.backendRouter.replicas", "backend router replicas"),
    ("run-as-user", {"models": [model(securityContext={"runAsUser": INT32_OVER, "allowNonDefaultIdentity": True})]},
     "models.0.securityContext.runAsUser", "runAsUser beyond IsValidUserID's 0..2147483647"),
    ("nim-user-id", {"models": [model("n", securityContext={"runAsUser": INT32_OVER,
                                                            "allowNonDefaultIdentity": True}, **OPERATOR)]},
     "models.0.securityContext.runAsUser", "NIMCache/NIMService userID beyond int32"),
    ("fs-group", {"platform": {"vllmGid": INT32_OVER}, "models": [model()]}, "platform.vllmGid",
     "runAsGroup and fsGroup beyond IsValidGroupID"),
    ("router-gid", {"models": [model()], "router": {**ROUTER, "gid": INT32_OVER}}, "router.gid",
     "router runAsGroup/fsGroup beyond int32"),
    ("node-selector-prefix", {"models": [model(nodeSelector={"a/b/c": "x"})]}, "models.0.nodeSelector.a/b/c",
     "a nodeSelector key with two slashes"),
    ("node-selector-empty-name", {"models": [model(nodeSelector={"example.com/": "x"})]},
     "models.0.nodeSelector.example.com/", "a nodeSelector key with an empty name"),
    ("node-selector-long-key", {"models": [model(nodeSelector={"x" * 64: "x"})]}, "models.0.nodeSelector." + "x" * 64,
     "a nodeSelector key of 64 characters"),
    ("node-selector-value", {"platform": {"gpuNodeSelector": {"tier": "x/y"}}, "models": [model()]},
     "platform.gpuNodeSelector.tier", "a nodeSelector value with a slash"),
    ("operator-node-selector", {"models": [model("n", nodeSelector={"bad key": "x"}, **OPERATOR)]},
     "models.0.nodeSelector.bad key", "a NIMCache/NIMService nodeSelector the API server refuses"),
    ("credential-in-env", {"models": [model(env={"MODEL_OPTS": CREDENTIALS[0]})]}, "models.0.env.MODEL_OPTS",
     "a Hugging Face token in plain text in the manifest and the state"),
    ("network-peer-pod-selector", {"platform": {"networkPolicy": {"enabled": True, "allowFrom": [
        {"podSelector": {"bad key": "x"}}]}}, "models": [model()], "router": ROUTER},
     "platform.networkPolicy.allowFrom.0.podSelector.bad key", "a NetworkPolicy matchLabels key the API server refuses"),
    ("network-peer-namespace-selector", {"platform": {"networkPolicy": {"enabled": True, "allowFrom": [
        {"namespaceSelector": {"bad key": "x"}}]}}, "models": [model()], "router": ROUTER},
     "platform.networkPolicy.allowFrom.0.namespaceSelector.bad key", "the same in namespaceSelector"),
    # Found at the release merge by the dry-run property test (tests/integration/
    # test_config_property_on_cluster.py) once its generator drew multiNode: the LWS webhook
    # refuses replicas × size beyond int32, though each count alone is in range.
    ("multinode-group-pods", {"models": [model(gpus=8, tensorParallelSize=8, replicas=INT32_OVER - 1,
                                                multiNode={"nodes": 2}, weights=RWX)]}, "models.0.replicas",
     "LeaderWorkerSet refused by its webhook: the product of replicas and worker replicas passes int32"),
    ("credential-echoed-in-name", {"models": [model(CREDENTIALS[0])]}, "models.0.name",
     "refused, but the message repeated the token ('<value>' is not a valid name)"),
    ("credential-echoed-in-image", {"models": [model()], "router": {"image": CREDENTIALS[1]}}, "router.image",
     "refused, but the message repeated the NGC key ('image <value>' is not fully qualified)"),
]


@pytest.mark.parametrize(("stack", "path"), [(s, p) for _, s, p, _ in FOUND], ids=[i for i, *_ in FOUND])
def test_each_counter_example_is_refused_at_its_field(stack, path):
    with pytest.raises(ConfigError) as caught:
        load_stack_config({"ngcApiKey": {"secure": "v1:x"}, **stack})
    assert any(line.startswith(f"{path}:") for line in caught.value.problems), caught.value.problems
    assert check_one({"ngcApiKey": {"secure": "v1:x"}, **stack}) is None  # well-formed, no credential echoed
