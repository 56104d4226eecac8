"""How a rendered container becomes the OCI runtime spec the image tests run it with
(scripts/images/private_containerd.py runtime_spec): Kubernetes' command/args rules against the
image's ENTRYPOINT/CMD, and the security context as rendered."""

from __future__ import annotations

import pytest

from tests.images.imagekit import private_containerd

pytestmark = pytest.mark.unit

IMAGE = {"config": {"Entrypoint": ["vllm", "serve"], "Cmd": ["--help"], "User": "2000:0",
                    "Env": ["PATH=/opt/venv/bin:/usr/bin", "HOME=/home/vllm"], "WorkingDir": "/home/vllm"}}
HARDENED = {"runAsUser": 1000, "runAsGroup": 1000, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def spec(container: dict, image: dict = IMAGE, **kwargs) -> dict:
    return private_containerd.runtime_spec(image, container, "c1", kwargs.get("binds", {}), kwargs.get("netns"),
                                           kwargs.get("field_env", {}), kwargs.get("files"))


@pytest.mark.parametrize("container, argv", [
    ({}, ["vllm", "serve", "--help"]),                                   # ENTRYPOINT + CMD
    ({"args": ["/model-store"]}, ["vllm", "serve", "/model-store"]),     # args replace CMD only
    ({"command": ["vllm", "serve"], "args": ["/m"]}, ["vllm", "serve", "/m"]),
    ({"command": ["hf"]}, ["hf"]),                                       # command drops the image's CMD too
])
def test_command_and_args_follow_kubernetes(container, argv):
    assert spec(container)["process"]["args"] == argv


def test_the_rendered_user_wins_and_the_image_user_is_the_default():
    assert spec({})["process"]["user"] == {"uid": 2000, "gid": 0}
    assert spec({"securityContext": HARDENED})["process"]["user"] == {"uid": 1000, "gid": 1000}


def test_the_hardened_context_is_applied():
    process = spec({"securityContext": HARDENED})["process"]
    assert process["capabilities"] == {"bounding": [], "effective": [], "permitted": []}
    assert process["noNewPrivileges"] is True
    assert spec({"securityContext": HARDENED})["root"]["readonly"] is True
    loose = spec({})
    assert loose["root"]["readonly"] is False and "CAP_CHOWN" in loose["process"]["capabilities"]["effective"]


def test_env_is_the_image_s_then_the_container_s_with_field_refs_and_expansion():
    container = {"env": [{"name": "HOME", "value": "/tmp"},
                         {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "args": ["--id=$(POD_NAME)"]}
    result = spec(container, field_env={"POD_NAME": "server-0"})
    env = dict(entry.split("=", 1) for entry in result["process"]["env"])
    assert env == {"PATH": "/opt/venv/bin:/usr/bin", "HOME": "/tmp", "POD_NAME": "server-0"}
    assert result["process"]["args"] == ["vllm", "serve", "--id=server-0"]
    assert result["process"]["cwd"] == "/home/vllm"


def test_volumes_are_tmpfs_or_the_given_directories(tmp_path):
    container = {"volumeMounts": [{"name": "tmp", "mountPath": "/tmp"},
                                  {"name": "weights", "mountPath": "/model-store", "readOnly": True},
                                  {"name": "dshm", "mountPath": "/dev/shm"}]}
    mounts = {m["destination"]: m for m in spec(container, binds={"weights": tmp_path})["mounts"]}
    assert mounts["/tmp"]["type"] == "tmpfs"
    assert mounts["/model-store"] == {"destination": "/model-store", "type": "bind", "source": str(tmp_path),
                                      "options": ["rbind", "ro"]}
    assert mounts["/dev/shm"]["type"] == "tmpfs"
    assert sum(1 for m in spec(container, binds={"weights": tmp_path})["mounts"] if m["destination"] == "/dev/shm") == 1
    resolv = tmp_path / "resolv.conf"
    files = {m["destination"]: m for m in spec({}, files={"/etc/resolv.conf": resolv})["mounts"]}
    assert files["/etc/resolv.conf"] == {"destination": "/etc/resolv.conf", "type": "bind", "source": str(resolv),
                                         "options": ["rbind", "ro"]}


def test_the_network_namespace_is_the_given_one_or_a_new_one():
    namespaces = {n["type"]: n for n in spec({}, netns="/var/run/netns/t1")["linux"]["namespaces"]}
    assert namespaces["network"] == {"type": "network", "path": "/var/run/netns/t1"}
    fresh = {n["type"]: n for n in spec({})["linux"]["namespaces"]}
    assert fresh["network"] == {"type": "network"}
    host = {n["type"] for n in spec({}, netns=private_containerd.HOST_NETWORK)["linux"]["namespaces"]}
    assert "network" not in host and "pid" in host


def test_a_container_with_nothing_to_run_is_refused():
    with pytest.raises(ValueError, match="no command, and the image has no ENTRYPOINT or CMD"):
        spec({"name": "x"}, image={"config": {}})
