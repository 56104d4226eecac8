"""A namespace with a request router and two fronted models, in the fake API (``fakes``): the
router's headless Service slices, the models' slices and pods with or without a ready pylon."""

from __future__ import annotations

from tests.support.fakes import NS, FakeCluster, container_status, endpoint, endpoint_slice, pod

SERVICES = {"llama": "llama", "qwen": "qwen"}
HEADLESS = "llm-router-headless"
PROPS = {"router": "llm-router", "namespace": NS, "services": SERVICES, "kubeconfig": "", "context": ""}
ROUTER_PORTS = [{"name": "grpc", "port": 50071, "protocol": "TCP"}, {"name": "quic", "port": 50072, "protocol": "UDP"}]


def router_slice(name: str, endpoints: list[dict], ports=None) -> dict:
    item = endpoint_slice(name, endpoints, service=HEADLESS)
    item["ports"] = ROUTER_PORTS if ports is None else ports
    return item


def model_pod(name: str, pylon_ready: bool = True, pylon: bool = True) -> dict:
    statuses = [container_status("server", ready=True, running=True)]
    if pylon:
        statuses.append(container_status("pylon", ready=pylon_ready, running=True))
    return pod(name, containers=statuses)


def slices() -> list[dict]:
    return [
        endpoint_slice("llama-a", [endpoint("llama-0", "10.0.0.1"), endpoint("llama-1", "10.0.0.2", ready=False)], service="llama"),
        endpoint_slice("llama-b", [endpoint("llama-0", "10.0.0.1"), endpoint("llama-2", "10.0.0.3")], service="llama"),
        endpoint_slice("qwen-a", [endpoint("qwen-0", "10.0.1.1")], service="qwen"),
        endpoint_slice("other-a", [endpoint("other-0", "10.0.2.1")], service="other"),
        router_slice("router-a", [endpoint("llm-router-0", "10.0.3.1"),
                                  endpoint("llm-router-1", "10.0.3.2", terminating=True),
                                  endpoint("llm-router-2", "10.0.3.3", ready=False)]),
    ]


def pods() -> list[dict]:
    return [model_pod("llama-0"), model_pod("llama-1"), model_pod("llama-2"), model_pod("qwen-0")]


def cluster() -> FakeCluster:
    return FakeCluster().put(*slices(), *pods())
