"""The puller of the object-store and existing-volume sources (``source.type`` s3 / pvc).

s3: the puller Job's init container ``pull`` copies ``bucket/prefix`` onto the weights volume with
rclone (the image ``sources.RCLONE_IMAGE``), in parallel (``copy_flags``); its container
``verify`` then checks the volume. pvc: no pull, only ``verify`` (the claim mounted read-only).

``verify`` refuses, with one ``llm-serving:`` line naming the keys, a volume that misses a file
or holds one of another size than expected; for s3 it also refuses when the store's MD5 ETags
differ from the ones preview listed (the copy is not what preview saw). ``pull`` checks the bytes:
rclone the MD5 of one-part objects and of multipart ones carrying rclone's own MD5, the script
after it the multipart ETag of the other multipart objects (part size from preview). The expected list is
preview's listing (``source.manifest``) or, for pvc, ``expectFiles`` plus the shards the volume's
``model.safetensors.index.json`` names. The gate (providers/gate.py) reports those lines.

Both containers run ``sh -c <script> <name> <args>`` in the rclone image (Alpine: busybox sh and
stat), so the tests run the very same command line with the rclone binary built from the module
proxy. rclone reads its remote ``src`` from ``RCLONE_CONFIG_SRC_*`` variables: no config file.
Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

import re
from typing import Optional

from ..config.model import ModelConfig
from ..config.platform import PlatformConfig
from ..config.sources import RCLONE_IMAGE, PvcSource, S3Source
from . import common

REMOTE = "src"
# Parallelism of the copy, tuned with bench/s3_puller_throughput.py against a plain parallel copy
# (docs/weight-sources.md): 16 files in flight, and a file of 64 MiB or more (safetensors shards)
# in up to 8 parallel ranged streams of 64 MiB chunks written in place. No read-ahead buffer
# (--buffer-size=0): with ranged streams it is one more copy of every byte, and the sweep ran
# 2-3x faster without it.
#
# rclone checks every object's MD5 (its ETag, or the uploader's x-amz-meta-md5chksum) before it
# gives the file its name. A file copied in one stream is hashed as it is written; a file copied
# in ranged streams is read back from the page cache and hashed after its last chunk (rclone
# v1.76.0 fs/operations/copy.go verify, backend/local Hash). MD5 is most of the puller's CPU
# (~1.6 ns a byte), so ranged streams are used only to fill the 16 slots: preview's listing says
# how many large files there are (``copy_flags``); with 16 or more, each comes in one stream.
TRANSFERS = 16
LARGE_OBJECT_BYTES = 64 << 20  # --multi-thread-cutoff
MAX_STREAMS = 8
COPY_FLAGS = (
    f"--transfers={TRANSFERS}",
    "--checkers=16",
    f"--multi-thread-streams={MAX_STREAMS}",
    "--multi-thread-cutoff=64M",
    "--multi-thread-chunk-size=64M",
    "--buffer-size=0",
    "--fast-list",
    # A cut connection: rclone re-opens the object at the offset it reached (low-level retries),
    # then whole-run retries skip every file already complete.
    "--low-level-retries=20",
    "--retries=3",
    "--stats=30s",
    "--stats-one-line",
    "--stats-log-level=NOTICE",
)
# Exit codes of the scripts' own refusals (rclone's own are 1-9).
SOURCE_CHANGED_EXIT = 42
INCOMPLETE_EXIT = 43
CORRUPTED_EXIT = 44  # a multipart object's copy is not its ETag: the file removed, the Job retries
# The store no longer holds what preview listed: another attempt copies the same refusal, so the
# Job fails at once instead of retrying twice (a missing key, 43, is retried: the next attempt's
# copy fetches what an interrupted one left out).
FAILURE_POLICY = {"rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [SOURCE_CHANGED_EXIT]}}]}

# $1: the remote path, $2: the weights dir; then rclone's flags. LLM_SERVING_KEYS (preview's
# keys, one a line) restricts the copy to exactly them; LLM_SERVING_MD5SUMS (md5  key lines, the
# objects whose ETag is an MD5) is checked against the store before anything is copied;
# LLM_SERVING_PARTS (`part size<TAB>ETag<TAB>key` lines: multipart objects preview read a part
# size for) are hashed after the copy (``part_lines``).
_PULL_CHECK = r"""set -eu
src=$1 dest=$2; shift 2
if [ -n "${LLM_SERVING_MD5SUMS:-}" ]; then
  printf '%s\n' "$LLM_SERVING_MD5SUMS" > /tmp/expected.md5
  if ! rclone checksum md5 /tmp/expected.md5 "$src" --one-way --log-level ERROR 2> /tmp/check.log; then
    cat /tmp/check.log >&2
    echo "llm-serving: source changed since preview:$(sed -n 's/^.*ERROR : \([^:]*\): .*$/ \1/p' /tmp/check.log | sort -u | tr -d '\n')" >&2
    exit 42
  fi
