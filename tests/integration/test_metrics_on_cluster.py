"""platform.metrics on the real engine and the simulated cluster: without the Prometheus
Operator's CRD the preview stops with the setting and the fix; with it, `up` creates the model's
ServiceMonitor (selecting its Service, on the port that serves /metrics) and the dashboard
ConfigMap, and a second preview plans no change (the dashboard JSON is deterministic) and passes
the policy pack.

The CRD is prometheus-operator v0.85.0's own (from its Go module, see tests/real_crds.py; the code
follows v0.84.1, which the module proxy does not serve). Order matters and is the file's order: first
the cluster without the CRD, then with it. The module installs the CRD only when the cluster has
none, and deletes only the one it installed, after its stacks are destroyed.
"""

from __future__ import annotations

import json

import pytest

from components.compile import dashboard as dash
from testkit.harness import small_model, stack_config
from tests.support.fixture_crds import FixtureCrds
from tests.support.real_crds import operator_crd

pytestmark = pytest.mark.integration

CRD_FILE = operator_crd("prometheus-operator", "monitoring.coreos.com_servicemonitors.yaml")
MONITOR_CRD = FixtureCrds([CRD_FILE], "prometheus-operator-crds")
CRD_NAME = "servicemonitors.monitoring.coreos.com"


def config(namespace: str) -> dict:
    # The teardown identity too: the policy pack's teardown rules then see the ServiceMonitor grant.
    return stack_config(namespace, [small_model("scraped")], teardownIdentity={"enabled": True},
                        metrics={"enabled": True, "labels": {"release": "kube-prometheus-stack"}})


@pytest.fixture(scope="module", autouse=True)
def crd_left_as_found(kube):
    """Autouse, so torn down after ``make_project`` has destroyed the stacks; a CRD someone else
    installed (a real Prometheus Operator, another test's) is never touched."""
    MONITOR_CRD.delete_ours(kube)  # left by an interrupted run
    state = {"foreign": bool(MONITOR_CRD.installed(kube))}
    yield state
    MONITOR_CRD.delete_ours(kube)


@pytest.fixture(scope="module")
def project(make_project):
    return make_project(config)


def test_without_the_crd_the_preview_stops_with_the_setting_and_the_fix(project, crd_left_as_found):
    if crd_left_as_found["foreign"]:
        pytest.skip("the cluster already serves ServiceMonitors (not installed by this module)")
    result = project.run("preview", check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert f"platform.metrics.enabled needs {CRD_NAME}, missing on this cluster" in output, output[-3000:]
    assert "platform.metrics.enabled: false" in output


def test_with_the_crd_up_creates_the_monitor_and_the_dashboard(project, kube, crd_left_as_found):
    if not MONITOR_CRD.installed(kube):
        MONITOR_CRD.install(kube)
    project.up()
    namespace = project.namespace
    monitor = kube.CustomObjectsApi().get_namespaced_custom_object(
        "monitoring.coreos.com", "v1", namespace, "servicemonitors", "scraped")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = kube.CoreV1Api().read_namespaced_service("scraped", namespace)
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= (service.metadata.labels or {}).items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["interval"] == "30s"
    assert endpoint["port"] in {p.name for p in service.spec.ports}
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [namespace]}

    config_map = kube.CoreV1Api().read_namespaced_config_map(dash.NAME, namespace)
    assert config_map.metadata.labels["grafana_dashboard"] == "1"
    board = json.loads(config_map.data[dash.DATA_KEY])
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "model"]
    assert variable["query"] == "scraped"


def test_a_second_preview_plans_no_change_and_passes_the_policy_pack(project):
    # Byte-identical dashboard JSON: no diff. Under the pack: the monitor selects the model's
    # Service on a port it names, and the teardown Role's ServiceMonitor grant is expected.
    result = project.run("preview", "--expect-no-changes", "--policy-pack", "policies", check=False, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"the preview plans changes or fails the pack:\n{output[-6000:]}"
    assert "llm-serving@v0.2.0" in output, "the pack did not run"
