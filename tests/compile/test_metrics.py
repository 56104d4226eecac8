"""platform.metrics: the models' ServiceMonitors, the NIMService's own metrics, the CRD the stack
requires, the network policy, and the Grafana dashboard with its metric-name contract.

The contract: every PromQL expression of the dashboard is parsed, its metric names extracted, and
each must be a series the engine of its query exports (vLLM: on every release line, since one
dashboard shows models of any line: the series of each line's vllm/v1/metrics/loggers.py,
components/config/vllm_lines/<line>.json; NIM for LLMs: tests/fixtures/nim_llm_metrics.py, from
NIM's docs). A query's engine is its refId prefix.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from components.compile import dashboard as dash
from components.compile import metrics, nim, server
from components.compile.gateway import nginx as gateway_nginx
from components.compile.plan import compile_stack, model_plan
from components.config import ConfigError, load_stack_config
from components.config.vllm_release import RELEASES
from tests.fixtures import nim_llm_metrics, vllm_0_11_metrics
from tests.support.builders import model, nim_model, stack
from tests.support.kube_schema import assert_valid_kubernetes
from tests.support.real_crds import operator_crd

ON = {"metrics": {"enabled": True}}
OPERATOR = {"path": "operator", "nim": {"authSecret": "ngc-api"}}
# prometheus-operator v0.85.0's own CRD (the operators cache; see tests/real_crds.py).
CRD_FILE = operator_crd("prometheus-operator", "monitoring.coreos.com_servicemonitors.yaml")


def _stack(*models: dict, **platform):
    return stack(*(models or (model("m"),)), **{**ON, **platform})


# --- the ServiceMonitor ---------------------------------------------------------------------

@pytest.mark.parametrize("raw, path", [(model("m"), "/metrics"), (nim_model("m"), "/v1/metrics")])
def test_a_raw_path_model_gets_a_service_monitor_on_its_service_port(raw, path):
    config = _stack(raw)
    m = config.models[0]
    monitor = metrics.compile_service_monitor(m, config)
    service = server.compile_service(m, config.platform)
    selector = monitor["spec"]["selector"]["matchLabels"]
    # It selects the model's Service and nothing of another model's.
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [config.platform.namespace]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "http", "path": path, "interval": "30s"}
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["metadata"]["namespace"] == config.platform.namespace


def test_monitors_of_two_models_select_only_their_own_service():
    config = _stack(model("a"), model("b"))
    a, b = (metrics.compile_service_monitor(m, config) for m in config.models)
    service_b = server.compile_service(config.models[1], config.platform)
    assert not a["spec"]["selector"]["matchLabels"].items() <= service_b["metadata"]["labels"].items()
    assert b["spec"]["selector"]["matchLabels"].items() <= service_b["metadata"]["labels"].items()


def test_labels_and_interval_reach_the_monitor_and_ours_win():
    config = _stack(metrics={"enabled": True, "interval": "15s", "labels": {"release": "kps"}})
    monitor = metrics.compile_service_monitor(config.models[0], config)
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"
    assert monitor["spec"]["endpoints"][0]["interval"] == "15s"


def test_the_service_monitor_is_a_child_of_the_raw_plan_after_the_service():
    config = _stack(model("m"))
    children = {c.role: c for c in model_plan(config.models[0], config).children}
    assert children["service-monitor"].after == ("service",)
    assert children["service-monitor"].manifest["kind"] == "ServiceMonitor"
    assert model_plan(config.models[0], config).outputs["objects"]["service_monitor"] == "m"
    off = stack(model("m"))
    assert "service_monitor" not in model_plan(off.models[0], off).outputs["objects"]


def test_metrics_off_renders_nothing_new():
    off = stack(model("m"), nim_model("n"), nim_model("o", **OPERATOR))
    kinds = [m["kind"] for m in compile_stack(off)]
    assert "ServiceMonitor" not in kinds and "ConfigMap" not in kinds
    nim_service = nim.compile_nim_service(off.models[2], off)
    assert "metrics" not in nim_service["spec"]
    assert metrics.required_crds(off) == []


# --- the NIM operator path --------------------------------------------------------------------

def test_an_operator_path_model_asks_the_nim_operator_for_its_service_monitor():
    config = _stack(nim_model("o", **OPERATOR), metrics={"enabled": True, "labels": {"release": "kps"}})
    m = config.models[0]
    assert metrics.compile_service_monitor(m, config) is None
    spec = nim.compile_nim_service(m, config)["spec"]
    assert spec["metrics"] == {"enabled": True, "serviceMonitor": {"interval": "30s", "additionalLabels": {"release": "kps"}}}
    assert "service-monitor" not in {c.role for c in model_plan(m, config).children}


# --- what the cluster must serve ----------------------------------------------------------------

def test_metrics_on_require_the_service_monitor_crd_with_the_fix():
    (requirement,) = metrics.required_crds(_stack())
    assert requirement["crds"] == ["servicemonitors.monitoring.coreos.com"]
    assert requirement["version"] == "v1"
    assert requirement["field"] == "platform.metrics.enabled"
    assert "metrics.enabled: false" in requirement["fix"]


# --- config ------------------------------------------------------------------------------------

@pytest.mark.parametrize("metrics_config, path, words", [
    ({"enabled": True, "interval": "30"}, "platform.metrics.interval", "Prometheus duration"),
    ({"enabled": True, "interval": "0s"}, "platform.metrics.interval", "Prometheus duration"),
    ({"enabled": True, "labels": {"app.kubernetes.io/name": "x"}}, "platform.metrics.labels.app.kubernetes.io/name",
     "the stack sets itself"),
    ({"enabled": True, "labels": {"release": "not a value"}}, "platform.metrics.labels.release", "not a label value"),
    ({"enabled": True, "dashboard": {"labels": {}}}, "platform.metrics.dashboard.labels", "finds dashboards by label"),
    ({"enabled": True, "scrape": True}, "platform.metrics.scrape", ""),
])
def test_bad_metrics_config_is_refused_at_its_path(metrics_config, path, words):
    with pytest.raises(ConfigError) as error:
        stack(model("m"), metrics=metrics_config)
    assert path in str(error.value) and words in str(error.value)


def test_metrics_with_a_network_policy_that_admits_no_scraper_is_refused():
    with pytest.raises(ConfigError) as error:
        stack(model("m"), metrics={"enabled": True}, networkPolicy={"enabled": True, "allowFrom": []})
    assert "platform.networkPolicy.allowFrom" in str(error.value)
    assert "no Prometheus can scrape" in str(error.value)


def test_the_default_network_policy_admits_the_monitoring_namespace_on_the_metrics_port():
    config = _stack(model("m"), nim_model("n"), networkPolicy={"enabled": True, "allowFrom": [
        {"namespaceSelector": {"kubernetes.io/metadata.name": "monitoring"}}]})
    for m in config.models:
        policy = next(c.manifest for c in model_plan(m, config).children if c.role == "network-policy")
        (rule,) = policy["spec"]["ingress"]
        assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in rule["from"]
        # The engines serve their metrics on the serving port, the one the rule opens.
        container = server.compile_server_deployment(m, config)["spec"]["template"]["spec"]["containers"][0]
        assert rule["ports"] == [{"protocol": "TCP", "port": container["ports"][0]["containerPort"]}]


# --- the dashboard --------------------------------------------------------------------------------

def _dashboard(config) -> dict:
    return json.loads(dash.compile_dashboard(config)["data"][dash.DATA_KEY])


def test_the_dashboard_config_map_is_found_by_the_sidecar_and_lists_the_models():
    config = _stack(model("b"), model("a"), nim_model("n"))
    cm = dash.compile_dashboard(config)
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == config.platform.namespace
    board = _dashboard(config)
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "model"]
    assert variable["query"] == "a,b,n" and variable["includeAll"] and variable["multi"]
    titles = {p["title"] for p in board["panels"]}
    assert {"Requests running", "Requests waiting", "Time to first token", "Inter-token latency",
            "KV-cache usage", "Tokens per second"} <= titles
    for panel in board["panels"]:
        for target in panel["targets"]:
            assert f'namespace="{config.platform.namespace}"' in target["expr"]
            assert 'service=~"$model"' in target["expr"]


def test_the_dashboard_goes_where_configured_and_is_byte_identical_across_renders():
    config = _stack(metrics={"enabled": True, "dashboard": {"namespace": "grafana", "labels": {"dash": "yes"}}})
    first, second = dash.compile_dashboard(config), dash.compile_dashboard(config)
    assert first == second and first["metadata"]["namespace"] == "grafana"
    assert first["metadata"]["labels"]["dash"] == "yes" and "grafana_dashboard" not in first["metadata"]["labels"]
    text = first["data"][dash.DATA_KEY]
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=1)


def test_the_dashboard_can_be_left_out():
    config = _stack(metrics={"enabled": True, "dashboard": {"enabled": False}})
    assert dash.compile_dashboard(config) is None
    assert "ConfigMap" not in [m["kind"] for m in compile_stack(config)]


def test_every_panel_has_a_vllm_query_and_refids_are_unique():
    for panel in _dashboard(_stack())["panels"]:
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        assert any(r.startswith("vllm-") for r in refs), panel["title"]


# --- the metric-name contract -----------------------------------------------------------------------

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                "unless", "offset"}
_IDENT = re.compile(r"(?<![A-Za-z0-9_:.$])[A-Za-z_:][A-Za-z0-9_:]*")  # not the unit of a duration (5m)


def metric_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression: identifiers that are neither a function call, a
    keyword, nor inside a label matcher {...}, a range [...] or a grouping by (...)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group() in PROMQL_WORDS:
            continue
        names.add(match.group())
    return names


EXPORTED = {"vllm": frozenset.intersection(*(line.series for line in RELEASES.values())),
            "nim": nim_llm_metrics.exported()}


@pytest.mark.parametrize("line", sorted(RELEASES))
def test_the_queue_depth_keda_and_the_status_read_exists_on_every_line(line):
    from components.compile.autoscaling import QUEUE_METRIC
    assert QUEUE_METRIC in RELEASES[line].series


def test_the_series_0_32_removed_are_caught():
    """0.32 dropped these (0.12 and 0.16): a query reading one must fail the contract above."""
    removed = RELEASES["0.11"].series - RELEASES["0.32"].series
    assert {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hits_total",
            "vllm:time_per_output_token_seconds_count"} <= removed
    assert not removed & EXPORTED["vllm"]


def test_the_parser_finds_metric_names_and_only_them():
    expr = ('histogram_quantile(0.95, sum by (service, le) (rate(vllm:time_to_first_token_seconds_bucket'
            '{namespace="x", service=~"$model"}[$__rate_interval]))) / on (service) group_left '
            'sum without (le) (num_requests_running{a="b(c)"} offset 5m)')
    assert metric_names(expr) == {"vllm:time_to_first_token_seconds_bucket", "num_requests_running"}


def test_a_name_outside_the_fixture_is_caught():
    """Guards the contract test: a misspelt (or pre-0.11) name must be reported."""
    for wrong in ("vllm:gpu_cache_usage_perc", "vllm:prompt_tokens", "vllm:time_to_first_token_seconds"):
        assert metric_names(f"sum by (service) ({wrong}{{x=\"y\"}})") - EXPORTED["vllm"] == {wrong}


def test_every_dashboard_expression_uses_only_names_its_engine_exports():
    board = _dashboard(_stack(model("m"), nim_model("n")))
    checked = 0
    for panel in board["panels"]:
        for target in panel["targets"]:
            engine = target["refId"].split("-", 1)[0]
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            unknown = names - EXPORTED[engine]
            assert not unknown, f"{panel['title']} ({target['refId']}): {sorted(unknown)} not exported by {engine}"
            checked += 1
    assert checked >= 2 * len(board["panels"]) - 3


def test_the_vllm_queries_use_the_label_the_prometheus_operator_sets_not_an_engine_label():
    """Series are told apart by `service` (the Service's name, the model's on every path), so a
    query never depends on vLLM's model_name or NIM's undocumented labels."""
    for panel in _dashboard(_stack())["panels"]:
        for target in panel["targets"]:
            assert "model_name" not in target["expr"]
            grouped = re.findall(r"by \(([^)]*)\)", target["expr"])
            assert grouped and all("service" in g for g in grouped), target["expr"]
            for extra in ("finished_reason",):
                if extra in target["expr"]:
                    assert extra in vllm_0_11_metrics.EXTRA_LABELS["vllm:request_success"]


# --- the ServiceMonitor against the real CRD the cluster test installs ---------------------------

def _undeclared(value, schema: dict, path: str) -> list[str]:
    """Keys of ``value`` the structural schema does not declare (what server-side apply refuses)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(value, dict):
        props = schema.get("properties")
        if props is None:
            extra = schema.get("additionalProperties")
            return [p for k, v in value.items() for p in (_undeclared(v, extra, f"{path}.{k}") if isinstance(extra, dict) else [])]
        return [f"{path}.{k}" for k in value if k not in props] + [
            p for k, v in value.items() if k in props for p in _undeclared(v, props[k], f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _undeclared(v, schema.get("items", {}), f"{path}[{i}]")]
    return []


def test_the_service_monitor_declares_only_fields_of_the_crd_and_its_interval_pattern():
    crd = yaml.safe_load(Path(CRD_FILE).read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    config = _stack(model("m"), nim_model("n"), metrics={"enabled": True, "interval": "1m30s"})
    for m in config.models:
        monitor = metrics.compile_service_monitor(m, config)
        assert monitor["apiVersion"] == f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
        assert monitor["kind"] == crd["spec"]["names"]["kind"]
        assert _undeclared({k: v for k, v in monitor.items() if k != "metadata"}, schema, "") == []
        pattern = schema["properties"]["spec"]["properties"]["endpoints"]["items"]["properties"]["interval"]["pattern"]
        assert re.match(pattern, monitor["spec"]["endpoints"][0]["interval"])
    # Guards the walk: an unknown field is found.
    assert _undeclared({"spec": {"selector": {}, "endpoint": []}}, schema, "") == [".spec.endpoint"]


def test_the_dashboard_config_map_is_strictly_valid_kubernetes():
    cm = dash.compile_dashboard(_stack())
    assert_valid_kubernetes(cm)


# --- the gateway's row -----------------------------------------------------------------------------

def _gateway_families() -> set[str]:
    """The metric families the gateway serves (metrics.js, its FAMILIES table), with a histogram's series."""
    script = gateway_nginx.script("metrics.js")
    table = script[script.index("const FAMILIES = ["):script.index("];", script.index("const FAMILIES = ["))]
    names = set()
    for name, kind in re.findall(r"\['(gateway_[a-z_]+)', '(counter|histogram)'", table):
        names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
    return names


def test_the_gateway_row_queries_only_what_the_gateway_serves_from_its_metrics_service():
    config = load_stack_config({"platform": {"namespace": "serving", "metrics": {"enabled": True}},
                                "models": [model("m")], "router": {"image": "nvcr.io/nvidia/llm-request-router:0.16.2"}})
    board = _dashboard(config)
    rows = [p for p in board["panels"] if p["type"] == "row"]
    assert [r["title"] for r in rows] == ["Gateway"]
    gateway_panels = [p for p in board["panels"] if any(t["refId"].startswith("gateway-") for t in p.get("targets", []))]
    assert {p["title"] for p in gateway_panels} == {
        "Gateway requests per second", "Gateway 429s per second", "Gateway time to first byte",
        "Gateway request duration", "Gateway tokens per second"}
    served = _gateway_families()
    assert "gateway_time_to_first_byte_seconds_bucket" in served and "gateway_requests_total" in served
    for panel in gateway_panels:
        assert panel["gridPos"]["y"] > rows[0]["gridPos"]["y"]
        for target in panel["targets"]:
            assert 'service="llm-router-gateway-metrics"' in target["expr"]
            unknown = metric_names(target["expr"]) - served
            assert metric_names(target["expr"]) and not unknown, (panel["title"], unknown)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert not [p for p in _dashboard(_stack())["panels"] if p["type"] == "row"]  # no router, no row
