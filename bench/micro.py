"""In-process benchmarks: the router's target computation and the weight puller's throughput."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `contract`

import puller_throughput as pt  # bench/ is first on sys.path: this file's folder

from components.compile import common
from contract.targets import routable_targets

# --- router targets ------------------------------------------------------------------------

def endpoint_slices(endpoints: int, per_slice: int = 100) -> list[dict]:
    """EndpointSlices as a busy dual-stack Service has them: every pod in an IPv4 and an IPv6
    slice (so half the endpoints are duplicates to collapse), 10% not ready, 2% terminating."""
    pods = endpoints // 2
    flat = []
    for family in ("IPv4", "IPv6"):
        for i in range(pods):
            ready = i % 10 != 0
            flat.append({
                "addresses": [f"10.{i // 65536}.{i // 256 % 256}.{i % 256}" if family == "IPv4" else f"fd00::{i:x}"],
                "conditions": {"ready": ready, "serving": ready, "terminating": i % 50 == 7},
                "nodeName": f"gpu-node-{i % 16}",
                "targetRef": {"kind": "Pod", "name": f"server-{i:05d}", "namespace": "llm"},
            })
    slices = []
    for start in range(0, len(flat), per_slice):
        chunk = flat[start:start + per_slice]
        family = "IPv4" if "." in chunk[0]["addresses"][0] else "IPv6"
        slices.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": family,
                       "metadata": {"name": f"model-{start // per_slice:03d}"}, "endpoints": chunk})
    return slices


def naive_targets(endpoint_slices: list[dict]) -> list[tuple]:
    """The peer: the same rules, written the straightforward way (a list of seen pods)."""
    pods: list[str] = []
    targets: list[list] = []
    for endpoint_slice in endpoint_slices:
        for endpoint in endpoint_slice.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            conditions = endpoint.get("conditions") or {}
            if ref.get("kind", "Pod") != "Pod" or not ref.get("name"):
                continue
            if conditions.get("terminating") is True or conditions.get("ready") is False:
                continue
            if ref["name"] in pods:
                target = targets[pods.index(ref["name"])]
                for address in endpoint.get("addresses") or []:
                    if address not in target[1]:
                        target[1].append(address)
                if not target[2]:
                    target[2] = endpoint.get("nodeName") or ""
            else:
                pods.append(ref["name"])
                targets.append([ref["name"], list(endpoint.get("addresses") or []), endpoint.get("nodeName") or ""])
    return sorted((pod, tuple(sorted(addresses)), node) for pod, addresses, node in targets)


def _time(fn, arg) -> float:
    start = time.perf_counter()
    fn(arg)
    return time.perf_counter() - start


def bench_targets(quick: bool, smoke: bool = False) -> dict:
    """Median seconds of ours and the naive peer, alternating, for 1k and 10k endpoints (1k once: smoke)."""
    results = {}
    for endpoints in (1_000,) if smoke else (1_000, 10_000):
        slices = endpoint_slices(endpoints)
        ours = routable_targets(slices)
        expected = [(t.pod, t.addresses, t.node) for t in ours.targets]
        if naive_targets(slices) != expected:
            raise AssertionError("the naive peer disagrees with routable_targets: the comparison would be void")
        runs = 1 if smoke else (5 if quick else 15) if endpoints == 10_000 else (15 if quick else 40)
        timings = {"ours": [], "naive": []}
        for i in range(runs):
            order = ("ours", "naive") if i % 2 == 0 else ("naive", "ours")
            for name in order:
                timings[name].append(_time(routable_targets if name == "ours" else naive_targets, slices))
        results[endpoints] = {
            "slices": len(slices), "targets": len(expected), "runs": runs,
            "ours_s": statistics.median(timings["ours"]), "naive_s": statistics.median(timings["naive"]),
        }
    return results


# --- puller throughput (bench/puller_throughput.py's pieces, alternated with the copy) -----

def bench_puller(quick: bool, smoke: bool = False) -> dict:
    mount = common.WEIGHTS_MOUNT  # puller_throughput points it at its scratch volume: restore it
    # Shards over 50 MiB: the size from which the image's client hands a file to hf_transfer.
    mb, shards, runs = (8, 1, 1) if smoke else (240, 4, 1) if quick else (400, 4, 3)
    try:
        with tempfile.TemporaryDirectory(prefix="puller-bench-") as tmp:
            work = Path(tmp)
            files = pt.write_model_shards(work / "source", mb * 10**6, shards)
            total = sum(p.stat().st_size for p in files.values())
            with pt.HubServer(work / "hub") as hub:
                hub.commit("bench/model", dict(files))
                pt.timed_pull(hub.url, work, [])  # warm-up: page cache, imports
                pulls, copies = [], []
                for i in range(runs):
                    if i % 2 == 0:
                        pulls.append(pt.timed_pull(hub.url, work, []))
                        copies.append(pt.timed_copy(list(files.values()), work))
                    else:
                        copies.append(pt.timed_copy(list(files.values()), work))
                        pulls.append(pt.timed_pull(hub.url, work, []))
                noop = pt.timed_pull(hub.url, work, [], rerun=True)
    finally:
        common.WEIGHTS_MOUNT = mount
    megabytes = total / 10**6
    pull, copy = statistics.median(pulls), statistics.median(copies)
    return {"megabytes": megabytes, "shards": shards, "runs": runs, "pull_s": pull, "copy_s": copy,
            "noop_s": noop, "pull_mb_s": megabytes / pull, "copy_mb_s": megabytes / copy,
            "transfer_mb_s": megabytes / (pull - noop) if pull > noop else None}
