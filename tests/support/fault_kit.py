"""The fault suite's kit on the simulated cluster (tests/faults/test_fault_*.py; fixtures in conftest.py).

The pattern is tests/integration's: a throwaway copy of the project per stack, its own
file-backend state and its own namespace (``flt-<hex>``), deleted at the end (no destroy). Faults come from
outside the program, never from test-only config in the product:

- pod faults: a MutatingAdmissionPolicy (``Cluster.inject``) adds the KWOK fault annotation
  (``llm-serving.dev/kwok-fault``, scripts/cluster/stages/30-pod-faults.yaml) to the pods of one
  model/component in one namespace as the API server admits them. The compiled manifests stay
  exactly what the product renders, and "fixing" a fault that lives outside the spec (the hub
  was down, the token was wrong) is removing the policy, not a config change;
- API faults and pod logs: tests/support/chaos_proxy.py, an HTTP proxy in front of the apiserver
  that both the pulumi-kubernetes provider and our dynamic providers go through (KUBECONFIG);
- a restricted identity: a ServiceAccount token with a namespaced Role (``Cluster.restricted_kubeconfig``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from testkit.harness import Project

FAULT_ANNOTATION = "llm-serving.dev/kwok-fault"
MODEL_LABEL = "llm-serving.dev/model"
COMPONENT_LABEL = "app.kubernetes.io/component"
ADMISSION = ("admissionregistration.k8s.io", "v1")


class Cluster:
    """The test's own, unfaulted view of the simulated cluster."""

    def __init__(self) -> None:
        from kubernetes import client, config

        self.kubeconfig = os.environ["KUBECONFIG"]
        configuration = client.Configuration()
        config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
        api = client.ApiClient(configuration)
        self.core, self.apps, self.batch = client.CoreV1Api(api), client.AppsV1Api(api), client.BatchV1Api(api)
        self.rbac, self.custom = client.RbacAuthorizationV1Api(api), client.CustomObjectsApi(api)
        self.host = configuration.host
        self.ca = configuration.ssl_ca_cert
        self.policies: list[str] = []

    # --- reads -----------------------------------------------------------------------------------

    def read(self, kind: str, name: str, namespace: str):
        from kubernetes.client.exceptions import ApiException

        reader = {"job": self.batch.read_namespaced_job, "deployment": self.apps.read_namespaced_deployment,
                  "service": self.core.read_namespaced_service,
                  "pvc": self.core.read_namespaced_persistent_volume_claim}[kind]
        try:
            return reader(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def names(self, namespace: str) -> dict[str, list[str]]:
        """Every object a model owns, by kind (labelled part-of llm-serving)."""
        selector = "app.kubernetes.io/part-of=llm-serving"
        return {
            "pvc": sorted(o.metadata.name for o in self.core.list_namespaced_persistent_volume_claim(
                namespace, label_selector=selector).items),
            "job": sorted(o.metadata.name for o in self.batch.list_namespaced_job(namespace, label_selector=selector).items),
            "deployment": sorted(o.metadata.name for o in self.apps.list_namespaced_deployment(
                namespace, label_selector=selector).items),
            "service": sorted(o.metadata.name for o in self.core.list_namespaced_service(
                namespace, label_selector=selector).items),
        }

    def wait(self, what: str, check: Callable[[], object], timeout: float = 60, poll: float = 0.2):
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(poll)

    # --- pod faults ------------------------------------------------------------------------------

    def inject(self, namespace: str, fault: str, *, component: str, model: Optional[str] = None,
               arg: Optional[str] = None) -> str:
        """From now on, pods of ``component`` (and ``model``, and with ``arg`` among a container's
        args) admitted in ``namespace`` carry the KWOK fault ``fault``. Returns the policy name."""
        name = f"flt-{uuid.uuid4().hex[:8]}"
        def label_is(key: str, value: str) -> str:
            return (f"has(object.metadata.labels) && {json.dumps(key)} in object.metadata.labels && "
                    f"object.metadata.labels[{json.dumps(key)}] == {json.dumps(value)}")

        conditions = [f"request.namespace == {json.dumps(namespace)}", label_is(COMPONENT_LABEL, component)]
        if model:
            conditions.append(label_is(MODEL_LABEL, model))
        if arg:
            # The Hub puller's `hf` is an init container (the verify step runs after it).
            has_arg = f"has(c.args) && c.args.exists(a, a == {json.dumps(arg)})"
            conditions.append(f"object.spec.containers.exists(c, {has_arg}) || (has(object.spec.initContainers) "
                              f"&& object.spec.initContainers.exists(c, {has_arg}))")
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name, "labels": {"llm-serving.dev/fault-suite": "true"}},
            "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                        "operations": ["CREATE"], "resources": ["pods"]}]},
                "matchConditions": [{"name": "fault", "expression": " && ".join(f"({c})" for c in conditions)}],
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                    "expression": f'Object{{metadata: Object.metadata{{annotations: {{"{FAULT_ANNOTATION}": '
                                  f'{json.dumps(fault)}}}}}}}'}}],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": {"llm-serving.dev/fault-suite": "true"}},
            "spec": {"policyName": name},
        }
        self.custom.create_cluster_custom_object(*ADMISSION, "mutatingadmissionpolicies", policy)
        self.custom.create_cluster_custom_object(*ADMISSION, "mutatingadmissionpolicybindings", binding)
        self.policies.append(name)
        time.sleep(1.5)  # the admission plugin picks policies up from an informer
        return name

    def remove_fault(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        for plural in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
            try:
                self.custom.delete_cluster_custom_object(*ADMISSION, plural, name)
            except ApiException as error:
                if error.status != 404:
                    raise
        if name in self.policies:
            self.policies.remove(name)
        time.sleep(1.5)

    # --- a restricted identity -------------------------------------------------------------------

    def restricted_kubeconfig(self, path: Path, namespace: str, rules: list[dict]) -> Path:
        """A kubeconfig for a ServiceAccount of ``namespace`` allowed exactly ``rules`` there."""
        from kubernetes import client

        name = "flt-restricted"
        self.core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata={"name": name}))
        self.rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})
        self.rbac.create_namespaced_role_binding(namespace, {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        })
        return self.token_kubeconfig(path, namespace, name)

    def token_kubeconfig(self, path: Path, namespace: str, service_account: str) -> Path:
        """Write ``path`` as a kubeconfig holding a token of ``service_account`` (an hour long)."""
        token = self.core.create_namespaced_service_account_token(
            service_account, namespace, {"spec": {"expirationSeconds": 3600}}).status.token
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": self.host, "certificate-authority": self.ca}}],
            "users": [{"name": service_account, "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": service_account, "namespace": namespace}}],
            "current-context": "c",
        }))
        return path

    def cleanup(self) -> None:
        """Remove the policies a failed test left (each matches one test namespace only)."""
        for name in list(self.policies):
            try:
                self.remove_fault(name)
            except Exception as error:  # noqa: BLE001
                import warnings

                warnings.warn(f"fault policy {name} not removed: {error}; delete the "
                              "MutatingAdmissionPolicy(Binding) labelled llm-serving.dev/fault-suite=true", stacklevel=2)


