"""A one-layer OCI image written from a directory, with the Python standard library only.

No Docker, no registry, no third-party package: the image builders (scripts/images/build.sh) lay a
root filesystem out in a directory, and this module turns it into an OCI image layout (the
directory form of the OCI image spec: ``oci-layout``, ``index.json``, ``blobs/sha256/...``) that
``ctr images import`` reads from a tar stream (``archive``). The same directory always gives the
same bytes: entries in name order, every mtime the given epoch, no user or group names (only the
numeric ids the directory has), gzip without a timestamp or file name, JSON with sorted keys. So
the digests are a function of the content and the image config alone.

    python3 oci.py build --rootfs DIR --out LAYOUT --config CONFIG.json --name REF [--name REF2]
    python3 oci.py archive LAYOUT > image.tar      (or piped straight into `ctr images import -`)

CONFIG.json is the image config's ``config`` object (Entrypoint, Cmd, Env, User, WorkingDir,
Labels), as the OCI image spec names its fields. Each ``--name`` becomes one entry of index.json,
annotated with ``io.containerd.image.name`` (the name containerd gives the image on import) and
``org.opencontainers.image.ref.name`` (its tag).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"
# The image config fields the spec defines for `config`; anything else is a typo to refuse.
CONFIG_FIELDS = {"User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
                 "StopSignal"}
CHUNK = 1 << 20


@dataclass(frozen=True)
class Layer:
    digest: str   # sha256 of the compressed blob: its name under blobs/ and the manifest's reference
    diff_id: str  # sha256 of the uncompressed tar: the config's rootfs.diff_ids entry
    size: int     # bytes of the compressed blob


@dataclass(frozen=True)
class Image:
    manifest_digest: str
    manifest_size: int
    config_digest: str
    layer: Layer


class _Hashing:
    """A write-only file that hashes and counts what passes through to ``sink``."""

    def __init__(self, sink: BinaryIO):
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)

    def flush(self) -> None:
        self.sink.flush()


def canonical(value: object) -> bytes:
    """The JSON bytes a digest is taken of: sorted keys, no spaces (the same object, the same digest)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _walk(root: Path) -> Iterable[tuple[Path, str]]:
    """Every path under ``root`` (not ``root`` itself) with its name in the archive, parents
    before children, siblings in byte order of their names (independent of the file system's)."""
    stack = [(root, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as entries:
            names = sorted((entry.name for entry in entries), key=os.fsencode)
        children = []
        for name in names:
            path = directory / name
            arcname = f"{prefix}{name}"
            yield path, arcname
            if path.is_dir() and not path.is_symlink():
                children.append((path, f"{arcname}/"))
        stack.extend(reversed(children))


def _tarinfo(tar: tarfile.TarFile, path: Path, arcname: str, epoch: int) -> Optional[tarfile.TarInfo]:
    info = tar.gettarinfo(str(path), arcname)
    if info is None:  # a socket: nothing an image can carry
        return None
    info.mtime = epoch
    info.uname = info.gname = ""
    if info.isdir():
        info.name = arcname  # tarfile adds no trailing slash itself
    return info


def write_layer(rootfs: Path, blobs: Path, epoch: int = 0, level: int = 6) -> Layer:
    """The gzip-compressed tar of ``rootfs``'s contents, written once into ``blobs`` (the
    layout's ``blobs/sha256``) under its own digest. Hard links inside the tree stay hard links;
    owners and modes are the tree's own (lay the tree out as the image must have it)."""
    rootfs = Path(rootfs)
    if not rootfs.is_dir():
        raise FileNotFoundError(f"no directory at {rootfs}")
    blobs.mkdir(parents=True, exist_ok=True)
    partial = blobs / f".layer-{os.getpid()}.partial"
    try:
        with open(partial, "wb") as raw:
            compressed = _Hashing(raw)
            # mtime=0 and no file name: the gzip header carries nothing that varies between builds.
            with gzip.GzipFile(filename="", mode="wb", compresslevel=level, fileobj=compressed, mtime=0) as gz:
                uncompressed = _Hashing(gz)
                with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    for path, arcname in _walk(rootfs):
                        info = _tarinfo(tar, path, arcname, epoch)
                        if info is None:
                            continue
                        if info.isreg():
                            with open(path, "rb") as source:
                                tar.addfile(info, source)
                        else:
                            tar.addfile(info)
        digest = compressed.sha.hexdigest()
        os.replace(partial, blobs / digest)
    finally:
        partial.unlink(missing_ok=True)
    return Layer(digest=f"sha256:{digest}", diff_id=f"sha256:{uncompressed.sha.hexdigest()}",
                 size=compressed.size)


def _put_blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    target = blobs / digest
    if not target.exists():
        partial = blobs / f".{digest}.partial"
        partial.write_bytes(data)
        os.replace(partial, target)
    return f"sha256:{digest}", len(data)


def _rfc3339(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def check_config(config: dict) -> None:
    unknown = sorted(set(config) - CONFIG_FIELDS)
    if unknown:
        raise ValueError(f"image config: unknown field(s) {', '.join(unknown)}; the OCI image spec's "
                         f"are {', '.join(sorted(CONFIG_FIELDS))}")
    for field in ("Entrypoint", "Cmd", "Env"):
        value = config.get(field)
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)):
            raise ValueError(f"image config: {field} must be a list of strings, not {value!r}")
    for entry in config.get("Env") or []:
        if "=" not in entry:
            raise ValueError(f"image config: Env entry {entry!r} is not NAME=value")


def check_name(name: str) -> None:
    """A fully qualified reference with a tag: host/path:tag (what the compilers render)."""
    head, _, tag = name.rpartition(":")
    host = head.split("/", 1)[0]
    if not tag or "/" in tag or "/" not in head or ("." not in host and ":" not in host and host != "localhost"):
        raise ValueError(f"image name {name!r} is not fully qualified with a tag (write e.g. "
                         "'docker.io/library/busybox:1.37.0')")


def write_image(layout: Path, layer: Layer, config: dict, names: list[str], epoch: int = 0,
                history: str = "", annotations: Optional[dict[str, str]] = None) -> Image:
    """Config, manifest, index.json and oci-layout around ``layer`` (already in the layout's
    blobs). ``names``: the references the image is imported as (one index entry each)."""
    check_config(config)
    if not names:
        raise ValueError("an image needs at least one name")
    for name in names:
        check_name(name)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    if not (blobs / layer.digest.split(":", 1)[1]).is_file():
        raise FileNotFoundError(f"layer {layer.digest} is not in {blobs}")
    created = _rfc3339(epoch)
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [{"created": created, "created_by": history or "scripts/images/oci.py"}],
    }
    config_digest, config_size = _put_blob(blobs, canonical(image_config))
    manifest: dict = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": MEDIA_LAYER_GZIP, "digest": layer.digest, "size": layer.size}],
    }
    if annotations:
        manifest["annotations"] = dict(annotations)
    manifest_digest, manifest_size = _put_blob(blobs, canonical(manifest))
    index = {
        "schemaVersion": 2,
        "mediaType": MEDIA_INDEX,
        "manifests": [
            {"mediaType": MEDIA_MANIFEST, "digest": manifest_digest, "size": manifest_size,
             "platform": {"architecture": "amd64", "os": "linux"},
             "annotations": {CONTAINERD_NAME: name, REF_NAME: name.rpartition(":")[2]}}
            for name in names
        ],
    }
    (layout / "index.json").write_bytes(canonical(index))
    (layout / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
    # Blobs no longer referenced (an earlier config or manifest of this layout) would only cost disk.
    keep = {d.split(":", 1)[1] for d in (manifest_digest, config_digest, layer.digest)}
    for blob in blobs.iterdir():
        if blob.name not in keep and not blob.name.startswith("."):
            blob.unlink()
    return Image(manifest_digest=manifest_digest, manifest_size=manifest_size,
                 config_digest=config_digest, layer=layer)


def archive(layout: Path, out: BinaryIO) -> None:
    """The layout as an (uncompressed) tar stream, the form ``ctr images import`` reads: written
    straight to ``out`` (e.g. a pipe to ctr), so no second copy of the layer lands on disk."""
    layout = Path(layout)
    for required in ("oci-layout", "index.json"):
        if not (layout / required).is_file():
            raise FileNotFoundError(f"{layout} is not an OCI layout (no {required})")
    members = ["oci-layout", "index.json"] + [
        f"blobs/sha256/{blob.name}" for blob in sorted((layout / "blobs" / "sha256").iterdir())
        if not blob.name.startswith(".")]
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name in members:
            path = layout / name
            info = tarfile.TarInfo(name)
            info.size, info.mode = path.stat().st_size, 0o644
            with open(path, "rb") as source:
                tar.addfile(info, source)


def read_image(layout: Path) -> dict:
    """The layout's names, manifest and config (for checks and provenance)."""
    layout = Path(layout)
    index = json.loads((layout / "index.json").read_bytes())
    blobs = layout / "blobs" / "sha256"
    manifest_digest = index["manifests"][0]["digest"]
    manifest = json.loads((blobs / manifest_digest.split(":", 1)[1]).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"].split(":", 1)[1]).read_bytes())
    return {"names": [m["annotations"][CONTAINERD_NAME] for m in index["manifests"]],
            "manifest_digest": manifest_digest, "manifest": manifest, "config": config}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="write a one-layer OCI layout from a directory")
    build.add_argument("--rootfs", required=True, type=Path)
    build.add_argument("--out", required=True, type=Path, help="the layout directory (created)")
    build.add_argument("--config", required=True, type=Path, help="JSON: the image config's `config` object")
    build.add_argument("--name", action="append", required=True, help="a fully qualified name:tag (repeatable)")
    build.add_argument("--epoch", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "0")),
                       help="every mtime and the `created` time (default: SOURCE_DATE_EPOCH or 0)")
    build.add_argument("--level", type=int, default=6, help="gzip level (1 fastest .. 9 smallest)")
    build.add_argument("--history", default="", help="the config history's created_by")
    build.add_argument("--annotation", action="append", default=[], help="KEY=VALUE on the manifest")
    arch = sub.add_parser("archive", help="write the layout as a tar stream to stdout")
    arch.add_argument("layout", type=Path)
    args = parser.parse_args(argv)
    if args.command == "archive":
        archive(args.layout, sys.stdout.buffer)
        return 0
    if not args.rootfs.is_dir():
        parser.error(f"no directory at {args.rootfs}")
    config = json.loads(args.config.read_text())
    check_config(config)  # before the (long) layer: a typo fails at once
    for name in args.name:
        check_name(name)
    annotations = dict(a.split("=", 1) for a in args.annotation)
    layer = write_layer(args.rootfs, args.out / "blobs" / "sha256", epoch=args.epoch, level=args.level)
    image = write_image(args.out, layer, config, args.name, epoch=args.epoch, history=args.history,
                        annotations=annotations)
    print(json.dumps({"manifest": image.manifest_digest, "config": image.config_digest,
                      "layer": layer.digest, "diff_id": layer.diff_id, "layer_size": layer.size}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
