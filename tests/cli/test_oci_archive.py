"""scripts/node/oci_archive.py: the OCI archives the real node imports (its pause and check images).

containerd's importer reads the image's name from the index annotation and picks the manifest by
platform; the layer must hold the directory's files with their modes; and the same directory must
give the same digest (the real node's images are rebuilt only when their sources change).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("oci_archive", REPO / "scripts" / "node" / "oci_archive.py")
oci_archive = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oci_archive)


def make_root(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    tool = root / "bin" / "tool"
    tool.write_bytes(b"#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    (root / "bin" / "alias").symlink_to("tool")
    (root / "www").mkdir()
    (root / "www" / "index.html").write_text("hello\n")
    return root


def write(root: Path, out: Path) -> str:
    return oci_archive.write(root, "llm-serving.local/check:1", out, entrypoint=["/bin/tool"], cmd=["x"],
                             user="1000:1000", env=[], workdir="/www")


def read_blob(tar: tarfile.TarFile, digest: str) -> bytes:
    data = tar.extractfile(f"blobs/sha256/{digest.split(':', 1)[1]}").read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def test_the_archive_names_the_image_and_holds_the_directory(tmp_path):
    root = make_root(tmp_path / "root")
    out = tmp_path / "image.tar"
    digest = write(root, out)
    with tarfile.open(out) as tar:
        assert json.loads(tar.extractfile("oci-layout").read()) == {"imageLayoutVersion": "1.0.0"}
        (entry,) = json.loads(tar.extractfile("index.json").read())["manifests"]
        assert entry["digest"] == digest
        assert entry["annotations"]["io.containerd.image.name"] == "llm-serving.local/check:1"
        assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
        manifest = json.loads(read_blob(tar, digest))
        config = json.loads(read_blob(tar, manifest["config"]["digest"]))
        assert config["config"]["Entrypoint"] == ["/bin/tool"] and config["config"]["User"] == "1000:1000"
        (layer_ref,) = manifest["layers"]
        layer = read_blob(tar, layer_ref["digest"])
        assert config["rootfs"]["diff_ids"] == [layer_ref["digest"]]
    with tarfile.open(fileobj=io.BytesIO(layer)) as files:
        members = {m.name: m for m in files.getmembers()}
        assert set(members) == {"bin", "bin/tool", "bin/alias", "www", "www/index.html"}
        assert members["bin/tool"].mode & 0o777 == 0o755 and members["bin/alias"].linkname == "tool"
        assert all(m.uid == 0 and m.gid == 0 and m.mtime == 0 for m in members.values())
        assert files.extractfile("www/index.html").read() == b"hello\n"


def test_the_same_directory_gives_the_same_digest(tmp_path):
    root = make_root(tmp_path / "root")
    first = write(root, tmp_path / "a.tar")
    (root / "www" / "index.html").touch()  # a newer mtime only
    assert write(root, tmp_path / "b.tar") == first
    (root / "www" / "index.html").write_text("changed\n")
    assert write(root, tmp_path / "c.tar") != first