@dataclass
class Timed:
    returncode: int
    lines: list[tuple[float, str]]
    seconds: float

    @property
    def output(self) -> str:
        return "".join(line for _, line in self.lines)

    def at(self, pattern: str) -> float:
        """Seconds from the start to the first line matching ``pattern`` (a regex)."""
        for moment, line in self.lines:
            if re.search(pattern, line):
                return moment
        raise AssertionError(f"no line matches {pattern!r}")


class FaultProject(Project):
    """A Project whose commands can be timed, and whose state can be compared with the cluster."""

    namespace: str

    def command(self, *args: str) -> list[str]:
        return ["pulumi", *args, "--non-interactive", "-s", self.stack]

    def timed(self, *args: str, timeout: float = 600) -> Timed:
        """Run a pulumi command, timestamping each line of its output as it comes."""
        started = time.monotonic()
        process = subprocess.Popen(self.command(*args), cwd=self.root, env=self.env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, bufsize=1)
        lines: list[tuple[float, str]] = []
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        try:
            for line in process.stdout:
                lines.append((time.monotonic() - started, line))
        finally:
            timer.cancel()
        process.wait()
        timed = Timed(process.returncode, lines, time.monotonic() - started)
        if os.environ.get("LLM_SERVING_FAULTS_LOGDIR"):  # keep every command's output for a post-mortem
            logdir = Path(os.environ["LLM_SERVING_FAULTS_LOGDIR"])
            logdir.mkdir(parents=True, exist_ok=True)
            name = f"{time.strftime('%H%M%S')}-{self.stack}-{args[0]}-rc{timed.returncode}.log"
            (logdir / name).write_text(timed.output)
        return timed

    def resources(self) -> list[dict]:
        return json.loads(self.run("stack", "export").stdout)["deployment"].get("resources") or []

    def kube_objects_in_state(self) -> dict[str, str]:
        """urn-name -> object name of every pulumi-kubernetes object the state holds."""
        found = {}
        for resource in self.resources():
            if resource["type"].startswith("kubernetes:"):
                name = ((resource.get("outputs") or {}).get("metadata") or {}).get("name")
                found[resource["urn"].split("::")[-1]] = name
        return found

    def pending_operations(self) -> list[dict]:
        return json.loads(self.run("stack", "export").stdout)["deployment"].get("pending_operations") or []


def assert_state_matches_cluster(project: FaultProject, cluster: Cluster) -> dict[str, str]:
    """Every Kubernetes object the state holds exists in the cluster (no half-finished record)."""
    kinds = {"PersistentVolumeClaim": "pvc", "Job": "job", "Deployment": "deployment", "Service": "service"}
    missing = []
    for resource in project.resources():
        kind = resource["type"].split(":")[-1]
        if kind in kinds:
            name = ((resource.get("outputs") or {}).get("metadata") or {}).get("name")
            if cluster.read(kinds[kind], name, project.namespace) is None:
                missing.append(f"{kind}/{name}")
    assert not missing, f"the state holds objects the cluster does not: {missing}"
    return project.kube_objects_in_state()
