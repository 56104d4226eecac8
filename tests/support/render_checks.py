"""What a rendered stack must hold beyond each object's own validity (issue 38): checks over the
whole set of manifests, for the render-level property test (tests/config/test_config_property.py).

- ``duplicate_names``: one object per kind, namespace and name (the API server keeps one of two;
  a router named like a model's next revision rendered two Deployments and two Services of one name);
- ``shared_rwo_claims``: a ReadWriteOnce claim mounted by at most one long-running pod, counting
  every workload that mounts it at its most replicas (a next revision's Deployment included: three
  revision pods on one RWO claim hit Multi-Attach);
- ``served_name_clashes``: every name registered with one router (the pylons' ``--model-name``:
  a model, a next revision's ``<model>-next``, a LoRA adapter) by one workload only.

Each returns what is wrong, in words; empty: nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

WORKLOADS = ("Deployment", "StatefulSet")


def duplicate_names(manifests: Iterable[dict]) -> list[str]:
    seen: dict[tuple[str, str, str], int] = defaultdict(int)
    for manifest in manifests:
        meta = manifest["metadata"]
        seen[(manifest["kind"], meta.get("namespace") or "", meta["name"])] += 1
    return [f"{count} objects {kind}/{name} in namespace '{namespace}'"
            for (kind, namespace, name), count in sorted(seen.items()) if count > 1]


def _pod_templates(manifest: dict) -> Iterator[tuple[dict, int]]:
    """(pod spec, how many pods run it at most) of a long-running workload."""
    spec = manifest.get("spec") or {}
    if manifest["kind"] in WORKLOADS:
        yield spec["template"]["spec"], spec.get("replicas", 1)
    elif manifest["kind"] == "LeaderWorkerSet":
        template = spec["leaderWorkerTemplate"]
        groups = spec.get("replicas", 1)
        yield template.get("leaderTemplate", template["workerTemplate"])["spec"], groups
        yield template["workerTemplate"]["spec"], groups * (template.get("size", 1) - 1)


def shared_rwo_claims(manifests: Iterable[dict]) -> list[str]:
    manifests = list(manifests)
    scaled = {(m["metadata"].get("namespace"), m["spec"]["scaleTargetRef"]["name"]): m["spec"].get("maxReplicaCount", 100)
              for m in manifests if m["kind"] == "ScaledObject"}
    rwo = {(m["metadata"].get("namespace"), m["metadata"]["name"]) for m in manifests
           if m["kind"] == "PersistentVolumeClaim" and "ReadWriteOnce" in m["spec"].get("accessModes", ())}
    mounted: dict[tuple, list[str]] = defaultdict(list)
    pods: dict[tuple, int] = defaultdict(int)
    for manifest in manifests:
        namespace, name = manifest["metadata"].get("namespace"), manifest["metadata"]["name"]
        for pod, count in _pod_templates(manifest):
            count = max(count, scaled.get((namespace, name), 0))
            for volume in pod.get("volumes") or ():
                claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
                if claim and (namespace, claim) in rwo and count:
                    mounted[(namespace, claim)].append(f"{manifest['kind']}/{name} ({count})")
                    pods[(namespace, claim)] += count
    return [f"ReadWriteOnce claim {claim} mounted by {pods[(ns, claim)]} pods: {', '.join(by)}"
            for (ns, claim), by in sorted(mounted.items()) if pods[(ns, claim)] > 1]


def _registrations(container: dict) -> tuple[str, list[str]]:
    """(router address, model names) a pylon container registers."""
    args = container.get("args") or []
    address = next((a.split("=", 1)[1] for a in args if a.startswith("--stargate-address=")), "")
    return address, [a.split("=", 1)[1] for a in args if a.startswith("--model-name=")]


def served_name_clashes(manifests: Iterable[dict]) -> list[str]:
    owners: dict[tuple[str, str], set[str]] = defaultdict(set)
    for manifest in manifests:
        for pod, _ in _pod_templates(manifest):
            for container in [*(pod.get("containers") or ()), *(pod.get("initContainers") or ())]:
                address, names = _registrations(container)
                for name in names:
                    owners[(address, name)].add(f"{manifest['kind']}/{manifest['metadata']['name']}")
    return [f"'{name}' registered with the router at {address} by {', '.join(sorted(by))}"
            for (address, name), by in sorted(owners.items()) if len(by) > 1]
