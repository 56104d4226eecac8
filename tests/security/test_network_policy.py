"""`platform.networkPolicy`: one NetworkPolicy per model that admits traffic to its server pods
only from the router's pods and `allowFrom` (by default the `monitoring` namespace).

The policies are checked by what they do, not only by their fields: a small evaluator of the
NetworkPolicy ingress semantics (podSelector = the policy's namespace, namespaceSelector alone =
every pod of those namespaces, both = those pods in those namespaces; ports) is asked about the
pods the stack itself runs, labelled as its compilers label them.
"""

from __future__ import annotations

import pytest
from test_secrets_program import run_program

from components.compile import compile_stack
from components.config import ConfigError, load_stack_config, read_stack_file
from policies.rules.images import parse_image
from tests.support.kube_schema import assert_valid_kubernetes

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.6.0"
BACKEND_IMAGE = "nvcr.io/nvidia/llm-backend-router:0.6.0"
NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
NAMESPACE = "llm-serving"
MODELS = [
    {"name": "chat", "source": {"repo": "acme/chat"}},
    {"name": "nim-raw", "engine": "nim", "image": NIM_IMAGE, "source": {"repo": "acme/nim"}},
    {"name": "nim-op", "engine": "nim", "path": "operator", "image": NIM_IMAGE, "source": {"repo": "acme/nim"},
     "nim": {"authSecret": "ngc-api"}},
]


def config(policy: dict | None = None, router: dict | None = None, **platform) -> dict:
    raw = {"platform": {**platform}, "models": MODELS,
           "router": router if router is not None else {"image": ROUTER_IMAGE, "replicas": 2,
                                                        "backendRouter": {"image": BACKEND_IMAGE}}}
    if policy is not None:
        raw["platform"]["networkPolicy"] = policy
    return raw


def manifests(raw: dict) -> list[dict]:
    return compile_stack(load_stack_config(raw))


def all_policies(objects: list[dict]) -> dict[str, dict]:
    """Every model's policies (the router's own are tested in tests/compile/test_router_network.py)."""
    return {m["metadata"]["name"]: m for m in objects if m["kind"] == "NetworkPolicy"
            and "llm-serving.dev/model" in m["spec"]["podSelector"].get("matchLabels", {})}


def policies(objects: list[dict]) -> dict[str, dict]:
    """The models' ingress policies (the servers')."""
    return {name: m for name, m in all_policies(objects).items() if "Ingress" in m["spec"]["policyTypes"]
            and m["spec"].get("ingress")}


def pod_labels(objects: list[dict]) -> dict[str, dict]:
    """Labels of every pod the stack runs, as Kubernetes (or the NIM operator) will set them."""
    pods = {}
    for m in objects:
        if m["kind"] in ("Deployment", "StatefulSet", "Job"):
            pods[m["metadata"]["name"]] = m["spec"]["template"]["metadata"]["labels"]
        elif m["kind"] == "NIMService":  # the operator merges spec.labels onto its pods
            pods[m["metadata"]["name"]] = m["spec"]["labels"]
    return pods


def matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def admits(policy: dict, namespace_labels: dict, labels: dict, port: int) -> bool:
    """Whether ``policy`` lets a pod (``labels``, in a namespace labelled ``namespace_labels``)
    connect on TCP ``port`` to the pods it selects."""
    same_namespace = namespace_labels.get("kubernetes.io/metadata.name") == policy["metadata"]["namespace"]
    for rule in policy["spec"].get("ingress", []):
        if not any(p.get("protocol", "TCP") == "TCP" and p["port"] == port for p in rule.get("ports", [])):
            continue
        for peer in rule.get("from", []):
            ns_ok = matches(peer["namespaceSelector"], namespace_labels) if "namespaceSelector" in peer else same_namespace
            pod_ok = matches(peer["podSelector"], labels) if "podSelector" in peer else True
            if ns_ok and pod_ok:
                return True
    return False


HOME = {"kubernetes.io/metadata.name": NAMESPACE}
MONITORING = {"kubernetes.io/metadata.name": "monitoring"}
ELSEWHERE = {"kubernetes.io/metadata.name": "team-b"}


