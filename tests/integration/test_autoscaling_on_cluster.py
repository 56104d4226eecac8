"""Autoscaling on the real engine and the simulated cluster (issue 16 item 2).

No KEDA controller runs here (nor Prometheus): the module installs KEDA 2.16.1's own ScaledObject
CRD (from its Go module, see tests/real_crds.py) and plays the autoscaler by
scaling the Deployment through its scale subresource, as the HPA KEDA creates does. What it
proves is the stack's side: the CRD is checked at preview, the ScaledObject is accepted by KEDA's
schema, and `pulumi preview` / `up` leave the autoscaler's replica count alone.

Order is the file's order: first the cluster without the CRD (the autoscaled stack stops at
preview), then with it. The CRD is deleted when the module ends, after its stacks are destroyed.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from components.compile.autoscaling import compile_scaled_object
from components.config import load_stack_config
from testkit.harness import small_model, stack_config
from tests.support.fixture_crds import WAIT, wait_for
from tests.support.keda import KEDA_CRD

pytestmark = pytest.mark.integration

RWX = {"size": "1Gi", "accessMode": "ReadWriteMany"}  # several replicas share one weights volume
# No Prometheus (nor its Operator's CRDs) here: these tests are about the replica count, so the
# stacks say the pods are scraped another way instead of turning platform.metrics on.
SCRAPED_ELSEWHERE = {"autoscaling": {"requireModelMetrics": False}}


def autoscaled_config(namespace: str, **autoscaling) -> dict:
    scaling = {"enabled": True, "minReplicas": 1, "maxReplicas": 4, **autoscaling}
    return stack_config(namespace, [small_model(weights=RWX, autoscaling=scaling)], **SCRAPED_ELSEWHERE)


def fixed_config(namespace: str, replicas: int) -> dict:
    return stack_config(namespace, [small_model(weights=RWX, replicas=replicas)])


# --- the CRD ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def cluster_without_the_crd_at_the_end(kube):
    """Autouse, so set up before ``make_project`` and torn down after it has destroyed the stacks."""
    yield from KEDA_CRD.absent_until_installed(kube, "a real KEDA")


# --- the autoscaler, played ---------------------------------------------------------------------

def scale(kube, namespace: str, name: str, replicas: int) -> None:
    """What the HPA does: write the count through the Deployment's scale subresource."""
    kube.AppsV1Api().patch_namespaced_deployment_scale(
        name, namespace, {"spec": {"replicas": replicas}}, field_manager="simulated-hpa")


def deployment(kube, namespace: str, name: str = "tiny"):
    return kube.AppsV1Api().read_namespaced_deployment(name, namespace)


def replicas_owners(kube, namespace: str, name: str = "tiny") -> list[str]:
    """The field managers that own the Deployment's spec.replicas."""
    owners = []
    for entry in deployment(kube, namespace, name).metadata.managed_fields or []:
        fields = entry.fields_v1 or {}
        if "f:replicas" in (fields.get("f:spec") or {}):
            owners.append(entry.manager)
    return owners


def changed_steps(project) -> list[tuple[str, str, list]]:
    return [(s["op"], s["urn"].rsplit("::", 1)[-1], s.get("diffs") or [])
            for s in project.preview_steps() if s["op"] != "same"]


# --- without the CRD ----------------------------------------------------------------------------

