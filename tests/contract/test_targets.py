"""Routable targets from EndpointSlices (contract.targets): examples, then properties.

The properties generate a ground truth (pods, each with addresses, a node and a readiness),
scatter its endpoints over several slices (duplicated, shuffled, dual-stack), and check that
the snapshot is exactly the ready pods, whatever the slicing.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contract.targets import (
    Target,
    TargetSnapshot,
    has_router_ports,
    pods_with_ready_pylon,
    routable_targets,
    router_targets,
)


def endpoint(pod: str | None, *addresses: str, ready=True, terminating=None, node="node-a",
             kind: str = "Pod", conditions: bool = True) -> dict:
    item: dict = {"addresses": list(addresses) or ["10.0.0.1"]}
    if pod is not None:
        item["targetRef"] = {"kind": kind, "name": pod, "namespace": "llm-serving"}
    if conditions:
        item["conditions"] = {k: v for k, v in (("ready", ready), ("terminating", terminating)) if v is not None}
    if node:
        item["nodeName"] = node
    return item


def endpoint_slice(name: str, *endpoints: dict, version: str = "1", family: str = "IPv4") -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "resourceVersion": version,
                     "labels": {"kubernetes.io/service-name": "chat"}},
        "addressType": family,
        "endpoints": list(endpoints),
        "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}],
    }


# --- examples ---------------------------------------------------------------------------------

def test_ready_endpoints_become_targets_named_by_their_pod():
    snapshot = routable_targets([endpoint_slice("chat-a", endpoint("chat-0", "10.0.0.1"), endpoint("chat-1", "10.0.0.2"))])
    assert snapshot.pods == ["chat-0", "chat-1"]
    assert snapshot.targets[0] == Target("chat-0", ("10.0.0.1",), "node-a")


def test_dual_stack_slices_collapse_to_one_target_with_both_addresses():
    snapshot = routable_targets([
        endpoint_slice("chat-v4", endpoint("chat-0", "10.0.0.1")),
        endpoint_slice("chat-v6", endpoint("chat-0", "fd00::1"), family="IPv6"),
    ])
    assert snapshot.targets == (Target("chat-0", ("10.0.0.1", "fd00::1"), "node-a"),)


def test_readiness_follows_the_endpointslice_api():
    snapshot = routable_targets([endpoint_slice(
        "chat-a",
        endpoint("explicit-ready", ready=True),
        endpoint("not-ready", ready=False),
        endpoint("unknown-ready", ready=None),  # absent `ready`: the API says treat as ready
        endpoint("no-conditions", conditions=False),
        endpoint("terminating", ready=True, terminating=True),  # draining: not routable
        endpoint("terminating-false", terminating=False),
    )])
    assert snapshot.pods == ["explicit-ready", "no-conditions", "terminating-false", "unknown-ready"]


def test_endpoints_without_a_pod_are_not_targets():
    snapshot = routable_targets([endpoint_slice(
        "chat-a", endpoint(None), endpoint("external", kind="Node"), endpoint("chat-0"),
    )])
    assert snapshot.pods == ["chat-0"]


def test_empty_and_missing_endpoints():
    assert routable_targets([]) == TargetSnapshot()
    assert routable_targets([{"metadata": {"name": "x"}, "endpoints": None}]).pods == []


def test_a_vanished_endpoint_drops_its_target_and_changes_the_revision():
    before = routable_targets([endpoint_slice("chat-a", endpoint("chat-0"), endpoint("chat-1", "10.0.0.2"))])
    after = routable_targets([endpoint_slice("chat-a", endpoint("chat-0"), version="2")])
    assert after.pods == ["chat-0"]
    assert before.revision != after.revision


def test_the_revision_ignores_slice_metadata():
    one = routable_targets([endpoint_slice("chat-a", endpoint("chat-0"), version="1")])
    two = routable_targets([endpoint_slice("chat-b", endpoint("chat-0"), version="7")])
    assert one.revision == two.revision


# --- properties -------------------------------------------------------------------------------

GRPC = {"name": "grpc", "port": 50071, "protocol": "TCP"}
QUIC = {"name": "quic", "port": 50072, "protocol": "UDP"}
POD_NAMES = st.text(alphabet="abcdefghij0123456789-", min_size=1, max_size=8)
READINESS = st.sampled_from([
    # (conditions, routable)
    ({"ready": True}, True), ({}, True), (None, True), ({"ready": True, "terminating": False}, True),
    ({"ready": False}, False), ({"ready": True, "terminating": True}, False),
    ({"ready": False, "serving": True, "terminating": True}, False),
])


@st.composite
def pods(draw):
    """Ground truth: pod name → (addresses, node, routable, conditions)."""
    names = draw(st.lists(POD_NAMES, min_size=0, max_size=8, unique=True))
    truth = {}
    for index, name in enumerate(names):
        conditions, routable = draw(READINESS)
        addresses = [f"10.0.{index}.{n}" for n in range(draw(st.integers(1, 2)))]
        truth[name] = (addresses, f"node-{draw(st.integers(0, 2))}", routable, conditions)
    return truth


def _endpoint(pod: str, address: str, node: str, conditions) -> dict:
    item = {"addresses": [address], "targetRef": {"kind": "Pod", "name": pod}, "nodeName": node}
    if conditions is not None:
        item["conditions"] = dict(conditions)
    return item


@st.composite
def sliced(draw, truth):
    """Every address of every pod in at least one slice, some in several; slices shuffled."""
    count = draw(st.integers(1, 5))
    slices: list[list[dict]] = [[] for _ in range(count)]
    for pod, (addresses, node, _, conditions) in truth.items():
        for address in addresses:
            homes = draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=3))
            for home in homes:
                slices[home].append(_endpoint(pod, address, node, conditions))
    slices = [draw(st.permutations(items)) for items in slices]
    return [{"metadata": {"name": f"s{i}"}, "endpoints": list(items)} for i, items in enumerate(draw(st.permutations(slices)))]


def expected(truth) -> TargetSnapshot:
    return TargetSnapshot(tuple(sorted(
        Target(pod, tuple(sorted(addresses)), node)
        for pod, (addresses, node, routable, _) in truth.items() if routable
    )))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_snapshot_is_exactly_the_ready_pods_however_they_are_sliced(data):
    truth = data.draw(pods())
    snapshot = routable_targets(data.draw(sliced(truth)))
    assert snapshot == expected(truth)
    assert len(set(snapshot.pods)) == len(snapshot.pods)  # one target per pod
    assert snapshot.pods == sorted(snapshot.pods)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_order_of_slices_and_endpoints_does_not_matter(data):
    truth = data.draw(pods())
    one, two = data.draw(sliced(truth)), data.draw(sliced(truth))
    assert routable_targets(one) == routable_targets(two)
    assert routable_targets(one).revision == routable_targets(list(reversed(two))).revision


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_duplicating_slices_changes_nothing(data):
    slices = data.draw(sliced(data.draw(pods())))
    assert routable_targets(slices + slices) == routable_targets(slices)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_revision_changes_exactly_when_the_target_set_changes(data):
    first, second = data.draw(pods()), data.draw(pods())
    a = routable_targets(data.draw(sliced(first)))
    b = routable_targets(data.draw(sliced(second)))
    assert (a.revision == b.revision) == (set(a.targets) == set(b.targets))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_pods_whose_endpoints_vanish_drop_out(data):
    truth = data.draw(pods())
    gone = data.draw(st.sets(st.sampled_from(sorted(truth)))) if truth else set()
    remaining = {pod: facts for pod, facts in truth.items() if pod not in gone}
    snapshot = routable_targets(data.draw(sliced(remaining)))
    assert not gone & set(snapshot.pods)
    assert snapshot == expected(remaining)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_not_ready_copies_never_add_a_target(data):
    """A stale slice that still lists a pod as not ready adds nothing to the ready set."""
    truth = data.draw(pods())
    slices = data.draw(sliced(truth))
    stale = [{"metadata": {"name": "stale"}, "endpoints": [
        _endpoint(f"gone-{pod}", addresses[0], node, {"ready": False})
        for pod, (addresses, node, _, _) in truth.items()
    ]}]
    assert routable_targets(slices + stale) == expected(truth)


# --- stale copies: an older copy of a slice never overwrites a newer one ----------------------

def test_the_newest_copy_of_a_slice_wins_in_either_order():
    old = endpoint_slice("chat-a", endpoint("chat-0"), endpoint("chat-1", "10.0.0.2"), version="41")
    new = endpoint_slice("chat-a", endpoint("chat-0"), version="42")
    assert routable_targets([old, new]).pods == ["chat-0"]
    assert routable_targets([new, old]).pods == ["chat-0"]


def test_versions_compare_as_numbers_not_strings():
    old = endpoint_slice("chat-a", endpoint("chat-old"), version="9")
    new = endpoint_slice("chat-a", endpoint("chat-new"), version="10")
    assert routable_targets([new, old]).pods == ["chat-new"]


def test_copies_without_comparable_versions_go_by_arrival():
    first = endpoint_slice("chat-a", endpoint("chat-first"), version="")
    second = endpoint_slice("chat-a", endpoint("chat-second"), version="opaque")
    assert routable_targets([first, second]).pods == ["chat-second"]


def test_slices_with_the_same_name_in_other_namespaces_are_not_copies():
    one = endpoint_slice("chat-a", endpoint("chat-0"), version="5")
    other = endpoint_slice("chat-a", endpoint("chat-9"), version="1")
    other["metadata"]["namespace"] = "elsewhere"
    assert routable_targets([one, other]).pods == ["chat-0", "chat-9"]



def labelled(service: str, item: dict, ports=None) -> dict:
    item = {**item, "metadata": {**item["metadata"], "labels": {"kubernetes.io/service-name": service}}}
    if ports is not None:
        item["ports"] = ports
    return item


def pylon_pod(name: str, ready=True, deleting=False) -> dict:
    meta: dict = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"containerStatuses": [
        {"name": "server", "ready": True}, {"name": "pylon", "ready": ready}]}}


def test_router_ports_need_grpc_tcp_and_quic_udp_by_name():
    assert has_router_ports({"ports": [GRPC, QUIC]})
    assert has_router_ports({"ports": [{**GRPC, "protocol": None}, QUIC]})  # absent protocol is TCP
    assert not has_router_ports({"ports": [GRPC]})
    assert not has_router_ports({"ports": [GRPC, {**QUIC, "protocol": "TCP"}]})
    assert not has_router_ports({"ports": [GRPC, {**QUIC, "port": 0}]})


def test_pylon_readiness_ignores_pods_being_deleted_and_pods_without_pylon():
    no_pylon = {"metadata": {"name": "d"}, "status": {"containerStatuses": [{"name": "server", "ready": True}]}}
    found = pods_with_ready_pylon([pylon_pod("a"), pylon_pod("b", ready=False), pylon_pod("c", deleting=True), no_pylon])
    assert found == {"a"}


def test_router_targets_models_need_a_pylon_and_routers_come_from_the_headless_slices():
    slices = [
        labelled("m", endpoint_slice("m-1", endpoint("m-0"), endpoint("m-1", "10.0.0.2"))),
        labelled("r-headless", endpoint_slice("r-1", endpoint("r-0", "10.0.1.1"),
                                              endpoint("r-1", "10.0.1.2", terminating=True)), [GRPC, QUIC]),
        labelled("r-headless", endpoint_slice("r-2", endpoint("r-2", "10.0.1.3")), [GRPC]),
    ]
    targets = router_targets({"model": "m"}, slices, [pylon_pod("m-0"), pylon_pod("m-1", ready=False)], "r-headless")
    assert targets.by_model["model"].pods == ["m-0"]
    assert targets.routers.pods == ["r-0"]
    assert targets.reachable
    # Without pods, the model Service's own view (what the model status uses).
    assert router_targets({"model": "m"}, slices).by_model["model"].pods == ["m-0", "m-1"]
    assert not router_targets({"model": "m"}, slices).reachable  # no router Service given
