"""Where a model's weights come from besides the Hugging Face Hub: an S3-compatible object store,
or an existing PersistentVolumeClaim that already holds them.

``source.type`` picks the kind; a source without ``type`` is the Hub (``hf``), so stack files
written before these kinds existed read, validate and render exactly as before. The section
alone: what reads other settings of the model with its source is checked in ``model.py``. What
every kind answers, each its own way (``streams``, ``existing_claim``, ``puller_service_account``,
``operator_cacheable``, ``volume_sub_path``, ``egress_endpoint``), is a property of each class:
shared code asks the source, not its type (tests/test_variant_switches.py).

Identity (what names the weights volume and the puller Job, so a change re-pulls and nothing else
does): ``ref``. For S3 it is the endpoint, bucket and prefix, plus — once preview has listed the
store (``platform.pin``) — a digest of every key, size and ETag it read: a changed object is a
new volume and a new pull, an unchanged store keeps the weights. A ``versionAt`` (a versioned
bucket read as it was at that time) is part of the identity too: another time is another pull.
Pure: no I/O (the one clock reading refuses a ``versionAt`` still to come).
"""

from __future__ import annotations

import datetime
import hashlib
import re
from typing import Annotated, Any, Literal, Optional, Union
from urllib.parse import urlparse

from pydantic import AfterValidator, Discriminator, Field, Tag, ValidationInfo, field_validator

from . import values
from .types import Dns1123Label, PositiveQuantity, Strict

# The tags of ``source.type``; the Hub is the default.
SOURCE_TYPES = ("hf", "s3", "pvc")
DEFAULT_SOURCE_TYPE = "hf"