def test_without_kedas_crd_the_autoscaled_stack_stops_at_preview_with_the_fix(make_project):
    project = make_project(autoscaled_config)
    result = project.run("preview", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "model tiny: autoscaling.enabled needs scaledobjects.keda.sh, missing on this cluster" in output, output[-3000:]
    assert "helm install keda kedacore/keda" in output


# --- with the CRD -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deployed(keda_crd_installed, make_project):
    project = make_project(autoscaled_config)
    project.up()
    return project


def test_the_scaled_object_is_stored_as_compiled_and_targets_the_deployment(deployed, kube):
    stored = kube.CustomObjectsApi().get_namespaced_custom_object(
        "keda.sh", "v1alpha1", deployed.namespace, "scaledobjects", "tiny")
    stack = load_stack_config(autoscaled_config(deployed.namespace))
    # Nothing pruned: every field written is one KEDA's schema declares.
    assert stored["spec"] == compile_scaled_object(stack.models[0], stack)["spec"]
    assert stored["spec"]["scaleTargetRef"]["name"] == deployment(kube, deployed.namespace).metadata.name


def test_the_stack_does_not_own_the_replica_count(deployed, kube):
    live = deployment(kube, deployed.namespace)
    assert live.spec.replicas == 1  # the API server's default until an autoscaler writes one
    assert not [m for m in replicas_owners(kube, deployed.namespace) if m.startswith("pulumi")]
    assert deployed.outputs()["models"]["tiny"]["status"]["state"] == "READY"


def test_preview_and_up_leave_the_autoscalers_count_alone(deployed, kube):
    ns = deployed.namespace
    scale(kube, ns, "tiny", 3)
    wait_for(lambda: (deployment(kube, ns).status.ready_replicas or 0) == 3, WAIT, "3 ready replicas")
    # The field was nobody's, and a write through the scale subresource does not make it anyone's
    # (Kubernetes 1.36 here): no apply can conflict with it, and no apply removes it.
    assert not [m for m in replicas_owners(kube, ns) if m.startswith("pulumi")]

    assert changed_steps(deployed) == []  # no diff on the Deployment, nor anything else

    deployed.up()
    live = deployment(kube, ns)
    assert live.spec.replicas == 3 and (live.status.ready_replicas or 0) == 3


def test_a_model_switched_from_fixed_replicas_without_handover_drops_to_one(keda_crd_installed, make_project, kube):
    """What docs/05-day-2.md and the preview report warn of: the stack owned spec.replicas, the
    autoscaled manifest leaves it out, server-side apply removes it and the API default (1)
    holds until an autoscaler raises it (none runs here)."""
    project = make_project(lambda ns: fixed_config(ns, 2))
    project.up()
    assert deployment(kube, project.namespace).spec.replicas == 2
    project.write_config(autoscaled_config(project.namespace))
    project.up()
    assert deployment(kube, project.namespace).spec.replicas == 1
    assert not replicas_owners(kube, project.namespace)


def test_a_model_switched_from_fixed_replicas_keeps_its_pods_with_the_documented_handover(keda_crd_installed, make_project, kube):
    """Fixed `replicas: 2` first: the stack owns spec.replicas. Dropping the field from an apply
    the stack owns would reset it to the API default, 1 (server-side apply removes what its
    manager no longer declares). The handover of docs/05-day-2.md (another manager applies the
    same count first) keeps both pods through the switch."""
    project = make_project(lambda ns: fixed_config(ns, 2))
    project.up()
    ns = project.namespace
    assert [m for m in replicas_owners(kube, ns) if m.startswith("pulumi")]
    handover = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "tiny", "namespace": ns},
                "spec": {"replicas": 2}}
    kube.AppsV1Api().patch_namespaced_deployment(
        "tiny", ns, handover, field_manager="llm-serving-handover",
        _content_type="application/apply-patch+yaml")
    project.write_config(autoscaled_config(ns))
    project.up()
    live = deployment(kube, ns)
    assert live.spec.replicas == 2 and (live.status.ready_replicas or 0) == 2
    assert replicas_owners(kube, ns) == ["llm-serving-handover"]
    assert kube.CustomObjectsApi().get_namespaced_custom_object("keda.sh", "v1alpha1", ns, "scaledobjects", "tiny")


def test_a_spec_change_rolls_out_at_the_autoscalers_count(deployed, kube):
    """A change of the pod template under autoscaling: `up` applies it without touching the
    count, and the Deployment rolls it out over the autoscaler's replicas. (With spec.replicas
    in the manifest this `up` fails: a server-side apply conflict on .spec.replicas, with the
    manager that scaled it; checked by putting the field back.)"""
    ns = deployed.namespace
    before = deployment(kube, ns).spec.replicas
    scaling = {"enabled": True, "minReplicas": 1, "maxReplicas": 4}
    deployed.write_config(stack_config(ns, [small_model(weights=RWX, env={"VLLM_LOGGING_LEVEL": "DEBUG"},
                                                        autoscaling=scaling)], **SCRAPED_ELSEWHERE))
    deployed.up()  # the status waits for the new spec on every pod, minReplicas of them ready
    live = deployment(kube, ns)
    assert live.spec.replicas == before == 3
    env = {e.name: e.value for e in live.spec.template.spec.containers[0].env or []}
    assert env.get("VLLM_LOGGING_LEVEL") == "DEBUG"


