"""A model's next revision (models[].next) on the simulated cluster and the real engine: `up` serves
it beside the serving revision (its own weights pulled and verified, its own status), a new weight
changes the gateway's share only, and rolling back or promoting are ordinary `up`s whose previews
say what moves and which leave the cluster as a fresh `up` of the final config would.

The share itself (the split, stickiness, the fallback while the revision has no server) is proven
on the real nginx in front of the stand-in router (tests/gateway/test_gateway_split.py): the
simulated cluster runs no pods' processes.
"""

from __future__ import annotations

import json

import pytest

from testkit.harness import small_model, stack_config

pytestmark = pytest.mark.integration

ROUTER = "llm-router"
SERVING, NEXT = "main", "v2"  # source revisions of acme/tiny-llm
ROUTER_SECTION = {"name": ROUTER, "image": "registry.example.com/llm/request-router:0.16.2",
                  "workerAuth": {"mode": "open"},
                  "pylon": {"image": "registry.example.com/llm/stargate-client:0.4.0",
                            "resources": {"cpu": "50m", "memory": "64Mi"}},
                  "gateway": {"replicas": 1}}


def config(namespace: str, revision: str = SERVING, next_revision: dict | None = None) -> dict:
    model = small_model("tiny", revision=revision, **({"next": next_revision} if next_revision else {}))
    return {**stack_config(namespace, [model]), "router": ROUTER_SECTION}


SOURCE_ANNOTATION = "llm-serving.dev/model-source"


def digest(revision: str) -> str:
    """The source hash a weights child of acme/tiny-llm@``revision`` is named after."""
    import hashlib

    return hashlib.sha256(f"acme/tiny-llm@{revision}".encode()).hexdigest()[:8]


def with_next(weight: int) -> dict:
    return {"weight": weight, "source": {"repo": "acme/tiny-llm", "revision": NEXT}}


def changed(project) -> dict[str, str]:
    return {s["urn"].rsplit("::", 1)[-1]: s["op"] for s in project.preview_steps()
            if s["op"] not in ("same", "read", "refresh")}


def split_of(kube, namespace: str) -> dict:
    text = kube.CoreV1Api().read_namespaced_config_map(f"{ROUTER}-gateway-config", namespace).data["gateway_config.js"]
    return json.loads(text[text.index("{"):text.rindex("}") + 1]).get("splits", {})


def live_objects(kube, namespace: str) -> set[tuple[str, str]]:
    """(kind, name) of the model's and the gateway's objects in the namespace, as the cluster holds them."""
    apps, core, batch = kube.AppsV1Api(), kube.CoreV1Api(), kube.BatchV1Api()
    listings = {"Deployment": apps.list_namespaced_deployment, "Service": core.list_namespaced_service,
                "PersistentVolumeClaim": core.list_namespaced_persistent_volume_claim, "Job": batch.list_namespaced_job}
    # What is being deleted (a delete is not awaited) is gone as far as the stack is concerned.
    return {(kind, item.metadata.name) for kind, listing in listings.items() for item in listing(namespace).items
            if not item.metadata.deletion_timestamp}


def fresh_objects(raw: dict) -> set[tuple[str, str]]:
    """What a fresh `up` of ``raw`` declares, of the same kinds."""
    from components.compile import compile_stack
    from components.config import load_stack_config

    kinds = {"Deployment", "Service", "PersistentVolumeClaim", "Job"}
    return {(m["kind"], m["metadata"]["name"]) for m in compile_stack(load_stack_config(raw)) if m["kind"] in kinds}


def recorded_state(project, name: str) -> str:
    resources = json.loads(project.run("stack", "export").stdout)["deployment"]["resources"]
    (record,) = [r for r in resources if r["urn"].endswith(f"::{name}") and "state" in (r.get("outputs") or {})]
    return record["outputs"]["state"]


@pytest.fixture(scope="module")
def project(make_project):
    project = make_project(lambda ns: config(ns, next_revision=with_next(20)))
    project.up()
    return project


def test_up_serves_the_next_revision_beside_the_serving_one_on_weights_of_its_own(project, kube):
    ns = project.namespace
    apps = kube.AppsV1Api()
    serving, revision = (apps.read_namespaced_deployment(name, ns) for name in ("tiny", "tiny-next"))
    assert serving.status.ready_replicas == revision.status.ready_replicas == 1
    claims = {v.persistent_volume_claim.claim_name for d in (serving, revision)
              for v in d.spec.template.spec.volumes if v.persistent_volume_claim}
    # Each revision's own volume, named after its source (the revision's as the model's will be).
    assert claims == {f"tiny-weights-{digest(SERVING)}", f"tiny-weights-{digest(NEXT)}"}
    server = next(c for c in revision.spec.template.spec.containers if c.name == "server")
    assert server.args[server.args.index("--served-model-name") + 1:][:2] == ["tiny", "tiny-next"]
    assert recorded_state(project, "tiny-next-status") == "READY"
    assert split_of(kube, ns) == {"tiny": {"revision": "tiny-next", "percent": 20}}
    assert live_objects(kube, ns) == fresh_objects(config(ns, next_revision=with_next(20)))