def test_off_by_default():
    stack = load_stack_config({"models": MODELS[:1]})
    assert stack.platform.network_policy.enabled is False
    assert all_policies(manifests({"models": MODELS})) == {}


def test_one_policy_per_model_selecting_exactly_its_server_pods():
    objects = manifests(config({"enabled": True}))
    found = policies(objects)
    assert sorted(found) == ["chat-ingress", "nim-op-ingress", "nim-raw-ingress"]
    pods = pod_labels(objects)
    for model in ("chat", "nim-raw", "nim-op"):
        selector = found[f"{model}-ingress"]["spec"]["podSelector"]
        selected = sorted(name for name, labels in pods.items() if matches(selector, labels))
        assert selected == [model], (model, selected)  # its server, never its puller or another model
        assert found[f"{model}-ingress"]["spec"]["policyTypes"] == ["Ingress"]


def test_only_the_router_and_monitoring_get_in_on_the_serving_port():
    objects = manifests(config({"enabled": True}))
    pods = pod_labels(objects)
    for policy in policies(objects).values():
        assert admits(policy, HOME, pods["llm-router"], 8000)
        assert admits(policy, MONITORING, {"app.kubernetes.io/name": "prometheus"}, 8000)
        # Everyone else is out: the backend router, other models, pullers, other namespaces, ...
        assert not admits(policy, HOME, pods["llm-router-backend-router"], 8000)
        for name, labels in pods.items():
            if name not in ("llm-router",):
                assert not admits(policy, HOME, labels, 8000), name
        assert not admits(policy, ELSEWHERE, pods["llm-router"], 8000)  # a "router" elsewhere
        assert not admits(policy, HOME, {"app": "curl"}, 8000)
        # ... and the router only on the serving port.
        assert not admits(policy, HOME, pods["llm-router"], 22)


def test_the_serving_port_is_the_servers_port():
    objects = manifests(config({"enabled": True}))
    deployment = next(m for m in objects if m["kind"] == "Deployment" and m["metadata"]["name"] == "chat")
    (container_port,) = [p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]]
    nim_service = next(m for m in objects if m["kind"] == "NIMService")
    for policy in policies(objects).values():
        (rule,) = policy["spec"]["ingress"]
        assert [p["port"] for p in rule["ports"]] == [container_port] == [nim_service["spec"]["expose"]["service"]["port"]]


def test_allow_from_is_configurable():
    peers = [{"namespaceSelector": {"kubernetes.io/metadata.name": "observability"},
              "podSelector": {"app.kubernetes.io/name": "prometheus"}},
             {"podSelector": {"app": "batch-eval"}}]
    policy = policies(manifests(config({"enabled": True, "allowFrom": peers})))["chat-ingress"]
    observability = {"kubernetes.io/metadata.name": "observability"}
    assert admits(policy, observability, {"app.kubernetes.io/name": "prometheus"}, 8000)
    assert not admits(policy, observability, {"app.kubernetes.io/name": "grafana"}, 8000)
    assert not admits(policy, MONITORING, {"app.kubernetes.io/name": "prometheus"}, 8000)  # default replaced
    assert admits(policy, HOME, {"app": "batch-eval"}, 8000)
    assert not admits(policy, ELSEWHERE, {"app": "batch-eval"}, 8000)


def test_router_only():
    policy = policies(manifests(config({"enabled": True, "allowFrom": []})))["chat-ingress"]
    (rule,) = policy["spec"]["ingress"]
    assert len(rule["from"]) == 1 and not admits(policy, MONITORING, {}, 8000)


@pytest.mark.parametrize("peer, path, fragment", [
    ({"namespaceSelector": {}}, "allowFrom.0.namespaceSelector", "every namespace"),
    ({"podSelector": {}}, "allowFrom.0.podSelector", "every pod"),
    ({}, "allowFrom.0.namespaceSelector", "must select"),
    ({"namespace": "monitoring"}, "allowFrom.0.namespace", "unknown field"),
])
def test_peers_that_admit_too_much_are_refused(peer, path, fragment):
    with pytest.raises(ConfigError) as raised:
        load_stack_config(config({"enabled": True, "allowFrom": [peer]}))
    assert any(p.startswith(f"platform.networkPolicy.{path}:") and fragment in p for p in raised.value.problems)


