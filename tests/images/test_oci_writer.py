"""The OCI writer (scripts/images/oci.py): the same tree gives the same bytes, the layer holds the
tree as it is (names, modes, owners, links), and the layout is what `ctr images import` reads."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile

import pytest

from tests.images.imagekit import oci

pytestmark = pytest.mark.unit


def make_tree(root, mtime: int = 1_700_000_000):
    (root / "etc").mkdir(parents=True)
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "home" / "vllm").mkdir(parents=True)
    (root / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    tool = root / "usr" / "bin" / "tool"
    tool.write_bytes(b"#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    os.link(tool, root / "usr" / "bin" / "tool-again")
    (root / "bin").symlink_to("usr/bin")
    os.chown(root / "home" / "vllm", 2000, 0)
    for path in [root, *root.rglob("*")]:
        os.utime(path, (mtime, mtime), follow_symlinks=False)
    return root


def layer_members(layout, layer):
    blob = layout / "blobs" / "sha256" / layer.digest.split(":")[1]
    with tarfile.open(blob, "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}, blob


def build(tmp_path, tree, name="layout", names=("docker.io/library/x:1",), config=None):
    layout = tmp_path / name
    layer = oci.write_layer(tree, layout / "blobs" / "sha256", epoch=42)
    image = oci.write_image(layout, layer, config or {"Entrypoint": ["tool"], "User": "2000:0"}, list(names), epoch=42)
    return layout, layer, image


def test_the_same_tree_gives_the_same_digests_whatever_its_mtimes(tmp_path):
    first = make_tree(tmp_path / "a", mtime=1_600_000_000)
    second = make_tree(tmp_path / "b", mtime=1_700_000_000)
    _, layer_a, image_a = build(tmp_path, first, "la")
    _, layer_b, image_b = build(tmp_path, second, "lb")
    assert layer_a == layer_b
    assert image_a.manifest_digest == image_b.manifest_digest


def test_a_changed_file_changes_the_layer(tmp_path):
    tree = make_tree(tmp_path / "a")
    _, before, _ = build(tmp_path, tree, "l1")
    (tree / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\nvllm:x:2000:0::/home/vllm:/bin/sh\n")
    _, after, _ = build(tmp_path, tree, "l2")
    assert before.digest != after.digest and before.diff_id != after.diff_id


def test_the_layer_holds_the_tree_as_it_is(tmp_path):
    layout, layer, _ = build(tmp_path, make_tree(tmp_path / "a"))
    members, blob = layer_members(layout, layer)
    assert set(members) == {"bin", "etc", "etc/passwd", "home", "home/vllm", "usr", "usr/bin",
                            "usr/bin/tool", "usr/bin/tool-again"}
    assert members["bin"].issym() and members["bin"].linkname == "usr/bin"
    tool, again = members["usr/bin/tool"], members["usr/bin/tool-again"]
    assert tool.isreg() and tool.mode & 0o777 == 0o755
    assert again.islnk() and again.linkname == "usr/bin/tool"  # a hard link stays one (no second copy)
    assert (members["home/vllm"].uid, members["home/vllm"].gid) == (2000, 0)
    assert all(m.mtime == 42 and m.uname == "" and m.gname == "" for m in members.values())
    # Parents come before their children (a tar extractor creates directories as it goes).
    names = [m.name for m in tarfile.open(blob, "r:gz").getmembers()]
    assert names.index("usr") < names.index("usr/bin") < names.index("usr/bin/tool")


def test_digests_are_of_the_bytes(tmp_path):
    layout, layer, image = build(tmp_path, make_tree(tmp_path / "a"))
    blobs = layout / "blobs" / "sha256"
    blob = (blobs / layer.digest.split(":")[1]).read_bytes()
    assert hashlib.sha256(blob).hexdigest() == layer.digest.split(":")[1]
    assert len(blob) == layer.size
    assert hashlib.sha256(gzip.decompress(blob)).hexdigest() == layer.diff_id.split(":")[1]
    assert blob[4:8] == b"\0\0\0\0"  # gzip header mtime: none
    for digest in (image.manifest_digest, image.config_digest):
        data = (blobs / digest.split(":")[1]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest.split(":")[1]


def test_index_config_and_manifest_are_what_containerd_reads(tmp_path):
    names = ("docker.io/library/nginx:1.26.3", "localhost/llm-serving/nginx:1.26.3-njs0.8.9")
    layout, layer, image = build(tmp_path, make_tree(tmp_path / "a"), names=names,
                                 config={"Cmd": ["nginx", "-g", "daemon off;"], "StopSignal": "SIGQUIT"})
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert [m["annotations"]["io.containerd.image.name"] for m in index["manifests"]] == list(names)
    assert [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]] == \
        ["1.26.3", "1.26.3-njs0.8.9"]
    assert {m["digest"] for m in index["manifests"]} == {image.manifest_digest}
    read = oci.read_image(layout)
    assert read["names"] == list(names)
    assert read["manifest"]["layers"] == [{"mediaType": oci.MEDIA_LAYER_GZIP, "digest": layer.digest, "size": layer.size}]
    config = read["config"]
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer.diff_id]}
    assert config["config"]["Cmd"] == ["nginx", "-g", "daemon off;"]
    assert (config["os"], config["architecture"], config["created"]) == ("linux", "amd64", "1970-01-01T00:00:42Z")


def test_a_rewritten_image_leaves_no_stale_blobs(tmp_path):
    tree = make_tree(tmp_path / "a")
    layout, _, _ = build(tmp_path, tree, config={"Cmd": ["one"]})
    layer = oci.write_layer(tree, layout / "blobs" / "sha256", epoch=42)
    image = oci.write_image(layout, layer, {"Cmd": ["two"]}, ["docker.io/library/x:1"], epoch=42)
    held = {p.name for p in (layout / "blobs" / "sha256").iterdir()}
    assert held == {d.split(":")[1] for d in (image.manifest_digest, image.config_digest, layer.digest)}


def test_the_archive_is_the_layout_as_a_tar(tmp_path):
    layout, layer, image = build(tmp_path, make_tree(tmp_path / "a"))
    out = io.BytesIO()
    oci.archive(layout, out)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue())) as tar:
        names = tar.getnames()
        assert names[:2] == ["blobs", "blobs/sha256"] and "oci-layout" in names and "index.json" in names
        for digest in (layer.digest, image.manifest_digest, image.config_digest):
            member = f"blobs/sha256/{digest.split(':')[1]}"
            assert tar.extractfile(member).read() == (layout / member).read_bytes()
    again = io.BytesIO()
    oci.archive(layout, again)
    assert again.getvalue() == out.getvalue()


@pytest.mark.parametrize("config, message", [
    ({"Entrypiont": ["x"]}, "unknown field(s) Entrypiont"),
    ({"Entrypoint": "vllm serve"}, "Entrypoint must be a list of strings"),
    ({"Env": ["PATH"]}, "Env entry 'PATH' is not NAME=value"),
])
def test_a_bad_config_is_refused_before_anything_is_written(tmp_path, config, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        oci.check_config(config)


@pytest.mark.parametrize("name", ["busybox:1.37.0", "docker.io/library/busybox", "library/busybox:1",
                                  "docker.io/library/busybox:"])
def test_a_name_must_be_fully_qualified_with_a_tag(name):
    with pytest.raises(ValueError, match="not fully qualified with a tag"):
        oci.check_name(name)


@pytest.mark.parametrize("name", ["docker.io/library/busybox:1.37.0", "localhost/llm-serving/hf:0.35.3",
                                  "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0", "registry.local:5000/a/b:1"])
def test_qualified_names_pass(name):
    assert oci.check_name(name) is None


def test_the_cli_builds_and_archives(tmp_path, capsys):
    tree = make_tree(tmp_path / "a")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"Entrypoint": ["tool"]}))
    assert oci.main(["build", "--rootfs", str(tree), "--out", str(tmp_path / "out"), "--config", str(config),
                     "--name", "localhost/t/tool:1", "--epoch", "42"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert oci.read_image(tmp_path / "out")["manifest_digest"] == printed["manifest"]
    with pytest.raises(SystemExit):
        oci.main(["build", "--rootfs", str(tmp_path / "missing"), "--out", str(tmp_path / "o2"),
                  "--config", str(config), "--name", "localhost/t/tool:1"])