def test_the_stacks_gateway_sends_the_share_and_keeps_each_conversation_on_its_revision(project, kube):
    # The gateway as this stack renders it, on the real nginx in front of the stand-in router
    # (the simulated cluster runs no nginx): 200 conversations, two turns each.
    from dataclasses import replace

    from components.compile.gateway import settings
    from components.config import load_stack_config
    from testkit.fake_router import FakeRouter
    from testkit.nginx_kit import Gateway
    from tests.gateway.test_gateway_nginx import call

    rendered = settings(load_stack_config(config(project.namespace, next_revision=with_next(20))))
    assert rendered.splits == (("tiny", "tiny-next", 20),)
    with FakeRouter(models=("tiny", "tiny-next")) as router, \
            Gateway(replace(rendered, upstream=f"127.0.0.1:{router.port}")) as gateway:
        first_turns, moved = [], []
        for conversation in range(200):
            router.requests.clear()
            messages = [{"role": "user", "content": f"conversation {conversation}"}]
            for turn in range(2):
                status, _, text = call(gateway.base, "/v1/chat/completions", {"model": "tiny", "messages": messages})
                assert status == 200, text
                messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": f"turn {turn}"}]
            ids = [r["headers"]["x-model"] for r in router.requests]
            first_turns.append(ids[0])
            moved += [conversation] if len(set(ids)) > 1 else []
    share = first_turns.count("tiny-next") / len(first_turns)
    # 20% over 200 conversations: 9 points is over three standard deviations (2.8).
    assert abs(share - 0.20) < 0.09, f"{first_turns.count('tiny-next')} of 200 conversations on tiny-next"
    assert moved == [], f"conversations that changed revision between turns: {moved}"


def test_a_new_weight_changes_the_gateways_share_only(project, kube):
    project.write_config(config(project.namespace, next_revision=with_next(50)))
    steps = changed(project)
    # The gateway's files (and its pods, which roll on their hash); nothing of either revision.
    assert set(steps) == {f"{ROUTER}-gateway-config", f"{ROUTER}-gateway"}, steps
    project.up()
    assert split_of(kube, project.namespace)["tiny"]["percent"] == 50


def test_rolling_back_removes_the_next_revision_and_leaves_the_serving_one_untouched(project, kube):
    ns = project.namespace
    apps = kube.AppsV1Api()
    before = apps.read_namespaced_deployment("tiny", ns)
    project.write_config(config(ns))
    steps = changed(project)
    # Its weights are named after its source as the model's would be (`tiny-weights-<hash>`).
    revision_weights = {f"{role}-{digest(NEXT)}" for role in ("tiny-weights", "tiny-puller", "tiny-weights-gate")}
    assert {name for name, op in steps.items() if op == "delete"} == revision_weights | {
        "tiny-next-server", "tiny-next-service", "tiny-next-status"}, steps
    assert not [name for name in steps if name.startswith("tiny-") and name not in revision_weights
                and not name.startswith("tiny-next-")], steps
    project.up()
    after = apps.read_namespaced_deployment("tiny", ns)
    assert (after.metadata.uid, after.metadata.generation) == (before.metadata.uid, before.metadata.generation)
    assert split_of(kube, ns) == {}
    assert live_objects(kube, ns) == fresh_objects(config(ns))


def test_promoting_makes_the_next_revision_the_model_as_a_fresh_up_of_it_would(project, kube):
    ns = project.namespace
    core, batch = kube.CoreV1Api(), kube.BatchV1Api()
    project.write_config(config(ns, next_revision=with_next(10)))
    project.up()
    revision_volume = core.read_namespaced_persistent_volume_claim(f"tiny-weights-{digest(NEXT)}", ns)
    (revision_job,) = [j for j in batch.list_namespaced_job(ns).items
                       if j.spec.template.metadata.annotations.get(SOURCE_ANNOTATION, "").endswith(f"@{NEXT}")]
    # Promote: the revision's source becomes the model's, and `next` goes, in one change.
    final = config(ns, revision=NEXT)
    project.write_config(final)
    steps = changed(project)
    assert steps.get("tiny-server") == "update" and steps.get("tiny-next-server") == "delete", steps
    # The revision's weights become the model's as they are: no step for them, the old ones go.
    assert not [name for name in steps if name.endswith(digest(NEXT))], steps
    assert {name for name, op in steps.items() if op == "delete" and name.endswith(digest(SERVING))} == {
        f"{role}-{digest(SERVING)}" for role in ("tiny-weights", "tiny-puller", "tiny-weights-gate")}, steps
    project.up()
    # Not pulled again: the same volume and the same completed Job.
    kept = core.read_namespaced_persistent_volume_claim(f"tiny-weights-{digest(NEXT)}", ns)
    assert kept.metadata.uid == revision_volume.metadata.uid
    assert batch.read_namespaced_job(revision_job.metadata.name, ns).metadata.uid == revision_job.metadata.uid
    server = next(c for c in kube.AppsV1Api().read_namespaced_deployment("tiny", ns).spec.template.spec.volumes
                  if c.persistent_volume_claim)
    assert server.persistent_volume_claim.claim_name in {name for kind, name in fresh_objects(final)
                                                          if kind == "PersistentVolumeClaim"}
    assert live_objects(kube, ns) == fresh_objects(final)
    result = project.run("preview", "--expect-no-changes", check=False)
    assert result.returncode == 0, f"the preview after promoting plans changes:\n{result.stdout[-4000:]}"