def test_without_a_router_the_clients_must_be_named():
    with pytest.raises(ConfigError) as raised:
        load_stack_config({"platform": {"networkPolicy": {"enabled": True}}, "models": MODELS[:1]})
    assert raised.value.problems[0].startswith("platform.networkPolicy.enabled:")
    explicit = {"platform": {"networkPolicy": {"enabled": True, "allowFrom": [{"podSelector": {"app": "gateway"}}]}},
                "models": MODELS[:1]}
    assert policies(manifests(explicit))


def test_policies_are_valid_kubernetes():
    for policy in policies(manifests(config({"enabled": True}))).values():
        assert_valid_kubernetes(policy)


def test_the_program_declares_each_policy_before_the_server():
    recorder, _, _ = run_program({**config({"enabled": True}), "platform": {
        "networkPolicy": {"enabled": True}, "preflight": {"enabled": False}}}, secret_keys=[])
    registered = recorder.registered
    for model, server in (("chat", "chat-server"), ("nim-raw", "nim-raw-server"), ("nim-op", "nim-op-nim-service")):
        policy = registered[f"{model}-network-policy"]
        assert policy["type"] == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
        # A child of the model's component (removing the model deletes it), declared before the pods.
        assert policy["urn"].split("::")[2].split("$")[0] in ("llm-serving:index:VllmModel", "llm-serving:index:NimModel")
        assert policy["urn"] in registered[server]["dependencies"], server


# --- the puller: egress to the hub and DNS only (issue 15 item 14) --------------------------------

def egress_allows(policy: dict, address: str, port: int, protocol: str = "TCP",
                  namespace_labels: dict | None = None) -> bool:
    """Whether ``policy`` lets its pods open ``protocol``/``port`` to ``address`` (an IP, or a pod in
    a namespace labelled ``namespace_labels``)."""
    import ipaddress

    for rule in policy["spec"].get("egress", []):
        ports = rule.get("ports")
        if ports and not any(p.get("protocol", "TCP") == protocol and p["port"] == port for p in ports):
            continue
        peers = rule.get("to")
        if not peers:
            return True
        for peer in peers:
            if "ipBlock" in peer and namespace_labels is None:
                block = peer["ipBlock"]
                ip = ipaddress.ip_address(address)
                if ip in ipaddress.ip_network(block["cidr"]) and not any(
                        ip in ipaddress.ip_network(e) for e in block.get("except", [])):
                    return True
            if "namespaceSelector" in peer and namespace_labels is not None:
                if matches(peer["namespaceSelector"], namespace_labels):
                    return True
    return False


def puller_policy(objects: list[dict], model: str) -> dict:
    return all_policies(objects)[f"{model}-puller-egress"]


def test_the_puller_policy_selects_exactly_the_models_puller_and_admits_nothing_in():
    objects = manifests(config({"enabled": True}))
    pods = pod_labels(objects)
    for model in ("chat", "nim-raw"):
        policy = puller_policy(objects, model)
        selected = [name for name, labels in pods.items() if matches(policy["spec"]["podSelector"], labels)]
        assert len(selected) == 1 and selected[0].startswith(f"{model}-pull-"), selected
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and not policy["spec"].get("ingress")
    assert "nim-op-puller-egress" not in all_policies(objects)  # the operator runs its own cache Job


def test_a_public_hub_is_reachable_on_https_and_nothing_private_is():
    policy = puller_policy(manifests(config({"enabled": True})), "chat")
    assert egress_allows(policy, "18.239.50.1", 443)             # huggingface.co / its CDN
    assert egress_allows(policy, "10.96.0.10", 53, "UDP")        # DNS
    assert egress_allows(policy, "169.254.20.10", 53, "UDP")     # node-local DNS cache
    assert not egress_allows(policy, "18.239.50.1", 22)
    for private in ("10.96.0.1", "172.20.3.4", "192.168.1.10", "100.64.0.7", "169.254.169.254"):
        assert not egress_allows(policy, private, 443), private  # cluster Services, cloud metadata


