"""A model's next revision (models[].next) in the model's plan and at the gateway: its own objects
beside the serving ones, which it leaves exactly as they were."""

from __future__ import annotations

import json

from components import children as roles
from components.compile.gateway import compile_gateway
from components.compile.gateway import settings as gateway_settings
from components.compile.gateway.nginx import render_files, settings_module
from components.compile.plan import EXTERNAL, FRONTS, NEXT_ROLE_PREFIX, model_plan, router_plan
from components.config import load_stack_config
from tests.support.builders import model

ROUTER = {"image": "nvcr.io/nvidia/llm-request-router:0.16.2",
          "pylon": {"image": "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0"}, "workerAuth": {"mode": "open"}}
NEXT = {"weight": 20, "source": {"repo": "Qwen/Qwen2.5-1.5B-Instruct"}, "args": ["--max-num-seqs=8"]}


def stack(next_revision: dict | None = NEXT):
    extra = {"next": next_revision} if next_revision else {}
    return load_stack_config({"models": [model("tiny", **extra), model("other")], "router": ROUTER})


def by_role(plan):
    return {c.role: c for c in plan.children}


def test_the_next_revision_has_its_own_weights_gate_server_service_and_status_after_the_serving_ones():
    config = stack()
    plan = model_plan(config.models[0], config)
    serving = by_role(model_plan(stack(None).models[0], stack(None)))
    children = by_role(plan)
    assert list(children)[:len(serving)] == list(serving)
    added = [role for role in children if role not in serving]
    # Its puller's egress is the model's policy (the pods are the model's pullers, by label).
    assert added == [NEXT_ROLE_PREFIX + role for role in serving if role != roles.PULLER_NETWORK_POLICY]
    # Nothing of the revision waits on the serving revision's children but the puller's policy.
    for role in added:
        assert all(wait in EXTERNAL or wait.startswith(NEXT_ROLE_PREFIX) or wait == roles.PULLER_NETWORK_POLICY
                   for wait in children[role].after), role
    names = {role: c.manifest["metadata"]["name"] for role, c in children.items() if c.manifest}
    assert names["next-server"] == names["next-service"] == "tiny-next"
    # Its weights are named as the model's will be with its source, and mounted by its server.
    assert names["next-weights"].startswith("tiny-weights-") and names["next-weights"] != names["weights"]
    volumes = children["next-server"].manifest["spec"]["template"]["spec"]["volumes"]
    assert {"claimName": names["next-weights"], "readOnly": True} in [v.get("persistentVolumeClaim") for v in volumes]
    assert children["next-status"].props.objects.puller_job == names["next-puller"]
    assert plan.outputs["next"]["weight"] == 20 and plan.outputs["next"]["changes"] == ["source", "args"]
    assert [name for name, _ in plan.statuses] == ["tiny", "tiny-next"]


def promoted(raw_next: dict) -> dict:
    """The stack once the next revision is promoted: its settings in the model, no next."""
    settings = {k: v for k, v in raw_next.items() if k in ("source", "image", "args")}
    return {"models": [model("tiny", **settings), model("other")], "router": ROUTER}


def logical(plan) -> dict[str, object]:
    return {c.logical: c.manifest if c.manifest is not None else c.props.to_dict() for c in plan.children}


def test_promoting_keeps_the_revisions_weights_the_same_resources_with_the_same_objects():
    # What makes a promote no re-download: the revision's volume, puller and gate are declared
    # under the names and with the specs the promoted model declares for its own.
    revision = {k: v for k, v in logical(model_plan(stack().models[0], stack())).items()}
    final = load_stack_config(promoted(NEXT))
    after = logical(model_plan(final.models[0], final))
    weights = [name for name in after if name.split("-")[0] in ("weights", "puller")]
    assert len(weights) == 3
    for name in weights:
        assert revision[name] == after[name], name
    # The model's own weights before the promote are other resources (deleted by it, after the roll).
    before = logical(model_plan(stack(None).models[0], stack(None)))
    assert not set(weights) & set(before)


