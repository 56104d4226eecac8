"""RequiredCrds: another operator's CRDs missing stop the preview with the setting and the fix;
a cluster that cannot be read now is undecided at preview and checked again at create."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from components.compile.router import compile_router, required_crds
from components.config import load_stack_config
from providers import crd_check
from providers.crd_check import CrdsMissing, RequiredCrdsProvider, check_required

ROUTER = {"image": "registry.example.com/llm/router:1.0.0", "replicas": 2,
          "backendRouter": {"image": "registry.example.com/llm/backend:1.0.0"}, "metrics": {"serviceMonitor": True},
          "tls": {"enabled": True, "issuer": {"kind": "ClusterIssuer", "name": "internal-ca"},
                  "dnsNames": ["llm-router.llm-serving.svc.cluster.local"], "allowedDomains": ["llm-serving.svc.cluster.local"]}}


def requirements(router: dict = ROUTER) -> list[dict]:
    stack = load_stack_config({"platform": {"sharedMemorySizeLimit": "1Gi"},
                               "models": [{"name": "m", "source": {"repo": "org/m"}}], "router": router})
    return required_crds(compile_router(stack))


def crd(name: str, version: str = "v1", served: bool = True) -> dict:
    return {"metadata": {"name": name}, "spec": {"versions": [{"name": version, "served": served}]}}


class FakeApiextensions:
    def __init__(self, crds: dict[str, Any]):
        self.crds = crds

    def read_custom_resource_definition(self, name: str):
        value = self.crds.get(name, ApiException(status=404, reason="Not Found"))
        if isinstance(value, Exception):
            raise value
        return value


@pytest.fixture
def cluster(monkeypatch):
    crds: dict[str, Any] = {}
    monkeypatch.setattr(crd_check, "apiextensions", lambda clients: FakeApiextensions(crds))
    return crds


def props(reqs=None) -> dict:
    return {"owner": "router llm-router", "requirements": requirements() if reqs is None else reqs,
            "kubeconfig": "", "context": ""}


def test_requirements_follow_the_objects_the_router_declares():
    assert [(r["field"], r["crds"]) for r in requirements()] == [
        ("router.tls", ["certificates.cert-manager.io", "clusterissuers.cert-manager.io"]),
        ("router.metrics.serviceMonitor", ["servicemonitors.monitoring.coreos.com"]),
    ]
    assert requirements({"image": ROUTER["image"]}) == []


def test_missing_crds_fail_the_preview_with_each_setting_and_its_fix(cluster):
    cluster["servicemonitors.monitoring.coreos.com"] = crd("servicemonitors.monitoring.coreos.com")
    result = RequiredCrdsProvider(connect=lambda target: None).check({}, props())
    [failure] = result.failures
    assert failure.property == ""  # the engine then prints the reason alone, no property dump first
    assert failure.reason.startswith("router llm-router: router.tls needs certificates.cert-manager.io, "
                                     "clusterissuers.cert-manager.io, missing on this cluster: install cert-manager")
    assert "router.tls.enabled: false" in failure.reason
    assert "serviceMonitor" not in failure.reason  # its CRD is there


def test_a_crd_that_does_not_serve_the_version_counts_as_missing(cluster):
    for name in ("certificates.cert-manager.io", "clusterissuers.cert-manager.io"):
        cluster[name] = crd(name)
    cluster["servicemonitors.monitoring.coreos.com"] = crd("servicemonitors.monitoring.coreos.com", served=False)
    with pytest.raises(CrdsMissing, match=r"servicemonitors.monitoring.coreos.com \(version v1 not served\)"):
        check_required(props(), connect=lambda target: None)


def test_a_cluster_with_everything_passes_and_create_records_the_check(cluster):
    for r in requirements():
        for name in r["crds"]:
            cluster[name] = crd(name)
    provider = RequiredCrdsProvider(connect=lambda target: None)
    assert provider.check({}, props()).failures == []
    assert provider.create(props()).outs["checked_at"]


def test_an_unreadable_cluster_is_undecided_at_preview_and_fails_at_create(cluster):
    for r in requirements():
        for name in r["crds"]:
            cluster[name] = ApiException(status=403, reason="Forbidden")
    provider = RequiredCrdsProvider(connect=lambda target: None)
    assert provider.check({}, props()).failures == []
    with pytest.raises(ApiException):
        provider.create(props())


def test_the_stacks_check_names_every_missing_crd_at_once_in_a_sentence(cluster):
    """Issue 38: each setting's check is a resource of its own and the engine stops the preview at
    the first that fails, so a cluster missing three operators was told one per run, after a dump
    of the check's inputs. The platform's check holds the stack's every requirement (its props
    as the platform's plan gives them)."""
    from components import children as roles
    from components.compile.plan import platform_plan

    stack = load_stack_config({
        "platform": {"sharedMemorySizeLimit": "1Gi", "metrics": {"enabled": True}},
        "models": [{"name": "tiny", "source": {"repo": "org/m"}, "weights": {"accessMode": "ReadWriteMany"},
                    "autoscaling": {"enabled": True, "maxReplicas": 2}},
                   {"name": "op", "source": {"repo": "meta/llama"}, "engine": "nim", "path": "operator",
                    "image": "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4",
                    "nim": {"authSecret": "ngc"}}],
        "router": ROUTER})
    [check] = [child for child in platform_plan(stack).children if child.role == roles.STACK_CRD_CHECK]
    stack_props = check.props.to_dict()
    [failure] = RequiredCrdsProvider(connect=lambda target: None).check({}, stack_props).failures
    assert failure.property == ""
    lines = failure.reason.splitlines()
    assert lines[0] == ("this cluster lacks 6 custom resource definitions the stack needs; each with the setting "
                        "that needs it and the fix:"), lines[0]
    fields = [line.split(" needs ", 1)[0] for line in lines[1:]]
    assert fields == ["  - platform.metrics.enabled", "  - model tiny: autoscaling.enabled",
                      "  - model op uses path: operator", "  - router llm-router: router.tls",
                      "  - router llm-router: router.metrics.serviceMonitor"], lines
    assert "scaledobjects.keda.sh, missing on this cluster: " in lines[2] and "helm install" in lines[3]