def test_an_in_cluster_mirror_is_reached_in_its_namespace_only():
    policy = puller_policy(manifests(config({"enabled": True}, hfEndpoint="http://hf-mirror.mirrors.svc:8080")),
                           "chat")
    assert egress_allows(policy, "", 8080, namespace_labels={"kubernetes.io/metadata.name": "mirrors"})
    assert not egress_allows(policy, "", 8080, namespace_labels=ELSEWHERE)
    assert not egress_allows(policy, "18.239.50.1", 443)          # no public internet then


def test_a_mirror_at_an_address_is_reached_on_that_address_only():
    policy = puller_policy(manifests(config({"enabled": True}, hfEndpoint="https://10.20.30.40:8443")), "chat")
    assert egress_allows(policy, "10.20.30.40", 8443)
    assert not egress_allows(policy, "10.20.30.41", 8443)


def test_puller_policies_are_valid_kubernetes():
    for endpoint in ("https://huggingface.co", "http://hf-mirror.mirrors.svc:8080", "https://10.20.30.40:8443"):
        for name, policy in all_policies(manifests(config({"enabled": True}, hfEndpoint=endpoint))).items():
            if name.endswith("-puller-egress"):
                assert_valid_kubernetes(policy)


def test_the_gpu_cluster_example_pins_every_image_to_a_tag_and_isolates_every_model():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.gpu-cluster.yaml"
    objects = compile_stack(load_stack_config(read_stack_file(path)))
    images = [c["image"] for m in objects if m["kind"] in ("Deployment", "StatefulSet", "Job")
              for c in [*m["spec"]["template"]["spec"].get("initContainers", []), *m["spec"]["template"]["spec"]["containers"]]]
    images += [f"{m['spec']['image']['repository']}:{m['spec']['image']['tag']}" for m in objects if m["kind"] == "NIMService"]
    images += [m["spec"]["source"]["ngc"]["modelPuller"] for m in objects if m["kind"] == "NIMCache"]
    # Released tags (no digest it could not read: tests/config/test_stack_digests.py).
    assert images and [i for i in images if parse_image(i).tag in (None, "latest")] == []
    found = all_policies(objects)
    for manifest in objects:
        if manifest["kind"] == "Job":
            model = manifest["metadata"]["labels"]["llm-serving.dev/model"]
            assert f"{model}-puller-egress" in found, model
    assert {m["metadata"]["labels"]["llm-serving.dev/model"] for m in objects if m["kind"] in ("Deployment", "NIMService")
            and "llm-serving.dev/model" in m["metadata"]["labels"]} <= {n.removesuffix("-ingress") for n in found}


def test_the_render_declares_the_puller_policy_before_the_puller():
    objects = manifests(config({"enabled": True}))
    order = [(m["kind"], m["metadata"]["name"]) for m in objects]
    job = next(i for i, (kind, name) in enumerate(order) if kind == "Job" and name.startswith("chat-pull-"))
    assert order.index(("NetworkPolicy", "chat-puller-egress")) < job


def test_with_api_keys_the_program_declares_the_router_policy_before_the_router_even_with_the_option_off():
    """The keys' policy (compile/router/network.py) reaches the cluster: declared by the program
    with platform.networkPolicy off (the default), before the router pods and the gateway."""
    keyed = {"image": ROUTER_IMAGE, "gateway": {"apiKeys": {"secretName": "gateway-keys", "tenants": [{"name": "a"}]}}}
    recorder, _, _ = run_program({**config(router=keyed), "platform": {"preflight": {"enabled": False}}}, secret_keys=[])
    registered = recorder.registered
    policy = registered["llm-router-network-policy"]
    assert policy["type"] == "kubernetes:networking.k8s.io/v1:NetworkPolicy"
    assert policy["urn"] in registered["llm-router-workload"]["dependencies"]
    for name, item in registered.items():  # nothing else of the option is declared
        if item["type"].endswith(":NetworkPolicy"):
            assert name == "llm-router-network-policy", name