def test_a_revision_on_the_models_source_mounts_the_models_volume_and_waits_on_its_gate():
    config = load_stack_config({"models": [model("tiny", weights={"accessMode": "ReadWriteMany"},
                                                 next={"weight": 10, "args": ["--enforce-eager"]})],
                                "router": ROUTER})
    children = by_role(model_plan(config.models[0], config))
    assert not [role for role in children if role in ("next-weights", "next-puller", "next-weights-gate")]
    assert "weights-gate" in children["next-server"].after
    claims = [v["persistentVolumeClaim"]["claimName"]
              for v in children["next-server"].manifest["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims == [children["weights"].manifest["metadata"]["name"]]
    # Its status and outputs name the pull its weights come from: the model's.
    puller = children["puller"].manifest["metadata"]["name"]
    assert children["next-status"].props.objects.puller_job == puller
    outputs = model_plan(config.models[0], config).outputs["next"]["objects"]
    assert outputs == {"deployment": "tiny-next", "service": "tiny-next", "weights": claims[0], "puller": puller}


def test_adding_a_next_revision_leaves_every_serving_object_as_it_was():
    before = by_role(model_plan(stack(None).models[0], stack(None)))
    after = by_role(model_plan(stack().models[0], stack()))
    for role, child in before.items():
        assert after[role] == child, role


def pods(child) -> dict:
    return child.manifest["spec"]["template"]["metadata"]["labels"]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_the_two_deployments_never_select_each_others_pods():
    children = by_role(model_plan(stack().models[0], stack()))
    serving, revision = children[roles.SERVER], children["next-" + roles.SERVER]
    assert not selects(serving.manifest["spec"]["selector"]["matchLabels"], pods(revision))
    assert not selects(revision.manifest["spec"]["selector"]["matchLabels"], pods(serving))
    for service, other in ((children[roles.SERVICE], revision), (children["next-service"], serving)):
        assert not selects(service.manifest["spec"]["selector"], pods(other))


def container_args(child, name: str) -> list[str]:
    (found,) = [c for c in child.manifest["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return found["args"]


def test_the_revision_answers_to_the_models_name_and_its_pylon_registers_its_own():
    children = by_role(model_plan(stack().models[0], stack()))
    server = container_args(children["next-server"], "server")
    at = server.index("--served-model-name")
    # The client's name first (vLLM reports it), then the id the pylon's canaries send.
    assert server[at + 1:at + 3] == ["tiny", "tiny-next"] and server[at + 3].startswith("--")
    assert "--max-num-seqs=8" in server
    assert "--model-name=tiny-next" in container_args(children["next-server"], "pylon")
    serving = container_args(children[roles.SERVER], "server")
    assert serving[serving.index("--served-model-name") + 1:][:2] == ["tiny", "--host"]
    assert "--model-name=tiny" in container_args(children[roles.SERVER], "pylon")


def test_the_gateway_gets_the_share_and_writes_it_after_the_models_are_ready():
    config = stack()
    settings = gateway_settings(config)
    assert settings.splits == (("tiny", "tiny-next", 20),)
    module = settings_module(settings)
    exported = json.loads(module[module.index("{"):module.rindex("}") + 1])
    assert exported["splits"] == {"tiny": {"revision": "tiny-next", "percent": 20}}
    assert exported["splitKey"] == {"maxLeadingMessages": 4, "sessionHeader": None}
    config_map = by_role(router_plan(config).gateway)[roles.GATEWAY_CONFIG]
    assert FRONTS in config_map.after
    nginx = render_files(settings)["nginx.conf"]
    assert "recursive_error_pages on;" in nginx and "location @gw_hold" in nginx
    assert "proxy_set_header x-model $gw_model;" in nginx


def test_without_a_next_revision_the_gateway_files_and_waits_are_as_before():
    config = stack(None)
    settings = gateway_settings(config)
    assert settings.splits == ()
    assert '"splits"' not in settings_module(settings)
    assert by_role(router_plan(config).gateway)[roles.GATEWAY_CONFIG].after == ("platform",)
    nginx = render_files(settings)["nginx.conf"]
    assert "recursive_error_pages" not in nginx and "@gw_hold" not in nginx
    assert compile_gateway(config) is not None


def test_the_dashboard_and_the_monitors_show_the_two_revisions_side_by_side():
    from components.compile.dashboard import compile_dashboard
    from components.compile.plan import compile_stack

    raw = {"models": [model("tiny", next=NEXT)], "router": ROUTER,
           "platform": {"metrics": {"enabled": True, "dashboard": {"enabled": True}}}}
    config = load_stack_config(raw)
    board = json.loads(next(iter(compile_dashboard(config)["data"].values())))
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "model"]
    assert variable["query"] == "tiny,tiny-next"
    monitors = {m["metadata"]["name"]: m["spec"]["selector"]["matchLabels"]
                for m in compile_stack(config) if m["kind"] == "ServiceMonitor"}
    assert {"tiny", "tiny-next"} <= set(monitors)


def test_an_autoscaled_model_scales_on_its_own_pods_not_its_next_revisions():
    from components.compile.autoscaling import queue_query

    raw = {"models": [model("tiny", weights={"accessMode": "ReadWriteMany"}, next=NEXT,
                            autoscaling={"enabled": True, "maxReplicas": 3})],
           "router": ROUTER, "platform": {"metrics": {"enabled": True}}}
    config = load_stack_config(raw)
    # Both engines report model_name "tiny": the model's own Service tells its pods apart.
    assert queue_query(config.models[0], config) == (
        'sum(vllm:num_requests_waiting{namespace="llm-serving",model_name="tiny",service="tiny"})')
    without = load_stack_config({**raw, "models": [{k: v for k, v in raw["models"][0].items() if k != "next"}]})
    assert "service=" not in queue_query(without.models[0], without)
