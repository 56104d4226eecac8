"""The one rule on the real API server (issue 25 item 1): every stack `validate` accepts renders
objects the simulated cluster's kube-apiserver accepts in a server-side dry run (`dryRun=All`,
`fieldValidation=Strict`: unknown fields are errors, as are the API server's own rules the
schemas do not carry); every stack it refuses names a field, without a traceback.

The stacks are the render-level property test's (tests/support/config_strategies.py), three valid
ones to one with a mistake, since only accepted stacks reach the cluster. Each is rendered into one
namespace of this module (created first, labelled as the stack would label it), so objects of
several models and the router are checked together, as `up` would send them.

Custom resources need their CRDs: the operators' real ones (tests/support/real_crds.py: KEDA,
prometheus-operator, cert-manager; the NIM operator's vendored copy where present; LWS is the
cluster's own) are installed when the cluster has no copy, and deleted afterwards (only ours: a
copy the cluster already had is used and left alone). Kinds the cluster does not serve are
skipped and counted. Run it under
the cluster lock: `flock /tmp/llm-cluster.lock bash scripts/test.sh tests/integration/test_config_property_on_cluster.py`.

Bounded: ``LLM_SERVING_DRY_RUN_EXAMPLES`` stacks (default 60), fixed seed ``LLM_SERVING_PROPERTY_SEED``.
``LLM_SERVING_DRY_RUN_INSTALL_CRDS=0`` installs nothing (for a run without the lock: the custom
resources whose CRDs the cluster lacks are then skipped, and counted).
"""

from __future__ import annotations

import os
import uuid
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from testkit.harness import require_engine
from tests.config.test_config_property import SEED, check_one
from tests.support.config_strategies import MUTATED_STACKS, VALID_STACKS
from tests.support.fixture_crds import FixtureCrds
from tests.support.real_crds import nim_operator_crds, operator_crd

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("LLM_SERVING_DRY_RUN_EXAMPLES", "60"))
FIELD_MANAGER = "llm-serving-property-test"
# The operators' real CRDs, one FixtureCrds per operator (labelled as the other modules label theirs).
FIXTURES = tuple(FixtureCrds(files, label) for files, label in (
    (nim_operator_crds() or [], "nim-operator-crds"),
    ([operator_crd("keda", "keda.sh_scaledobjects.yaml")], "keda-crds"),
    ([operator_crd("prometheus-operator", "monitoring.coreos.com_servicemonitors.yaml")], "prometheus-operator-crds"),
    ([operator_crd("cert-manager", f"cert-manager.io_{kind}.yaml") for kind in ("certificates", "issuers")],
     "cert-manager-crds"),
) if files)
SEEN: Counter = Counter()


@pytest.fixture(scope="module")
def kube():
    require_engine()
    from kubernetes import client, config

    config.load_kube_config()
    return client


@pytest.fixture(scope="module")
def crds(kube):
    """The fixture CRDs the cluster lacks, installed for this module and removed after it."""
    installed = []
    if os.environ.get("LLM_SERVING_DRY_RUN_INSTALL_CRDS", "1") == "0":
        yield  # a run outside the cluster lock: the kinds the cluster lacks are skipped
        return
    for fixture in FIXTURES:
        if len(fixture.installed(kube)) == len(fixture.names):
            continue  # a copy is there (ours from an earlier run, or a real operator's): use it
        fixture.delete_ours(kube)  # a partial leftover of ours
        fixture.install(kube)
        installed.append(fixture)
    yield
    for fixture in installed:
        fixture.delete_ours(kube)


@pytest.fixture(scope="module")
def namespace(kube, crds):
    name = f"prop-{uuid.uuid4().hex[:6]}"
    core = kube.CoreV1Api()
    core.create_namespace({"metadata": {"name": name, "labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    yield name
    core.delete_namespace(name)
    print(f"\nserver-side dry run: {dict(SEEN)}")


@pytest.fixture(scope="module")
def dry_run(kube):
    """``dry_run(manifest)``: the API server's answer to creating ``manifest`` (None: accepted)."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    api = kube.ApiClient()
    dynamic = DynamicClient(api)

    def run(manifest: dict) -> str | None:
        try:
            resource = dynamic.resources.get(api_version=manifest["apiVersion"], kind=manifest["kind"])
        except ResourceNotFoundError:
            SEEN[f"skipped {manifest['kind']} (not served)"] += 1
            return None
        namespace = manifest["metadata"].get("namespace") if resource.namespaced else None
        method, url, headers, body, _ = api.param_serialize(
            method="POST", resource_path=resource.path(namespace=namespace),
            query_params=[("dryRun", "All"), ("fieldValidation", "Strict"), ("fieldManager", FIELD_MANAGER)],
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=manifest, auth_settings=["BearerToken"])
        try:
            response = api.call_api(method, url, header_params=headers, body=body)
            response.read()
            status, text = response.status, (response.data or b"").decode(errors="replace")
        except kube.exceptions.ApiException as error:
            status, text = error.status, str(error.body)
        if status == 409:  # exists (the namespace): validated before the conflict
            SEEN["accepted (exists)"] += 1
            return None
        if status >= 300:
            return f"{status}: {text[:600]}"
        SEEN[f"accepted {manifest['kind']}"] += 1
        return None

    return run


def _in_namespace(raw: dict, namespace: str) -> dict:
    """``raw`` deploying into ``namespace`` (every other setting as drawn)."""
    platform = raw.get("platform", {})
    if isinstance(platform, dict):
        raw = {**raw, "platform": {**platform, "namespace": namespace}}
    return raw


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(raw=st.one_of(VALID_STACKS, VALID_STACKS, VALID_STACKS, MUTATED_STACKS))
def test_what_validate_accepts_the_api_server_accepts(raw, namespace, dry_run):
    manifests = check_one(_in_namespace(raw, namespace))
    if manifests is None:
        SEEN["stacks refused by validate"] += 1
        return
    SEEN["stacks accepted by validate"] += 1
    refused = {f"{m['kind']}/{m['metadata']['name']}": answer for m in manifests if (answer := dry_run(m))}
    assert not refused, refused


def test_the_dry_run_refuses_what_the_api_server_refuses(namespace, dry_run):
    """The control: the same call refuses an int32 overflow, a bad label and an unknown field."""
    base = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": namespace}}
    assert dry_run(base) is None
    assert dry_run({**base, "metadata": {**base["metadata"], "labels": {"a b": "1"}}})
    assert dry_run({**base, "unknownField": 1})
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": namespace},
                  "spec": {"replicas": 2**31, "selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}},
                                        "spec": {"containers": [{"name": "c", "image": "docker.io/library/busybox:1.37.0"}]}}}}
    assert dry_run(deployment)