# --- scale to zero, with the real KEDA operator --------------------------------------------------
#
# KEDA 2.16.1's operator (built from its Go module: scripts/toolchain/operators.sh) runs on this
# machine against the simulated cluster, watching the test's namespace only. No Prometheus runs
# here: a stand-in answers KEDA's queries (testkit/prometheus_standin.py), the held count
# read live from the rendered gateway's /metrics (nginx, in front of a stand-in router that does
# not list the model until its pod is ready, as the real router lists only routable models). KEDA
# activates the model on that count; the HPA it creates cannot read metrics here (no KEDA metrics
# server), which only matters above one replica. The operator's fixture: tests/integration/conftest.py.

IDLE_SECONDS = 60  # the least idleSeconds allows
POLL_SECONDS = 5


def sleepy_config(namespace: str, prometheus: str) -> dict:
    scaling = {"enabled": True, "minReplicas": 0, "maxReplicas": 2, "idleSeconds": IDLE_SECONDS}
    config = stack_config(namespace, [small_model(weights=RWX, autoscaling=scaling)],
                          autoscaling={"requireModelMetrics": False, "prometheusAddress": prometheus,
                                       "pollingIntervalSeconds": POLL_SECONDS})
    # Two held at most: the test's burst has a third request, which gets 503 at once.
    config["router"] = {"image": "registry.example.com/llm/request-router:0.16.2", "models": ["tiny"],
                        "gateway": {"hold": {"timeoutSeconds": 120, "maxPerModel": 2, "maxTotal": 2}}}
    return config


def rendered_gateway_settings():
    """The gateway settings the stack renders (its router address replaced by the stand-in's)."""
    from components.compile.gateway import settings
    from components.config import load_stack_config

    return settings(load_stack_config(sleepy_config("llm-serving", "http://prometheus.monitoring.svc:9090")))


def test_a_model_sleeps_when_idle_and_a_held_request_wakes_it(keda_operator, make_project, kube):
    from testkit.fake_router import FakeRouter
    from testkit.nginx_kit import Gateway
    from testkit.ports import host_ipv4
    from testkit.prometheus_standin import PrometheusStandIn

    gateway_settings = rendered_gateway_settings()
    assert (gateway_settings.sleepers, gateway_settings.hold_max_per_model) == (("tiny",), 2)
    with FakeRouter(models=()) as router, Gateway(replace(gateway_settings, upstream=f"127.0.0.1:{router.port}")) as gateway:
        world = SleepyWorld(kube, gateway, router)
        with PrometheusStandIn({"gateway_held_requests": world.held, "gateway_requests_total": lambda: 0,
                                "vllm:num_requests_waiting": lambda: 0}, host="0.0.0.0") as prometheus:
            project = make_project(lambda ns: sleepy_config(ns, f"http://{host_ipv4()}:{prometheus.port}"))
            world.namespace = project.namespace
            world.operator, world.log = keda_operator(project.namespace)
            try:
                sleep_and_wake(project, world)
            finally:
                world.release_the_scaled_object()
            assert any("gateway_held_requests" in q for q in prometheus.queries)


def recorded_status(project) -> dict:
    """The model status record in the stack (what `refresh` re-read; stack outputs are only
    re-evaluated by `up`)."""
    import json

    resources = json.loads(project.run("stack", "export").stdout)["deployment"]["resources"]
    (record,) = [r for r in resources if r["urn"].endswith("::tiny-status") and "state" in (r.get("outputs") or {})]
    return record["outputs"]