fi
"""
PULL_SCRIPT = _PULL_CHECK + r"""if [ -n "${LLM_SERVING_KEYS:-}" ]; then
  printf '%s\n' "$LLM_SERVING_KEYS" > /tmp/keys
  set -- --files-from-raw /tmp/keys "$@"
fi
exec rclone copy "$src" "$dest" "$@"
"""
# With LLM_SERVING_PARTS (multipart objects preview read a part size for): the copy in two
# groups, then their multipart ETags recomputed. A script of its own so that every other Job
# renders exactly as before.
PULL_PARTS_SCRIPT = _PULL_CHECK + r"""printf '%s\n' "$LLM_SERVING_KEYS" > /tmp/keys
# The objects checked below have no MD5 for rclone to check: copied apart with --ignore-checksum
# (rclone would hash a file it copies in one stream all the same, for nothing); the others first.
printf '%s\n' "$LLM_SERVING_PARTS" | cut -f3 > /tmp/keys-parts
grep -vxF -f /tmp/keys-parts /tmp/keys > /tmp/keys-rest || true
[ ! -s /tmp/keys-rest ] || rclone copy "$src" "$dest" --files-from-raw /tmp/keys-rest "$@"
rclone copy "$src" "$dest" --files-from-raw /tmp/keys-parts --ignore-checksum "$@"
# Objects uploaded in parts without an MD5 rclone can check: their ETag <md5>-<n> is the MD5 of
# the n parts' binary MD5s. Recompute it from the copy, part by part (1 MiB reads), as many files
# at once as there are CPUs (at most 8); a file that differs is removed, so the Job's next attempt
# fetches it again.
check_parts() {
  size=$(stat -c %s "$dest/$3") i=0
  n=$(( (size + $1 - 1) / $1 ))
  esc=$(while [ "$i" -lt "$n" ]; do
      dd if="$dest/$3" bs=1048576 iflag=skip_bytes,count_bytes skip=$((i * $1)) count="$1" 2>/dev/null | md5sum
      i=$((i + 1))
    done | awk 'BEGIN { for (d = 0; d < 16; d++) v[substr("0123456789abcdef", d + 1, 1)] = d }
      { for (j = 1; j < 32; j += 2) printf "\\%03o", v[substr($1, j, 1)] * 16 + v[substr($1, j + 1, 1)] }')
  got="$(printf "$esc" | md5sum | cut -c1-32)-$n"
  if [ "$got" != "$2" ]; then
    echo "$3: multipart ETag of the copy $got, the store's $2" >&2
    rm -f "$dest/$3"
    echo "$3" >> /tmp/corrupted
  fi
}
tab=$(printf '\t') started=0 most=$(nproc 2>/dev/null || echo 2)
[ "$most" -le 8 ] || most=8
: > /tmp/corrupted
while IFS="$tab" read -r part etag key; do
  [ -f "$dest/$key" ] || continue
  check_parts "$part" "$etag" "$key" &
  started=$((started + 1))
  [ $((started % most)) != 0 ] || wait
done <<EOF
$LLM_SERVING_PARTS
EOF
wait
if [ -s /tmp/corrupted ]; then
  echo "llm-serving: corrupted (not the multipart ETag preview listed):$(sort /tmp/corrupted | sed 's/^/ /' | tr -d '\n')" >&2
  exit 44
fi
"""

# $1: the weights dir, $2 (s3): the remote path. LLM_SERVING_EXPECT: `size<TAB>path` lines (size
# `-`: any). LLM_SERVING_SHARDS=index: also every shard model.safetensors.index.json names, or at
# least one *.safetensors without an index.
VERIFY_SCRIPT = r"""set -u
cd "$1" || { echo "llm-serving: missing: the weights folder $1" >&2; exit 43; }
tab=$(printf '\t')
missing="" wrong=""
check() {
  if [ ! -f "$2" ]; then missing="$missing $2"
  elif [ "$1" != "-" ]; then
    got=$(stat -c %s "$2")
    [ "$got" = "$1" ] || wrong="$wrong $2($got bytes, expected $1)"
  fi
}
while IFS="$tab" read -r size path; do
  [ -n "$path" ] && check "$size" "$path"
done <<EOF
${LLM_SERVING_EXPECT:-}
EOF
if [ "${LLM_SERVING_SHARDS:-}" = index ]; then
  if [ -f model.safetensors.index.json ]; then
    for shard in $(grep -o '"[^"]*\.safetensors"' model.safetensors.index.json | tr -d '"' | sort -u); do
      check - "$shard"
    done
  elif [ -z "$(find . -maxdepth 1 -name '*.safetensors' -type f | head -n 1)" ]; then
    missing="$missing *.safetensors"
  fi
fi
if [ -z "${LLM_SERVING_EXPECT:-}" ] && [ -n "${2:-}" ]; then
  # No listing from preview (pin off, or preview could not list): the store as it is now.
  if ! rclone check "$2" . --one-way --size-only --log-level ERROR 2> /tmp/check.log; then
    cat /tmp/check.log >&2
    missing="$missing$(sed -n 's/^.*ERROR : \([^:]*\): file not in .*$/ \1/p' /tmp/check.log | tr -d '\n')"
    wrong="$wrong$(sed -n 's/^.*ERROR : \([^:]*\): sizes differ.*$/ \1/p' /tmp/check.log | tr -d '\n')"
    [ -n "$missing$wrong" ] || missing=" (rclone check failed: see above)"
  fi
fi
status=0
[ -z "$missing" ] || { echo "llm-serving: missing:$missing" >&2; status=43; }
[ -z "$wrong" ] || { echo "llm-serving: wrong size:$wrong" >&2; status=43; }
if [ "$status" = 0 ] && [ -n "${LLM_SERVING_MD5SUMS:-}" ] && [ -n "${2:-}" ]; then
  printf '%s\n' "$LLM_SERVING_MD5SUMS" > /tmp/expected.md5
  if ! rclone checksum md5 /tmp/expected.md5 "$2" --one-way --log-level ERROR 2> /tmp/check.log; then
    cat /tmp/check.log >&2
    echo "llm-serving: source changed since preview:$(sed -n 's/^.*ERROR : \([^:]*\): .*$/ \1/p' /tmp/check.log | sort -u | tr -d '\n')" >&2
    status=42
  fi
fi
[ "$status" = 0 ] && echo "llm-serving: verified $(printf '%s\n' "${LLM_SERVING_EXPECT:-}" | grep -c .) listed files in $1"
exit "$status"
"""

_MD5 = re.compile(r'^"?([0-9a-f]{32})"?$')


def remote_path(source: S3Source) -> str:
    return f"{REMOTE}:{source.bucket}/{source.prefix}".rstrip("/")


def remote_env(source: S3Source) -> list[dict]:
    """rclone's remote ``src`` from variables, and the store's credentials (if a Secret holds them)."""
    prefix = f"RCLONE_CONFIG_{REMOTE.upper()}_"
    env = [
        {"name": prefix + "TYPE", "value": "s3"},
        {"name": prefix + "PROVIDER", "value": source.rclone_provider},
        # Credentials from the environment: the Secret's keys below, or the pod's cloud identity
        # (IRSA's web identity token, EKS Pod Identity, the instance role).
        {"name": prefix + "ENV_AUTH", "value": "true"},
        {"name": prefix + "REGION", "value": source.region},
        # The source is read, never written: no bucket creation probe (a read-only key fails it).
        {"name": prefix + "NO_CHECK_BUCKET", "value": "true"},
    ]
    if source.endpoint:
        env.append({"name": prefix + "ENDPOINT", "value": source.endpoint})
    if source.version_at:
        # The bucket as it was then (each key's newest version up to that time): the copy, the
        # ETag checks and the verify step all read that snapshot, the one preview listed.
        env.append({"name": prefix + "VERSION_AT", "value": source.version_at})
    if source.credentials:
        creds = source.credentials
        for name, key in (("AWS_ACCESS_KEY_ID", creds.access_key_id_key),
                          ("AWS_SECRET_ACCESS_KEY", creds.secret_access_key_key)):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": creds.secret, "key": key}}})
    return env


def md5_sums(source: S3Source) -> str:
    """`md5  key` lines for the listed objects whose ETag is an MD5 (one-part uploads)."""
    lines = []
    for obj in source.manifest or ():
        match = _MD5.match(obj.etag)
        if match:
            lines.append(f"{match.group(1)}  {obj.key}")
    return "\n".join(lines)


def part_lines(source: S3Source) -> str:
    """`part size<TAB>ETag<TAB>key` lines for the listed multipart objects preview read a part size
    for: the pull step recomputes their ETags from the copy (rclone has no MD5 to check them by)."""
    return "\n".join(f"{obj.part_size}\t{obj.etag}\t{obj.key}" for obj in source.manifest or () if obj.part_size)


def streams_per_file(source: S3Source) -> int:
    """Ranged streams per large object: enough to keep the 16 transfer slots busy, at most 8; 1
    (one stream, hashed while written) when preview listed 16 or more. Unpinned: 8."""
    large = sum(1 for obj in source.manifest or () if obj.size >= LARGE_OBJECT_BYTES)
    if source.manifest is None or not large:
        return MAX_STREAMS
    return min(MAX_STREAMS, -(-TRANSFERS // large))


def copy_flags(source: S3Source) -> list[str]:
    streams = f"--multi-thread-streams={streams_per_file(source)}"
    return [streams if flag.startswith("--multi-thread-streams=") else flag for flag in COPY_FLAGS]


def _env_if(name: str, value: str) -> list[dict]:
    """The variable only when it has a value: the scripts read an absent one (`${NAME:-}`) as nothing to check."""
    return [{"name": name, "value": value}] if value else []


def _base_env() -> list[dict]:
    # rclone's cache and config lookups go under $HOME: the /tmp emptyDir (read-only root).
    return [{"name": "HOME", "value": common.TMP_MOUNT}]


def pull_container(model: ModelConfig, ident: common.Identity) -> dict:
    source: S3Source = model.source  # type: ignore[assignment]
    env = _base_env() + remote_env(source)
    parts = ""
    if source.manifest is not None:
        env.append({"name": "LLM_SERVING_KEYS", "value": "\n".join(o.key for o in source.manifest)})
        parts = part_lines(source)
        env += _env_if("LLM_SERVING_MD5SUMS", md5_sums(source)) + _env_if("LLM_SERVING_PARTS", parts)
    return {
        "name": "pull",
        "image": RCLONE_IMAGE,
        "command": ["sh", "-c", PULL_PARTS_SCRIPT if parts else PULL_SCRIPT, "pull"],
        "args": [remote_path(source), common.WEIGHTS_MOUNT, *copy_flags(source)],
        "env": env,
        "volumeMounts": [{"name": "weights", "mountPath": common.WEIGHTS_MOUNT}, common.tmp_volume()[1]],
        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "6Gi"}},
        "securityContext": common.container_security_context(ident, read_only_root=True),
        # A failed init container has no log under the pod's default container: its last lines
        # become its termination message, which the gate reads from the pod's status.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def verify_container(ident: common.Identity, env: list[dict], args: list[str], mount: dict, expect: str) -> dict:
    """The verify step, given what its source adds: the store to compare with (s3), or the
    claim's folder (pvc), and the expected ``size<TAB>key`` lines (``-`` for any size)."""
    return {
        "name": "verify",
        "image": RCLONE_IMAGE,
        "command": ["sh", "-c", VERIFY_SCRIPT, "verify"],
        "args": [common.WEIGHTS_MOUNT, *args],
        "env": _base_env() + env + _env_if("LLM_SERVING_EXPECT", expect),
        "volumeMounts": [mount, common.tmp_volume()[1]],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": common.container_security_context(ident, read_only_root=True),
        # A refusal's last lines (the keys) become the termination message the gate shows.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def s3_containers(model: ModelConfig, ident: common.Identity) -> tuple[list[dict], list[dict]]:
    """(init containers, containers) of an s3 source's puller Job: rclone's copy, then the check of
    the copy against the store (and preview's listing)."""
    source: S3Source = model.source  # type: ignore[assignment]
    mount = {"name": "weights", "mountPath": common.WEIGHTS_MOUNT, "readOnly": True}
    env = remote_env(source) + _env_if("LLM_SERVING_MD5SUMS", md5_sums(source))
    expect = "\n".join(f"{obj.size}\t{obj.key}" for obj in source.manifest or ())
    return [pull_container(model, ident)], [verify_container(ident, env, [remote_path(source)], mount, expect)]


def pvc_containers(model: ModelConfig, ident: common.Identity) -> tuple[list[dict], list[dict]]:
    """(init containers, containers) of a pvc source's Job: the check of the claim alone (nothing is pulled)."""
    source: PvcSource = model.source  # type: ignore[assignment]
    mount = {"name": "weights", "mountPath": common.WEIGHTS_MOUNT, "readOnly": True,
             **({"subPath": source.sub_path} if source.sub_path else {})}
    expect = "\n".join(f"-\t{path}" for path in source.expect_files)
    return [], [verify_container(ident, [{"name": "LLM_SERVING_SHARDS", "value": "index"}], [], mount, expect)]


def claim_volume(model: ModelConfig, names: common.ModelNames) -> dict:
    read_only: Optional[bool] = True if model.source.existing_claim is not None else None
    claim: dict = {"claimName": names.weights}
    if read_only:
        claim["readOnly"] = True
    return {"name": "weights", "persistentVolumeClaim": claim}


def writes_volume(model: ModelConfig) -> bool:
    """Whether the Job writes its volume; never an existing claim."""
    return model.source.existing_claim is None


def service_account(model: ModelConfig, platform: PlatformConfig) -> str:
    """The puller's ServiceAccount: an s3 source's own (one carrying a cloud identity), else the platform's."""
    return model.source.puller_service_account or platform.service_account_name
