"""The pylon sidecar and worker authentication: render facts, each with the source that fixes it,
and the configs refused before anything reaches a cluster.

Sources: devilkun/nvcf@e07119fa (chart 0.16.2) ``src/libraries/rust/stargate/crates/pylon/src/
main.rs`` (clap Args) and ``startup.rs``; ``pylon-lib/src/stats/metrics.rs`` (the metrics server);
NVIDIA/nvcf@38d452db ``src/libraries/rust/stargate/README.md`` (worker authentication).
"""

from __future__ import annotations

import pytest

from components.compile import compile_stack
from components.compile.pylon import (
    AUTH_FILE,
    ROUTER_CA_FILE,
    TOKEN_FILE,
    pylon_sidecar,
    router_worker_auth,
    stargate_address,
)
from components.config import ConfigError, load_stack_config
from tests.support.builders import container, model, nim_model, pod_spec

ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
# A Stargate with --worker-auth-file (newer than chart 0.16.2): token mode needs one.
TOKEN_ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.18.0"
BACKEND_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
PYLON_IMAGE = "nvcr.io/example/stargate-client:0.4.0"
OPEN = {"mode": "open"}
TOKEN = {"mode": "token", "secretName": "worker-auth"}


def router(**fields) -> dict:
    return {"image": ROUTER_IMAGE, "pylon": {"image": PYLON_IMAGE}, "workerAuth": OPEN, **fields}


def load(*models: dict, namespace: str = "serving", **router_fields):
    return load_stack_config({"platform": {"namespace": namespace}, "models": list(models) or [model("alpha")],
                              "router": router(**router_fields)})


def deployment(stack, name: str) -> dict:
    (found,) = [m for m in compile_stack(stack) if m["kind"] == "Deployment" and m["metadata"]["name"] == name]
    return found


def pylon_of(stack, name: str = "alpha") -> dict:
    return container(deployment(stack, name), "pylon")