class SleepyWorld:
    """The model's Deployment as KEDA scales it, the gateway's held count, the operator."""

    def __init__(self, kube, gateway, router):
        self.kube, self.gateway, self.router = kube, gateway, router
        self.namespace, self.operator, self.log = "", None, None

    def held(self) -> float:
        import urllib.request

        text = urllib.request.urlopen(f"http://127.0.0.1:{self.gateway.health_port}/metrics", timeout=5).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith('gateway_held_requests{model="tiny"}'))

    def ready(self) -> int:
        return deployment(self.kube, self.namespace).status.ready_replicas or 0

    def desired(self) -> int:
        return deployment(self.kube, self.namespace).spec.replicas

    def operator_alive(self, what: str) -> None:
        if self.operator.poll() is not None:
            pytest.fail(f"KEDA's operator exited while waiting for {what}:\n{self.log.read_text()[-3000:]}")

    def release_the_scaled_object(self) -> None:
        """KEDA's finalizer is on the ScaledObject: it must go while the operator runs, or the
        namespace (and the CRD, when the module ends) could never be deleted."""
        custom = self.kube.CustomObjectsApi()
        try:
            custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", self.namespace, "scaledobjects", "tiny")
        except self.kube.exceptions.ApiException as error:
            if error.status != 404:
                raise
        wait_for(lambda: not custom.list_namespaced_custom_object(
            "keda.sh", "v1alpha1", self.namespace, "scaledobjects")["items"], WAIT, "KEDA to let go of the ScaledObject")


def sleep_and_wake(project, world: SleepyWorld) -> None:
    import json
    import threading
    import time
    import urllib.error
    import urllib.request

    project.up()
    # Whether `up` saw the pod serve depends on how soon KEDA first looked (seen both ways: here the
    # pod was ready first, in CI KEDA scaled it away while `up` waited and it ended asleep).
    targets_at_up = recorded_status(project)["targets"]
    # Never active yet: KEDA scales it to zero at its first look.
    wait_for(lambda: world.desired() == 0 and not world.ready(), 60, "KEDA to scale the idle model to zero",
             stop=world.operator_alive)
    project.run("refresh", "--yes")  # the status record re-read: asleep, as configured
    asleep = recorded_status(project)
    assert asleep["state"] == "SCALED_TO_ZERO" and not asleep["targets"]
    # Asleep is a steady state: no cluster object changes. The router's targets record (no object,
    # a record of what the router can reach) follows the refreshed model status: it changes only
    # when `up` had recorded the pod's targets.
    assert changed_steps(project) == ([("update", "llm-router-targets", [])] if targets_at_up else [])
    project.up()  # and `up` does not wake it
    assert world.desired() == 0

    # Two requests, streaming and not: held at the gateway and counted; KEDA wakes the model and
    # its pod gets ready. A third, beyond hold.maxPerModel (2), gets 503 with Retry-After at once.
    answers: dict = {}

    def ask(stream: bool):
        body = json.dumps({"model": "tiny", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}).encode()
        request = urllib.request.Request(f"{world.gateway.base}/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
        return urllib.request.urlopen(request, timeout=120)

    callers = [threading.Thread(target=lambda s=stream: answers.__setitem__(s, ask(s).read().decode()), daemon=True)
               for stream in (True, False)]
    asked = time.monotonic()
    for caller in callers:
        caller.start()
    wait_for(lambda: world.held() == 2, 10, "both requests to be held")
    burst_started = time.monotonic()
    with pytest.raises(urllib.error.HTTPError) as beyond:
        ask(True)
    assert beyond.value.code == 503 and beyond.value.headers["Retry-After"] == "2"
    assert time.monotonic() - burst_started < 2, "beyond the bound: 503 at once, not held"
    wait_for(lambda: world.ready() == 1, 60, "the held requests to wake the model (1 ready replica)",
             stop=world.operator_alive)
    woke = time.monotonic() - asked
    assert not answers and world.held() == 2  # still held: the router has no server for them yet
    world.router.models.append("tiny")  # the pod's pylon registers: the router lists the model
    for caller in callers:
        caller.join(10)
    assert answers[True].rstrip().endswith("data: [DONE]")
    assert json.loads(answers[False])["choices"][0]["message"]["content"]
    print(f"wake: request to 1 ready replica in {woke:.1f}s (KEDA polling every {POLL_SECONDS}s)")
    assert woke < 3 * POLL_SECONDS + 10

    # Idle again: asleep after idleSeconds (KEDA's cooldownPeriod) and a poll or two.
    world.router.models.remove("tiny")
    idle_from = time.monotonic()
    wait_for(lambda: world.desired() == 0, IDLE_SECONDS + 4 * POLL_SECONDS + 30, "the model to sleep again",
             stop=world.operator_alive)
    # Not at once: KEDA counts the idle time from its last poll that saw a held request, up to a
    # polling interval before the release (and the release a moment before idle_from).
    assert time.monotonic() - idle_from >= IDLE_SECONDS - 2 * POLL_SECONDS
