"""The verify step of a Hub source's puller (``source.type: hf``): the bytes on the volume are the
bytes the hub named.

The puller Job runs `hf download` as its init container ``puller`` (command and arguments as
before: weights.hub_container) and this check as its container ``verify``, in the same image (the
vLLM images and the local `hf` image all ship python3; nothing else is pulled onto the node).

What it checks against: huggingface_hub's download records. A ``--local-dir`` download writes, per
file, ``<dir>/.cache/huggingface/download/<path>.metadata``: three lines, the commit the hub
answered (``X-Repo-Commit``), the file's ETag, a timestamp (``_local_folder.write_download_metadata``
of 0.35.x, the pinned image's line; read in the installed client). The ETag is the hub's
``X-Linked-Etag`` or else ``ETag`` (``file_download.get_hf_file_metadata``): an LFS file's sha256,
a regular file's git blob id (sha1 of ``blob <size>\\0`` and the bytes). The client itself hashes
nothing it downloads into a local dir (it trusts the length only), so a file truncated or altered
on the way or on the disk would be served.

``verify`` refuses, with one ``llm-serving: not the hub's files:`` line naming each file and why:
a file whose bytes hash to something else (the file is removed, its record kept: the Job's next
attempt downloads it again, where `hf download` would otherwise skip a file whose record names
the pinned commit); a file with no record; a record whose ETag is neither a sha256 nor a git blob
id (a mirror that does not pass the hub's ETags through); a record from another commit than the
pinned one (a mirror that ignores the revision); a recorded file not on the volume. The exit code
is ``CORRUPTED_EXIT``, as the s3 pull step's (object_store.py). The gate and status diagnose the
line (providers/projection.py ``_SOURCE_DIAGNOSES``).

What it cannot catch: a mirror that lies consistently about a file's ETag and its bytes, and a
file of the repo that `hf download` left out without a record. Preflight's listing (its
``model_info(files_metadata=True)`` names every file, with each LFS file's sha256) would catch the
second, and a mirror whose listing and files disagree, not one that lies in both (preflight asks
the same endpoint); carrying it to the Job takes a listing in the source's config, as the s3
source has (``source.manifest``): not done (docs/weight-sources.md).

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

import re

from ..config.model import ModelConfig
from . import common, object_store

_COMMIT = re.compile(r"^[0-9a-f]{40}$")

# argv[1]: the weights dir. HF_HOME (the client's home, on the volume: not weights), HF_ENDPOINT
# (named in the refusal), LLM_SERVING_COMMIT (the pinned commit, when the revision is one).
# Standard library only, Python 3.8+ (run with -S: no site-packages are imported). Files are hashed
# on up to 8 threads (hashlib releases the GIL on large updates), 4 MiB reads.
_SCRIPT = r'''import hashlib, os, re, sys, time
from concurrent.futures import ThreadPoolExecutor

root = os.path.normpath(sys.argv[1])
records = os.path.join(root, ".cache", "huggingface", "download")
# Not weights: the client's records, its home, a fresh ext4 volume's lost+found (root's alone).
skipped = {os.path.join(root, ".cache", "huggingface"), os.path.join(root, "lost+found")}
home = os.environ.get("HF_HOME", "")
if home:
    skipped.add(os.path.normpath(home))
commit = os.environ.get("LLM_SERVING_COMMIT", "")
endpoint = os.environ.get("HF_ENDPOINT", "the hub")
SHA256, BLOB = re.compile("^[0-9a-f]{64}$"), re.compile("^[0-9a-f]{40}$")
started = time.monotonic()


def walk(top, keep):
    found = {}
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in skipped]
        for name in files:
            path = os.path.join(folder, name)
            if keep(name):
                found[os.path.relpath(path, top)] = path
    return found


on_volume = walk(root, lambda name: True)
recorded = {}
for name, path in walk(records, lambda name: name.endswith(".metadata")).items():
    with open(path, encoding="utf-8", errors="replace") as handle:
        recorded[name[:-len(".metadata")]] = [line.strip() for line in handle.read().splitlines()]
if not on_volume and not recorded:
    print("llm-serving: missing: every file (the download left nothing in %s)" % root, file=sys.stderr)
    sys.exit(INCOMPLETE)


def digest(path, etag):
    kind = hashlib.sha256() if SHA256.match(etag) else hashlib.sha1()
    if kind.name == "sha1":
        kind.update(b"blob %d\0" % os.path.getsize(path))
    buffer = bytearray(4 << 20)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buffer)
            if not count:
                break
            kind.update(view[:count])
    return kind.name, kind.hexdigest()


def check(name):
    record = recorded.get(name)
    if name not in on_volume:
        return name, "recorded, not on the volume", None
    if record is None:
        return name, "no download record", None
    if len(record) < 2:
        return name, "unreadable download record", None
    got_commit, etag = record[0], record[1]
    if commit and got_commit != commit:
        return name, "downloaded from commit %s, not the pinned %s" % (got_commit[:12], commit[:12]), None
    if not (SHA256.match(etag) or BLOB.match(etag)):
        return name, "the hub's ETag %r is no sha256 nor git blob id" % etag[:70], None
    try:
        kind, got = digest(on_volume[name], etag)
        size = os.path.getsize(on_volume[name])
        if got == etag:
            return name, None, size
        what = "sha256" if kind == "sha256" else "git blob id"
        print("%s: %s of its %d bytes is %s, the hub's %s" % (name, what, size, got, etag), file=sys.stderr)
        os.remove(on_volume[name])
    except OSError as error:
        return name, "unreadable: %s" % (error.strerror or error), None
    return name, "its %d bytes are not the hub's %s, removed" % (size, what), None


try:
    workers = len(os.sched_getaffinity(0))
except AttributeError:
    workers = os.cpu_count() or 1
with ThreadPoolExecutor(max_workers=max(1, min(8, workers))) as pool:
    results = list(pool.map(check, sorted(set(on_volume) | set(recorded))))
bad = [(name, why) for name, why, _ in results if why]
if bad:
    for name, why in bad:
        print("%s: %s" % (name, why), file=sys.stderr)
    shown = " ".join("%s(%s)" % item for item in bad[:8])
    more = " and %d more (the lines above)" % (len(bad) - 8) if len(bad) > 8 else ""
    print("llm-serving: not the hub's files: %s%s; run `pulumi up` again to re-pull them; if they "
          "fail again, check that %s serves them and their ETags unaltered" % (shown, more, endpoint),
          file=sys.stderr)
    sys.exit(CORRUPTED)
total = sum(size for _, _, size in results)
seconds = time.monotonic() - started
print("llm-serving: verified %d files (%d bytes) in %s against the hub's records%s in %.1f s" % (
    len(results), total, root, " of commit " + commit if commit else "", seconds))
'''
# The exit codes of the s3 pull and verify steps (the Job's pod failure policy and status read them).
VERIFY_SCRIPT = (f"CORRUPTED, INCOMPLETE = {object_store.CORRUPTED_EXIT}, {object_store.INCOMPLETE_EXIT}\n"
                 + _SCRIPT)
# The script travels as the container's arguments, one line each, after the weights dir; the
# command joins and runs them. As one string it would be a YAML double-quoted scalar, which
# libyaml and PyYAML's own emitter fold at different places (`render` uses the first, the golden
# files the second: tests/cli/test_cli.py wants the same bytes), and a line per item reads better
# in the manifest too.
BOOT = r'import sys; exec("\n".join(sys.argv[2:]))'
SCRIPT_LINES = tuple(VERIFY_SCRIPT.rstrip("\n").split("\n"))


def verify_env(model: ModelConfig, hf_home: str, endpoint: str) -> list[dict]:
    env = [
        {"name": "HF_HOME", "value": hf_home},
        {"name": "HF_ENDPOINT", "value": endpoint},
        {"name": "HOME", "value": common.TMP_MOUNT},
    ]
    if _COMMIT.match(model.source.revision):
        env.append({"name": "LLM_SERVING_COMMIT", "value": model.source.revision})
    return env


def verify_container(image: str, env: list[dict], ident: common.Identity) -> dict:
    """The Job's ``verify`` container: the volume read-write (it removes a file that differs)."""
    return {
        "name": "verify",
        "image": image,
        # -S: no site-packages (the vLLM image's are many; the script needs the standard library).
        "command": ["python3", "-S", "-c", BOOT],
        "args": [common.WEIGHTS_MOUNT, *SCRIPT_LINES],
        "env": env,
        "volumeMounts": [{"name": "weights", "mountPath": common.WEIGHTS_MOUNT}, common.tmp_volume()[1]],
        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": common.container_security_context(ident, read_only_root=True),
        # A refusal's last line (the files) becomes the termination message the gate shows.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
