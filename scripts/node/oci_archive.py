"""Write a one-layer OCI image archive from a directory, for `ctr images import` on the real node.

    python3 scripts/node/oci_archive.py --root DIR --name IMAGE:TAG --out FILE.tar \
        [--entrypoint JSON-LIST] [--cmd JSON-LIST] [--user UID:GID] [--env K=V ...] [--workdir DIR]

No registry and no Docker: the archive is an OCI image layout (oci-layout, index.json, blobs) in a
tar, the image named by the `io.containerd.image.name` annotation that containerd's importer reads.
The layer is deterministic (sorted entries, mtime 0, every entry owned by root, modes kept), so
the same directory gives the same digest.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path


def _layer(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(p for p in root.rglob("*"))
        for path in paths:
            rel = path.relative_to(root).as_posix()
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = 0
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def _file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def write(root: Path, name: str, out: Path, *, entrypoint: list[str] | None, cmd: list[str] | None,
          user: str, env: list[str], workdir: str) -> str:
    layer = _layer(root)
    layer_digest = "sha256:" + hashlib.sha256(layer).hexdigest()
    config: dict = {"Env": env or ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}
    if entrypoint is not None:
        config["Entrypoint"] = entrypoint
    if cmd is not None:
        config["Cmd"] = cmd
    if user:
        config["User"] = user
    if workdir:
        config["WorkingDir"] = workdir
    image_config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "llm-serving scripts/node/oci_archive.py"}],
    }, sort_keys=True).encode()
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w") as tar:
        _file(tar, "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
        config_digest = _blob(tar, image_config)
        _blob(tar, layer)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": len(image_config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": len(layer)}],
        }, sort_keys=True).encode()
        manifest_digest = _blob(tar, manifest)
        index = {"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]},
        }]}
        _file(tar, "index.json", json.dumps(index, sort_keys=True).encode())
    os.replace(tmp, out)
    return manifest_digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--entrypoint", type=json.loads)
    parser.add_argument("--cmd", type=json.loads)
    parser.add_argument("--user", default="")
    parser.add_argument("--env", action="append", default=[])
    parser.add_argument("--workdir", default="")
    args = parser.parse_args()
    if not args.root.is_dir():
        parser.error(f"--root {args.root}: not a directory")
    print(write(args.root, args.name, args.out, entrypoint=args.entrypoint, cmd=args.cmd, user=args.user,
                env=args.env, workdir=args.workdir))


if __name__ == "__main__":
    main()