# One pinned public image for object stores: rclone's own, at the release the tests build from the
# Go module proxy (scripts/testtools/versions.sh RCLONE_VERSION). Alpine-based: it has `sh` and
# `stat`, which the verify step uses.
RCLONE_IMAGE = "docker.io/rclone/rclone:1.76.0"
# A preview listing of more keys than this is refused: the manifest rides in a ConfigMap (1 MiB).
MAX_MANIFEST_KEYS = 5000
# Checkpoint copies vLLM never loads when safetensors are there (the puller passes them all after
# one `--exclude`: compile/weights.py puller_args).
DEFAULT_IGNORE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.h5", "*.msgpack", "*.ckpt", "*.onnx", "*.ot", "original/*")

# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (the common subset).
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def source_type(value: Any) -> str:
    """The tag of a source value (a stack file's mapping, or an already-built source)."""
    if isinstance(value, dict):
        kind = value.get("type", DEFAULT_SOURCE_TYPE)
        return kind if isinstance(kind, str) else repr(kind)
    return getattr(value, "type", DEFAULT_SOURCE_TYPE)


def check_bucket(bucket: str) -> str:
    if not _BUCKET.match(bucket or "") or ".." in bucket:
        raise ValueError(f"'{bucket}' is not a bucket name; write 3-63 lowercase letters, digits, '.' or '-', "
                         "e.g. 'models'")
    return bucket


def check_prefix(prefix: str) -> str:
    """A key prefix naming a folder: no leading '/', ends with '/' (added), no '..' or '//'."""
    prefix = prefix.strip()
    if prefix.startswith("/") or ".." in prefix.split("/") or "//" in prefix or any(c in prefix for c in "*?[\n"):
        raise ValueError(f"'{prefix}' is not a key prefix; write the folder of the weights without a leading "
                         "'/' or wildcards, e.g. 'llama-3.1-8b-instruct/'")
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def check_version_at(value: Any, now: Optional[datetime.datetime] = None) -> str:
    """An RFC 3339 time with a UTC offset, in the past; returned in UTC (``...Z``), the form rclone's
    ``version_at`` parses and the identity hashes (the same instant written two ways is one pin)."""
    example = "e.g. '2026-11-30T18:00:00Z'"
    if isinstance(value, datetime.datetime):  # YAML reads an unquoted timestamp as one
        moment = value
    elif isinstance(value, str) and re.fullmatch(
            r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?([Zz]|[+-]\d{2}:\d{2})", value.strip()):
        try:
            moment = datetime.datetime.fromisoformat(value.strip().replace("z", "Z"))
        except ValueError:
            raise ValueError(f"'{value}' is not a valid date and time; write an RFC 3339 time in UTC, {example}") from None
    else:
        raise ValueError(f"'{value}' is not an RFC 3339 time; write a date, a time and its offset, {example}")
    if moment.tzinfo is None:
        raise ValueError(f"'{value}' has no UTC offset; write the time in UTC with a trailing Z, {example}")
    moment = moment.astimezone(datetime.UTC)
    now = now or datetime.datetime.now(datetime.UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else "") + "Z"
    if moment > now:
        raise ValueError(f"{text} is in the future (now is {now.strftime('%Y-%m-%dT%H:%M:%SZ')}): the store would "
                         "still change under the pin; write a time already past, or remove versionAt for the "
                         "latest objects")
    return text


def check_relative_path(path: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or "" in parts or any(c in path for c in "\n\t"):
        raise ValueError(f"'{path}' is not a relative path inside the volume; write e.g. 'llama-3.1-8b' "
                         "(no leading '/', no '..')")
    return path


class S3Credentials(Strict):
    """A Secret with the store's access keys (the AWS names, whatever the store)."""

    secret: Dns1123Label = Field(description="Name of an existing Secret in the stack's namespace.")
    access_key_id_key: str = Field("AWS_ACCESS_KEY_ID", description="Key of the access key id in the Secret.")
    secret_access_key_key: str = Field("AWS_SECRET_ACCESS_KEY", description="Key of the secret access key in the Secret.")


class S3Object(Strict):
    """One object preview listed (key relative to the prefix)."""

    # A byte count, compared with the listing; weights files of several GB are common.
    not_kubernetes_ints = frozenset({"size", "part_size"})

    key: str = Field(description="Key below the prefix.")
    size: int = Field(ge=0, description="Bytes.")
    etag: str = Field("", description="The store's ETag (an MD5 hex for objects uploaded in one part).")
    # Not part of the source's identity (``manifest_digest``): the ETag already pins the bytes and
    # their part count; the part size only says how to recompute it.
    part_size: Optional[int] = Field(
        None, ge=1, description="Bytes of each part (the last may be shorter) of an object uploaded in parts "
        "(ETag `<md5>-<parts>`), as the store answered `HEAD ?partNumber=1`: the puller recomputes that ETag "
        "from the copy. Unset: not a multipart object, or the store did not say (checked by size only).",
    )


class S3Source(Strict):
    """Weights in an S3-compatible object store (AWS S3, MinIO, Ceph RGW, Cloudflare R2, GCS's S3
    interoperability endpoint...), copied onto the weights volume by rclone."""

    type: Literal["s3"] = Field(description="`s3`.")
    bucket: str = Field(description="Bucket name.")
    prefix: str = Field(
        "", description="Key prefix of the weights' folder (`llama-3.1-8b-instruct/`; a missing trailing `/` "
        "is added). Every object under it is copied, keeping the layout below the prefix. Empty: the whole bucket.",
    )
    endpoint: Optional[str] = Field(
        None, description="S3 API URL of a store other than AWS (`https://minio.storage.svc:9000`, "
        "`https://<account>.r2.cloudflarestorage.com`); must be reachable from the cluster. Unset: AWS S3 "
        "in `region`.",
    )
    region: str = Field("us-east-1", description="Region of the bucket (AWS) or the store's region name.")
    provider: Optional[Literal["AWS", "Minio", "Ceph", "Cloudflare", "GCS", "Other"]] = Field(
        None, description="rclone's S3 provider (its per-store quirks). Unset: `AWS` without `endpoint`, "
        "`Other` with one.",
    )
    credentials: Optional[S3Credentials] = Field(
        None, description="Secret with the access keys. Unset: the puller's ServiceAccount identity (EKS IRSA "
        "or Pod Identity, the node's instance role); see docs/weight-sources.md for the annotation.",
    )
    service_account_name: Optional[Dns1123Label] = Field(
        None, description="An existing ServiceAccount the puller runs as, carrying the cloud identity that "
        "reads the bucket (EKS: annotated `eks.amazonaws.com/role-arn`); for `credentials`-less access. Unset: "
        "`platform.serviceAccountName`.",
    )
    version_at: Optional[str] = Field(
        None, description="A versioned bucket read as it was at this time (RFC 3339, `2026-11-30T18:00:00Z`): "
        "every key's newest version written at or before it (rclone's `version_at`); keys deleted by then "
        "are left out. Preview lists the same versions and refuses a bucket without versioning; the time is "
        "part of the source's identity (a new time is a new volume and pull). Unset: the latest objects.",
    )
    load: Literal["copy", "stream"] = Field(
        "copy", description="`copy`: the puller Job copies the objects onto the weights volume and checks them "
        "(sizes, MD5 ETags) before the server starts. `stream`: no volume, no puller, no check: the vLLM server "
        "reads the safetensors straight from the store at every start (`--load-format runai_streamer`); "
        "preview still lists the prefix, but nothing verifies the bytes before the server loads them. "
        "See docs/weight-sources.md for the trade-offs.",
    )
    stream_memory_limit: PositiveQuantity = Field(
        "4Gi", description="`load: stream` only: the streamer's CPU read buffer (RUNAI_STREAMER_MEMORY_LIMIT); "
        "at least the model's largest tensor and at most half of `resources.memory`. Without a limit the "
        "streamer (0.14) takes up to 20 GB.",
    )
    manifest: Optional[tuple[S3Object, ...]] = Field(
        None, description="Set by preview from its listing (keys, sizes, ETags); never written in a stack file. "
        "The puller copies exactly these keys and the verify step checks them.",
    )

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, bucket: str) -> str:
        return check_bucket(bucket)

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, prefix: str) -> str:
        return check_prefix(prefix)

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, endpoint: Optional[str]) -> Optional[str]:
        if endpoint is None:
            return None
        try:
            values.check_cluster_reachable_url(endpoint)
        except ValueError:
            raise ValueError(f"'{endpoint}' is not an http(s) URL the puller pod can reach (no localhost/loopback); "
                             "write the store's in-cluster or public URL, e.g. 'http://minio.storage.svc:9000'") from None
        parsed = urlparse(endpoint)
        if parsed.path not in ("", "/") or parsed.query:
            raise ValueError(f"'{endpoint}' has a path; write the store's base URL, e.g. 'https://minio.storage.svc:9000', "
                             "and the bucket in `bucket`")
        return endpoint.rstrip("/")

    @field_validator("region")
    @classmethod
    def _region(cls, region: str) -> str:
        if not re.fullmatch(r"[a-z0-9-]{1,40}", region or ""):
            raise ValueError(f"'{region}' is not a region name; write e.g. 'us-east-1' (or 'auto' for R2)")
        return region

    @field_validator("version_at", mode="before")
    @classmethod
    def _version_at(cls, value: Any) -> Optional[str]:
        return None if value is None else check_version_at(value)

    @field_validator("manifest")
    @classmethod
    def _manifest_is_previews(cls, manifest: Optional[tuple]) -> None:
        if manifest is not None:
            raise ValueError("preview fills this from its listing of the store; remove it")
        return None

    @property
    def rclone_provider(self) -> str:
        return self.provider or ("Other" if self.endpoint else "AWS")

    @property
    def endpoint_url(self) -> str:
        """Where the store's API is, as the puller reaches it."""
        return self.endpoint or f"https://s3.{self.region}.amazonaws.com"

    @property
    def location(self) -> str:
        """``s3://bucket/prefix``, with the store's host when it is not AWS."""
        host = f"{urlparse(self.endpoint).netloc}/" if self.endpoint else ""
        return f"s3://{host}{self.bucket}/{self.prefix}"

    @property
    def manifest_digest(self) -> Optional[str]:
        """16 hex of the listed keys, sizes and ETags; None before preview listed the store."""
        if self.manifest is None:
            return None
        text = "\n".join(f"{o.key}\t{o.size}\t{o.etag}" for o in sorted(self.manifest, key=lambda o: o.key))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def streams(self) -> bool:
        """The server reads the weights from the store itself (no volume, no puller)."""
        return self.load == "stream"

    @property
    def existing_claim(self) -> Optional[str]:
        """The existing claim that holds the weights; None: the program makes the weights volume."""
        return None

    @property
    def puller_service_account(self) -> Optional[str]:
        """The ServiceAccount the puller runs as, when the source names one (a cloud identity)."""
        return self.service_account_name

    @property
    def operator_cacheable(self) -> bool:
        """The NIM operator's NIMCache can download it (it reads NGC or the Hub only)."""
        return False

    @property
    def volume_sub_path(self) -> Optional[str]:
        """The folder of the weights volume the server mounts (None: its root)."""
        return None

    def egress_endpoint(self, hub_endpoint: str) -> Optional[str]:
        """Where the puller connects to (its NetworkPolicy's egress); None: nowhere. ``hub_endpoint``: the
        model's Hugging Face endpoint."""
        return self.endpoint_url

    @property
    def ref(self) -> str:
        digest = self.manifest_digest
        at = f"@{self.version_at}" if self.version_at else ""
        return self.location + at + (f"#{digest}" if digest else "")


class PvcSource(Strict):
    """Weights already on an existing PersistentVolumeClaim: nothing is pulled. The server mounts
    it read-only; a verify Job checks the expected files are there before serving starts. Nothing
    this program does ever deletes, resizes or writes to the claim."""

    type: Literal["pvc"] = Field(description="`pvc`.")
    claim_name: Dns1123Label = Field(description="Name of the existing PersistentVolumeClaim in the stack's namespace.")
    sub_path: Optional[str] = Field(
        None, description="Folder inside the volume that holds the model (`llama-3.1-8b-instruct`). Unset: the "
        "volume's root.",
    )
    expect_files: tuple[str, ...] = Field(
        ("config.json",), description="Files (relative to `subPath`) that must be there. Beside them, every "
        "shard named by `model.safetensors.index.json` when the volume has one, else at least one "
        "`*.safetensors` file.",
    )

    @field_validator("sub_path")
    @classmethod
    def _sub_path(cls, path: Optional[str]) -> Optional[str]:
        return None if path is None else check_relative_path(path.strip().rstrip("/"))

    @field_validator("expect_files")
    @classmethod
    def _files(cls, files: tuple[str, ...]) -> tuple[str, ...]:
        for path in files:
            check_relative_path(path)
            if any(c in path for c in "*?["):
                raise ValueError(f"'{path}' is a glob; list file names, e.g. 'config.json'")
        return files

    @property
    def ref(self) -> str:
        return f"pvc://{self.claim_name}/{self.sub_path or ''}"

    @property
    def streams(self) -> bool:
        return False

    @property
    def existing_claim(self) -> Optional[str]:
        return self.claim_name

    @property
    def puller_service_account(self) -> Optional[str]:
        return None

    @property
    def operator_cacheable(self) -> bool:
        return False

    @property
    def volume_sub_path(self) -> Optional[str]:
        return self.sub_path

    def egress_endpoint(self, hub_endpoint: str) -> Optional[str]:
        return None  # the verify step reads its volume only


class ModelSource(Strict):
    """Weights on the Hugging Face Hub (or a Hub-compatible mirror): the default `type`."""

    type: Literal["hf"] = Field("hf", description="`hf` (the default; may be left out).")
    repo: Annotated[str, AfterValidator(values.check_hf_repo)] = Field(
        description="Hugging Face repo id, `owner/name`."
    )
    revision: Annotated[str, AfterValidator(values.check_revision)] = Field(
        "main", description="Branch, tag or full 40-hex commit to download."
    )
    allow_patterns: Optional[tuple[str, ...]] = Field(
        None, description="Download only files matching one of these globs (`hf download "
        "--include`; `*` also matches `/`). Unset: every file not ignored. The patterns follow one `--include`, "
        "as the huggingface_hub 0.x CLI of the default puller image takes them.",
    )
    ignore_patterns: tuple[str, ...] = Field(
        DEFAULT_IGNORE_PATTERNS, description="Skip files matching these globs (`hf download "
        "--exclude`): by default the duplicate checkpoints vLLM does not load (`.bin`/`.pt`/`.pth` "
        "copies of the safetensors weights, TF/Flax/ONNX exports, Meta's `original/` folder). "
        "`[]` downloads them too.",
    )

    @field_validator("allow_patterns", "ignore_patterns")
    @classmethod
    def _patterns(cls, patterns: Optional[tuple[str, ...]], info: ValidationInfo) -> Optional[tuple[str, ...]]:
        if patterns is None:
            return None
        if info.field_name == "allow_patterns" and not patterns:
            raise ValueError("an empty allow list downloads nothing; remove allowPatterns to download every file")
        for pattern in patterns:
            if not pattern.strip() or pattern != pattern.strip() or pattern.startswith("-"):
                raise ValueError(f"'{pattern}' is not a file glob; write e.g. '*.safetensors' or 'original/*'")
        return patterns

    @property
    def ref(self) -> str:
        return f"{self.repo}@{self.revision}"

    @property
    def streams(self) -> bool:
        return False

    @property
    def existing_claim(self) -> Optional[str]:
        return None

    @property
    def puller_service_account(self) -> Optional[str]:
        return None

    @property
    def operator_cacheable(self) -> bool:
        return True  # the NIMCache's hf source: this repo at this revision

    @property
    def volume_sub_path(self) -> Optional[str]:
        return None

    def egress_endpoint(self, hub_endpoint: str) -> Optional[str]:
        return hub_endpoint


# `source.type` picks the kind; without it, the Hub (stack files from before the other kinds).
WeightSource = Annotated[
    Union[Annotated[ModelSource, Tag("hf")], Annotated[S3Source, Tag("s3")], Annotated[PvcSource, Tag("pvc")]],
    Discriminator(source_type),
]
# The model of each ``source.type`` tag (the error formatter, messages.py, walks the config by it).
SOURCE_CLASSES: dict[str, type[Strict]] = {"hf": ModelSource, "s3": S3Source, "pvc": PvcSource}
