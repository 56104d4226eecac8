"""A kubeconfig given as content (a library user's, components/resources/cluster_access.py)
reaches the cluster it names, whatever this machine's KUBECONFIG says, and leaves no file."""

from __future__ import annotations

import os
import tempfile

import pytest
import yaml

from contract.props import ClusterTarget, GateProps
from providers import kube


def _content(server: str, context: str = "team") -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}},
                     {"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "x"}}],
    })


def test_the_content_wins_over_the_path_and_the_ambient_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    target = ClusterTarget("/nowhere/kubeconfig", "", _content("https://10.4.5.6:6443")).kube()
    before = set(os.listdir(tempfile.gettempdir()))
    clients = kube.connect(target)
    assert clients.core.api_client.configuration.host == "https://10.4.5.6:6443"
    leftovers = [n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("llm-serving-kubeconfig-")]
    assert leftovers == [], "the private copy of the content is removed once read"


def test_a_context_named_beside_the_content_is_the_one_read():
    target = ClusterTarget("", "other", _content("https://10.4.5.6:6443")).kube()
    assert kube.connect(target).core.api_client.configuration.host == "https://10.4.5.6:6443"


def test_unusable_content_is_refused_naming_the_argument():
    with pytest.raises(kube.NoClusterConfig, match="kubeconfig content the program passed is unusable.*kubeconfig_content"):
        kube.connect(ClusterTarget("", "", "apiVersion: v1\nkind: Config\n").kube())


def test_the_content_travels_in_the_props_only_when_given():
    plain = GateProps("ns", "chat", "chat-weights", "chat-puller", cluster=ClusterTarget("/k", "ctx")).to_dict()
    assert "kubeconfig_data" not in plain
    given = GateProps("ns", "chat", "chat-weights", "chat-puller", cluster=ClusterTarget("/k", "ctx", "DATA"))
    assert given.to_dict()["kubeconfig_data"] == "DATA"
    assert GateProps.from_dict(given.to_dict()).cluster.kube() == kube.Target("/k", "ctx", "DATA")