def flags(item: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for arg in item["args"]:
        key, _, value = arg.partition("=")
        out.setdefault(key, []).append(value)
    return out


def problems(raw_router: dict, models=None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_stack_config({"models": models or [model("alpha")], "router": raw_router})
    return caught.value.problems


# --- the sidecar -------------------------------------------------------------------------------

def test_each_fronted_model_pod_gets_one_pylon_beside_the_server():
    stack = load(model("alpha"), model("beta"), models=["alpha"])
    names = [c["name"] for c in pod_spec(deployment(stack, "alpha"))["containers"]]
    assert names == ["server", "pylon"]
    # beta is not fronted: nothing registers it, so it carries no pylon.
    assert [c["name"] for c in pod_spec(deployment(stack, "beta"))["containers"]] == ["server"]


def test_no_pylon_without_router_pylon_section():
    stack = load_stack_config({"models": [model("alpha")], "router": {"image": ROUTER_IMAGE}})
    assert [c["name"] for c in pod_spec(deployment(stack, "alpha"))["containers"]] == ["server"]


def test_flags_are_the_pylon_clap_names_with_loopback_upstream_and_served_name():
    item = pylon_of(load())
    args = flags(item)
    # main.rs: upstream_http_base_url (required), model_name (repeatable), inference_server_id.
    assert args["--upstream-http-base-url"] == ["http://127.0.0.1:8000"]
    assert args["--model-name"] == ["alpha"]  # vLLM --served-model-name is the model name
    assert args["--inference-server-id"] == ["$(POD_NAME)"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in item["env"]
    # main.rs: backend_connectivity defaults to direct; the router runs reverse, both must agree.
    assert args["--backend-connectivity"] == ["reverse"]
    # vLLM/NIM are not Dynamo: no priority-header rewriting, no pylon stats stream.
    assert args["--pylon-upstream-backend"] == ["passthrough"]
    assert args["--engine-stats-stream"] == ["off"]
    assert args["--initial-input-tps"] == ["100"]


LORA = {"enabled": True, "adapters": [{"name": "alpha-sql", "repo": "acme/alpha-sql"},
                                     {"name": "alpha-chat", "repo": "acme/alpha-chat"}]}


def test_each_lora_adapter_is_registered_as_a_model_of_the_pod():
    """A client asks for an adapter by its name; the router routes by that name, so the pylon of
    every pod whose vLLM resolves the adapter registers it (the real path: tests/engine)."""
    assert flags(pylon_of(load(model("alpha", lora=LORA))))["--model-name"] == ["alpha", "alpha-sql", "alpha-chat"]
    assert flags(pylon_of(load(model("alpha", lora={"enabled": True}))))["--model-name"] == ["alpha"]


def test_nim_raw_path_model_is_fronted_with_its_health_path():
    stack = load(nim_model("nim", healthPath="/v1/health/ready"))
    args = flags(pylon_of(stack, "nim"))
    assert args["--model-name"] == ["nim"]  # NIM_SERVED_MODEL_NAME is the model name
    assert args["--upstream-health-path"] == ["/v1/health/ready"]


def test_startup_waits_as_long_as_the_server_may_load():
    # startup.rs: --upstream-health-wait-ms (default 60000) then exit; a big model loads longer.
    stack = load_stack_config({"platform": {"startupTimeoutSeconds": 2400}, "models": [model("alpha")],
                               "router": router()})
    assert flags(pylon_of(stack))["--upstream-health-wait-ms"] == ["2400000"]


@pytest.mark.parametrize("fields, service", [
    ({}, "llm-router"),
    ({"replicas": 3, "backendRouter": {"image": BACKEND_IMAGE}}, "llm-router-backend-router"),
    ({"replicas": 3, "workload": {"kind": "StatefulSet"}}, "llm-router"),
])
def test_stargate_address_is_the_backend_router_when_it_runs_else_the_router(fields, service):
    stack = load(**fields)
    expected = f"http://{service}.serving.svc.cluster.local:50071"
    assert flags(pylon_of(stack))["--stargate-address"] == [expected]
    assert stargate_address(stack.router, "serving") == expected


def test_probes_hit_the_metrics_server_the_only_http_endpoint_pylon_runs():
    item = pylon_of(load())
    assert item["ports"] == [{"name": "pylon-metrics", "containerPort": 9089, "protocol": "TCP"}]
    assert flags(item)["--metrics-port"] == ["9089"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert item[probe]["httpGet"] == {"path": "/metrics", "port": "pylon-metrics"}


def test_security_context_and_resources():
    item = pylon_of(load(pylon={"image": PYLON_IMAGE, "resources": {"cpu": "250m", "memoryLimit": "2Gi"}}))
    context = item["securityContext"]
    assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert context["readOnlyRootFilesystem"] is True and context["privileged"] is False
    assert item["resources"] == {"requests": {"cpu": "250m", "memory": "512Mi"},
                                 "limits": {"cpu": "1", "memory": "2Gi"}}
    assert item["image"] == PYLON_IMAGE


def test_open_mode_has_no_token_and_the_router_self_signs():
    item = pylon_of(load())
    args = flags(item)
    assert "--auth-token-file" not in args and "--cluster-id" not in args
    assert "--quic-insecure" in args and "volumeMounts" not in item
    assert router_worker_auth(load().router).args == []


def test_token_mode_mounts_the_token_read_only_and_binds_the_cluster_id():
    stack = load(image=TOKEN_ROUTER_IMAGE, workerAuth=TOKEN)
    spec = pod_spec(deployment(stack, "alpha"))
    item = container(deployment(stack, "alpha"), "pylon")
    args = flags(item)
    assert args["--auth-token-file"] == [TOKEN_FILE]
    assert args["--cluster-id"] == ["llm-router"]
    [mount] = item["volumeMounts"]
    assert mount["readOnly"] is True and TOKEN_FILE.startswith(mount["mountPath"] + "/")
    assert "subPath" not in mount  # a subPath mount never sees a rotated Secret
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "worker-auth"
    assert volume["secret"]["items"] == [{"key": "token", "path": "token"}]
    # The server container does not see the token.
    assert all(m["name"] != mount["name"] for m in container(deployment(stack, "alpha"), "server")["volumeMounts"])


def test_token_mode_router_side_points_at_the_worker_auth_file():
    stack = load(image=TOKEN_ROUTER_IMAGE, workerAuth={**TOKEN, "authFileKey": "auth.yaml", "clusterId": "team-a"})
    side = router_worker_auth(stack.router)
    assert side.args == [f"--worker-auth-file={AUTH_FILE}"]
    [volume], [mount] = side.volumes, side.mounts
    assert volume["secret"] == {"secretName": "worker-auth", "defaultMode": 0o440,
                                "items": [{"key": "auth.yaml", "path": "worker-auth.yaml"}]}
    assert mount == {"name": volume["name"], "mountPath": AUTH_FILE.rsplit("/", 1)[0], "readOnly": True}
    assert flags(pylon_of(stack))["--cluster-id"] == ["team-a"]


def router_container(stack) -> dict:
    return container(deployment(stack, "llm-router"), "router")


def test_token_mode_renders_both_sides_from_one_secret():
    """End to end through compile_stack: the router reads --worker-auth-file from a mounted volume
    of the workerAuth Secret, and the pylon sends the token from the same Secret."""
    stack = load(image=TOKEN_ROUTER_IMAGE, workerAuth={**TOKEN, "clusterId": "team-a"})
    router_item = router_container(stack)
    [path] = flags(router_item)["--worker-auth-file"]
    [mount] = [m for m in router_item["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mount["readOnly"] is True and "subPath" not in mount  # re-read every 30 s: no subPath
    router_pod = pod_spec(deployment(stack, "llm-router"))
    [router_volume] = [v for v in router_pod["volumes"] if v["name"] == mount["name"]]
    [item] = router_volume["secret"]["items"]
    assert path == f"{mount['mountPath']}/{item['path']}" and item["key"] == "worker-auth.yaml"
    model_pod = pod_spec(deployment(stack, "alpha"))
    pylon = container(deployment(stack, "alpha"), "pylon")
    [token_volume] = [v for v in model_pod["volumes"] if v["name"] == pylon["volumeMounts"][0]["name"]]
    assert router_volume["secret"]["secretName"] == token_volume["secret"]["secretName"] == "worker-auth"
    # The cluster id the pylon claims is the one the router's file binds the token to.
    assert flags(pylon)["--cluster-id"] == ["team-a"]


def test_open_mode_renders_no_worker_auth_flag_on_the_router():
    # Stargate 0.16.2 runs open when no authenticator flag is given (startup.rs OpenAuthenticator).
    args = flags(router_container(load()))
    assert not [flag for flag in args if "worker-auth" in flag]
    assert not [v for v in pod_spec(deployment(load(), "llm-router"))["volumes"] if v["name"] == "worker-auth"]


@pytest.mark.parametrize("image", [
    "nvcr.io/nvidia/llm-request-router:0.16.2",
    "nvcr.io/nvidia/llm-request-router:v0.11.1",
    "nvcr.io/nvidia/llm-request-router:0.16",
    "nvcr.io/nvidia/llm-request-router:0.16.2@sha256:" + "a" * 64,
])
def test_token_mode_is_refused_on_a_router_without_the_worker_auth_file_flag(image):
    [message] = problems({"image": image, "pylon": {"image": PYLON_IMAGE}, "workerAuth": TOKEN})
    assert message.startswith("router.workerAuth.mode:")
    assert "0.16.x and older" in message and "--worker-auth-file" in message
    assert "mode: open" in message and "0.17.0 or newer" in message


@pytest.mark.parametrize("image", [
    "nvcr.io/nvidia/llm-request-router:0.17.0",
    "nvcr.io/nvidia/llm-request-router:v0.18.0-rc1",
    "nvcr.io/nvidia/llm-request-router@sha256:" + "b" * 64,  # digest only: the documented rule
    "nvcr.io/nvidia/llm-request-router:build-5f8ee2ab",  # not a version
])
def test_token_mode_is_accepted_on_newer_digest_only_and_non_version_tags(image):
    stack = load(image=image, workerAuth=TOKEN)
    assert flags(router_container(stack))["--worker-auth-file"] == [AUTH_FILE]


@pytest.mark.parametrize("arg", ["--allow-open-worker-auth", "--worker-auth-endpoint=http://api:9090"])
def test_token_mode_refuses_a_second_authenticator_in_args(arg):
    [message] = problems({"image": TOKEN_ROUTER_IMAGE, "pylon": {"image": PYLON_IMAGE},
                          "workerAuth": TOKEN, "args": [arg]})
    assert message.startswith("router.args.0:") and "exactly one" in message


@pytest.mark.parametrize("tls, secret", [
    ({"enabled": True, "secretName": "quic-id"}, "quic-id"),
    ({"enabled": True, "existingSecret": "byo-tls"}, "byo-tls"),
])
def test_pylon_trusts_the_secret_the_router_mounts(tls, secret):
    stack = load(tls=tls)
    [router_tls] = [v for v in pod_spec(deployment(stack, "llm-router"))["volumes"] if v["name"] == "stargate-tls"]
    [ca] = [v for v in pod_spec(deployment(stack, "alpha"))["volumes"] if v["name"] == "pylon-router-ca"]
    assert ca["secret"]["secretName"] == router_tls["secret"]["secretName"] == secret


def test_router_tls_makes_pylon_verify_with_the_certificate_ca():
    stack = load(tls={"enabled": True})
    item = pylon_of(stack)
    args = flags(item)
    assert args["--tls-cert-path"] == [ROUTER_CA_FILE] and "--quic-insecure" not in args
    [volume] = [v for v in pod_spec(deployment(stack, "alpha"))["volumes"] if v["name"] == "pylon-router-ca"]
    assert volume["secret"]["secretName"] == "llm-router-tls"
    assert volume["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]


def test_extra_args_come_last():
    stack = load(pylon={"image": PYLON_IMAGE, "args": ["--min-update-interval-ms=500"]})
    assert pylon_of(stack)["args"][-1] == "--min-update-interval-ms=500"


def test_render_refuses_a_stack_without_pylon():
    stack = load_stack_config({"models": [model("alpha")], "router": {"image": ROUTER_IMAGE}})
    with pytest.raises(ValueError, match="router.pylon"):
        pylon_sidecar(stack.models[0], stack)


# --- refused configs ----------------------------------------------------------------------------

def test_pylon_without_an_auth_choice_names_the_setting():
    [problem] = problems({"image": ROUTER_IMAGE, "pylon": {"image": PYLON_IMAGE}})
    assert problem.startswith("router.workerAuth.mode: required") and "mode: open" in problem


def test_auth_section_without_mode_is_refused():
    [problem] = problems(router(workerAuth={}))
    assert problem.startswith("router.workerAuth.mode")


@pytest.mark.parametrize("image, words", [
    ("stargate-client:0.4.0", "not fully qualified"),
    ("nvcr.io/example/stargate-client:latest", "':latest'"),
    ("nvcr.io/example/stargate-client", "no tag"),
])
def test_pylon_image_must_be_fully_qualified_and_pinned(image, words):
    [problem] = problems(router(pylon={"image": image}))
    assert problem.startswith("router.pylon.image") and words in problem


def test_pylon_image_is_required():
    [problem] = problems(router(pylon={}))
    assert problem.startswith("router.pylon.image")


def test_token_mode_needs_its_secret_and_open_mode_takes_no_token_fields():
    [problem] = problems(router(workerAuth={"mode": "token"}))
    assert problem.startswith("router.workerAuth.secretName: required")
    [problem] = problems(router(workerAuth={"mode": "open", "tokenKey": "t"}))
    assert problem.startswith("router.workerAuth.tokenKey") and "mode: token only" in problem


def test_auth_without_pylon_is_refused():
    [problem] = problems({"image": ROUTER_IMAGE, "workerAuth": OPEN})
    assert problem.startswith("router.workerAuth:") and "router.pylon" in problem


def test_rendered_flags_cannot_be_repeated_in_extra_args():
    [problem] = problems(router(pylon={"image": PYLON_IMAGE, "args": ["--stargate-address=http://x:1"]}))
    assert problem.startswith("router.pylon.args.0") and "--stargate-address" in problem


def test_limits_below_requests_are_refused():
    [problem] = problems(router(pylon={"image": PYLON_IMAGE, "resources": {"memory": "2Gi"}}))
    assert problem.startswith("router.pylon.resources.memoryLimit")


def test_operator_path_models_cannot_be_fronted_with_pylons():
    operator = nim_model("op", path="operator", nim={"authSecret": "ngc"})
    [problem] = problems(router(), models=[model("alpha"), operator])
    assert problem.startswith("models.1.path") and "'op'" in problem and "NIMService" in problem
    # Leaving it out of the fronted set is the other fix.
    stack = load_stack_config({"models": [model("alpha"), operator], "router": router(models=["alpha"])})
    assert stack.router.models == ("alpha",)
