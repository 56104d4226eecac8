"""S3 preflight: list ``bucket/prefix`` at preview (every key, size and ETag), check the total
against ``weights.size``, and pin the listing as the source's identity (``source.manifest``).
With ``source.versionAt`` the listing is the bucket as it was then: GetBucketVersioning first (a
bucket that never had versioning keeps no old versions: refused), then ListObjectVersions, each
key's newest version written at or before that time — the rule rclone's ``version_at`` applies
in the puller, so preview, pull and verify see the same snapshot.

Objects uploaded in parts by other tools than rclone (ETag ``<md5>-<parts>``: the MD5 of the
parts' binary MD5s) get their part size from ``HEAD <key>?partNumber=1`` (the Content-Length of
part 1, with the version the listing chose), so the puller can recompute that ETag from its copy
(compile/object_store.py); a store that does not answer it leaves the object checked by size.

``list_objects`` and ``list_versions_at`` are the only I/O: S3 API pages over HTTP, signed with AWS Signature V4
(stdlib hmac/hashlib; no SDK). Credentials are this machine's ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` (/ ``AWS_SESSION_TOKEN``), or none (anonymous) — never the Secret the
puller reads, which lives in the cluster. ``decide_s3`` is pure.

The endpoint asked is the source's own unless ``LLM_SERVING_S3_PREFLIGHT_ENDPOINT`` says how this
machine reaches the same store (tests: a loopback server; the puller's endpoint may never be one).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Optional, Union
from urllib.parse import quote, unquote, urlparse

import requests

from ..config import values
from ..config.sources import MAX_MANIFEST_KEYS, S3Object, S3Source
from .decide import Problem, held_note, human, needed_bytes, recommended_size
from .stream import decide_stream

ENDPOINT_ENV = "LLM_SERVING_S3_PREFLIGHT_ENDPOINT"
TIMEOUT_SECONDS = 15.0
_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass(frozen=True)
class S3Error:
    kind: str  # unauthorized | bucket_not_found | unreachable | too_many | not_versioned
    detail: str
    status: Optional[int] = None


@dataclass(frozen=True)
class Listing:
    objects: tuple[S3Object, ...]
    # Multipart objects the store gave no part size for (key, why): checked by size only.
    unsized: tuple[tuple[str, str], ...] = ()


_MULTIPART_ETAG = re.compile(r"^[0-9a-f]{32}-([0-9]+)$")


def multipart_parts(etag: str) -> int:
    """The part count of a multipart ETag (``<md5>-<parts>``, more than one part); 0 for any other."""
    match = _MULTIPART_ETAG.match(etag)
    return int(match.group(1)) if match and int(match.group(1)) > 1 else 0


@dataclass(frozen=True)
class Credentials:
    access_key_id: str
    secret_access_key: str
    session_token: Optional[str] = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Optional[Credentials]:
        key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
        return cls(key, secret, env.get("AWS_SESSION_TOKEN") or None) if key and secret else None


def _sign(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(method: str, url: str, region: str, creds: Optional[Credentials],
                   now: Optional[datetime.datetime] = None, body: bytes = b"") -> dict[str, str]:
    """Headers of a SigV4-signed request with ``body`` (empty: every request of preview; none for
    anonymous requests). ``url``'s query must already be in canonical form (sorted, RFC 3986-encoded)."""
    if creds is None:
        return {}
    now = now or datetime.datetime.now(datetime.UTC)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    parsed = urlparse(url)
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": parsed.netloc, "x-amz-content-sha256": payload, "x-amz-date": stamp}
    if creds.session_token:
        headers["x-amz-security-token"] = creds.session_token
    names = sorted(headers)
    canonical = "\n".join([
        method, quote(unquote(parsed.path) or "/", safe="/-_.~"), parsed.query,
        "".join(f"{name}:{headers[name].strip()}\n" for name in names), ";".join(names), payload,
    ])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _sign(_sign(_sign(_sign(f"AWS4{creds.secret_access_key}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds.access_key_id}/{scope}, "
                                f"SignedHeaders={';'.join(names)}, Signature={signature}")
    del headers["host"]  # requests sets it (the same value)
    return headers


def _query(params: dict[str, str]) -> str:
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items()))


def bucket_url(endpoint: str, bucket: str, virtual_host: bool) -> str:
    parsed = urlparse(endpoint)
    if virtual_host:
        return f"{parsed.scheme}://{bucket}.{parsed.netloc}/"
    return f"{endpoint.rstrip('/')}/{bucket}"


def object_url(endpoint: str, bucket: str, key: str, virtual_host: bool) -> str:
    base = bucket_url(endpoint, bucket, virtual_host).rstrip("/")
    return f"{base}/{quote(key, safe='/-_.~')}"


def part_size(session: requests.Session, url: str, region: str, creds: Optional[Credentials], obj: S3Object,
              parts: int, timeout: float, version_id: Optional[str] = None) -> Union[int, str, None]:
    """The size of part 1 of the multipart object at ``url`` (its version ``version_id``) from
    ``HEAD ?partNumber=1``, or why the store's answer gives none; None for an object rclone
    uploaded (its ``x-amz-meta-md5chksum`` is the file's MD5, which the copy checks already).
    The parts of every common uploader (aws s3 cp, boto3, rclone, mc) are all that size but the
    last, which ``size`` and ``parts`` must then agree with."""
    url += "?" + _query({"partNumber": "1", **({"versionId": version_id} if version_id else {})})
    try:
        response = session.head(url, headers=signed_headers("HEAD", url, region, creds), timeout=timeout)
    except requests.RequestException as error:
        return f"HEAD ?partNumber=1: {type(error).__name__}"
    if response.status_code not in (200, 206):
        return f"HEAD ?partNumber=1: HTTP {response.status_code}"
    headers = response.headers
    if headers.get("x-amz-meta-md5chksum"):
        return None
    if (headers.get("x-amz-server-side-encryption", "").startswith("aws:kms")
            or headers.get("x-amz-server-side-encryption-customer-algorithm")):
        return "encrypted with SSE-KMS or SSE-C: its ETag is not made of MD5s"
    count = headers.get("x-amz-mp-parts-count")
    if count is not None and count != str(parts):
        return f"HEAD ?partNumber=1 says {count} parts, the ETag {parts}"
    try:
        length = int(headers.get("Content-Length", ""))
    except ValueError:
        return "HEAD ?partNumber=1: no Content-Length"
    if not (length > 0 and (parts - 1) * length < obj.size <= parts * length):
        return f"HEAD ?partNumber=1: a part of {length} bytes does not make {parts} parts of {obj.size} bytes"
    return length


def with_part_sizes(objects: list[S3Object], endpoint: str, region: str, bucket: str, prefix: str,
                    creds: Optional[Credentials], virtual_host: bool, timeout: float,
                    version_ids: Optional[Mapping[str, str]] = None) -> Listing:
    """The listing with the part size of every multipart object the store gives one for (one
    HEAD each; ``version_ids``: key -> the version the listing chose)."""
    sized, unsized = [], []
    with requests.Session() as session:
        for obj in sorted(objects, key=lambda o: o.key):
            parts = multipart_parts(obj.etag)
            if parts:
                url = object_url(endpoint, bucket, prefix + obj.key, virtual_host)
                answer = part_size(session, url, region, creds, obj, parts, timeout, (version_ids or {}).get(obj.key))
                if isinstance(answer, int):
                    obj = obj.model_copy(update={"part_size": answer})
                elif answer is not None:
                    unsized.append((obj.key, answer))
            sized.append(obj)
    return Listing(tuple(sized), tuple(unsized))


def _error(response: requests.Response) -> S3Error:
    code = ""
    try:
        code = ET.fromstring(response.content).findtext("Code") or ""
    except ET.ParseError:
        pass
    detail = f"HTTP {response.status_code}" + (f" {code}" if code else "")
    if code == "NoSuchBucket" or (response.status_code == 404 and not code):
        return S3Error("bucket_not_found", detail, response.status_code)
    if response.status_code in (401, 403):
        return S3Error("unauthorized", detail, response.status_code)
    return S3Error("unreachable", detail, response.status_code)


def list_objects(endpoint: str, region: str, bucket: str, prefix: str, creds: Optional[Credentials],
                 virtual_host: bool = False, timeout: float = TIMEOUT_SECONDS,
                 limit: int = MAX_MANIFEST_KEYS, part_sizes: bool = False) -> Union[Listing, S3Error]:
    """Every object under ``prefix`` (keys relative to it; folder markers left out); with
    ``part_sizes``, multipart objects carry their part size (``with_part_sizes``)."""
    objects: list[S3Object] = []
    token: Optional[str] = None
    base = bucket_url(endpoint, bucket, virtual_host)
    with requests.Session() as session:
        while True:
            params = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            if token:
                params["continuation-token"] = token
            root = _get(session, f"{base}?{_query(params)}", region, creds, timeout,
                        not_xml=f"{endpoint} answered with something that is not an S3 listing")
            if isinstance(root, S3Error):
                return root
            for item in root.iter(f"{_NS}Contents"):
                key = item.findtext(f"{_NS}Key") or ""
                if not key.startswith(prefix) or key.endswith("/"):
                    continue
                objects.append(S3Object(key=key[len(prefix):], size=int(item.findtext(f"{_NS}Size") or 0),
                                        etag=(item.findtext(f"{_NS}ETag") or "").strip('"')))
                if len(objects) > limit:
                    return S3Error("too_many", f"more than {limit} objects under the prefix")
            if (root.findtext(f"{_NS}IsTruncated") or "false") != "true":
                break
            token = root.findtext(f"{_NS}NextContinuationToken")
            if not token:
                return S3Error("unreachable", f"{endpoint} truncated the listing without a continuation token")
    if part_sizes:
        return with_part_sizes(objects, endpoint, region, bucket, prefix, creds, virtual_host, timeout)
    return Listing(tuple(sorted(objects, key=lambda o: o.key)))


def _get(session: requests.Session, url: str, region: str, creds: Optional[Credentials],
         timeout: float, not_xml: Optional[str] = None) -> Union[ET.Element, S3Error]:
    """One signed GET of an S3 API XML document, or what went wrong (``not_xml``: the message when
    the answer is not XML)."""
    try:
        response = session.get(url, headers=signed_headers("GET", url, region, creds), timeout=timeout)
    except requests.RequestException as error:
        return S3Error("unreachable", f"{type(error).__name__}: {error}".splitlines()[0][:200])
    if response.status_code != 200:
        return _error(response)
    try:
        return ET.fromstring(response.content)
    except ET.ParseError:
        return S3Error("unreachable", not_xml or f"{urlparse(url).netloc} answered with something that is not an S3 document")


def parse_time(text: str) -> datetime.datetime:
    """An S3 ``LastModified`` (ISO 8601, UTC)."""
    return datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))


def list_versions_at(endpoint: str, region: str, bucket: str, prefix: str, creds: Optional[Credentials],
                     version_at: str, virtual_host: bool = False, timeout: float = TIMEOUT_SECONDS,
                     limit: int = MAX_MANIFEST_KEYS, part_sizes: bool = False) -> Union[Listing, S3Error]:
    """Every object under ``prefix`` as the bucket held it at ``version_at`` (keys relative to the
    prefix): per key, the newest version whose LastModified is not after that time, left out when
    that is a delete marker. The bucket must have versioning (Enabled, or Suspended after it was).
    ``part_sizes``: as for ``list_objects``, asked of the version chosen."""
    at = parse_time(version_at)
    base = bucket_url(endpoint, bucket, virtual_host)
    with requests.Session() as session:
        root = _get(session, f"{base}?{_query({'versioning': ''})}", region, creds, timeout)
        if isinstance(root, S3Error):
            return replace(root, detail=f"GetBucketVersioning: {root.detail}")
        status = root.findtext(f"{_NS}Status") or root.findtext("Status") or ""
        if status not in ("Enabled", "Suspended"):
            return S3Error("not_versioned", "GetBucketVersioning: versioning was never enabled")
        # key -> (LastModified, is_latest, delete marker, size, etag, versionId) of every version up to `at`.
        chosen: dict[str, tuple] = {}
        markers = {"key-marker": "", "version-id-marker": ""}
        while True:
            params = {"versions": "", "prefix": prefix, "max-keys": "1000"}
            params.update({k: v for k, v in markers.items() if v})
            root = _get(session, f"{base}?{_query(params)}", region, creds, timeout)
            if isinstance(root, S3Error):
                return replace(root, detail=f"ListObjectVersions: {root.detail}")
            for item in root:
                marker = item.tag == f"{_NS}DeleteMarker"
                if item.tag != f"{_NS}Version" and not marker:
                    continue
                key = item.findtext(f"{_NS}Key") or ""
                modified = parse_time(item.findtext(f"{_NS}LastModified") or "1970-01-01T00:00:00Z")
                if not key.startswith(prefix) or key.endswith("/") or modified > at:
                    continue
                entry = (modified, (item.findtext(f"{_NS}IsLatest") or "") == "true", marker,
                         int(item.findtext(f"{_NS}Size") or 0), (item.findtext(f"{_NS}ETag") or "").strip('"'),
                         item.findtext(f"{_NS}VersionId") or "")
                if key not in chosen or entry[:2] > chosen[key][:2]:
                    chosen[key] = entry
            if (root.findtext(f"{_NS}IsTruncated") or "false") != "true":
                break
            markers = {"key-marker": root.findtext(f"{_NS}NextKeyMarker") or "",
                       "version-id-marker": root.findtext(f"{_NS}NextVersionIdMarker") or ""}
            if not markers["key-marker"]:
                return S3Error("unreachable", f"{endpoint} truncated the version listing without a key marker")
    objects = [S3Object(key=key[len(prefix):], size=size, etag=etag)
               for key, (_, _, marker, size, etag, _) in chosen.items() if not marker]
    if len(objects) > limit:
        return S3Error("too_many", f"more than {limit} objects under the prefix")
    if part_sizes:
        version_ids = {key[len(prefix):]: entry[5] for key, entry in chosen.items() if entry[5]}
        return with_part_sizes(objects, endpoint, region, bucket, prefix, creds, virtual_host, timeout, version_ids)
    return Listing(tuple(sorted(objects, key=lambda o: o.key)))


@dataclass(frozen=True)
class S3Verdict:
    manifest: Optional[tuple[S3Object, ...]]  # what the puller copies (None: unpinned)
    errors: tuple[Problem, ...] = ()
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def decide_s3(source: S3Source, answer: Union[Listing, S3Error], *, endpoint: str, pin: bool,
              volume_size: str, volume_size_default: bool, headroom_percent: int,
              on_unreachable: str, has_credentials: bool, revisions_held: int = 1) -> S3Verdict:
    where = f"{source.location} at {endpoint}"
    if isinstance(answer, S3Error):
        if answer.kind == "unauthorized":
            whose = ("this machine's AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY were refused" if has_credentials else
                     "this machine sent no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
            return S3Verdict(None, errors=(Problem("source.credentials", (
                f"cannot list {where} ({answer.detail}): {whose}; give preview keys that may list the "
                + ("bucket's versions (s3:ListBucketVersions, s3:GetBucketVersioning: source.versionAt is set)"
                   if source.version_at else "bucket")
                + " (the puller's own come from source.credentials or its ServiceAccount)")),))
        if answer.kind == "bucket_not_found":
            return S3Verdict(None, errors=(Problem("source.bucket", (
                f"bucket '{source.bucket}' not found at {endpoint} ({answer.detail}); check source.bucket "
                "and source.endpoint")),))
        if answer.kind == "not_versioned":
            return S3Verdict(None, errors=(Problem("source.versionAt", (
                f"bucket '{source.bucket}' at {endpoint} keeps no object versions ({answer.detail}), so "
                f"nothing can be read as it was at {source.version_at}; remove source.versionAt (the latest "
                "objects, pinned by their ETags), or enable versioning on the bucket and pin a time after that")),))
        if answer.kind == "too_many":
            return S3Verdict(None, errors=(Problem("source.prefix", (
                f"{where}: {answer.detail}; point source.prefix at one model's folder")),))
        if on_unreachable == "fail":
            return S3Verdict(None, errors=(Problem("source.endpoint", (
                f"cannot reach {endpoint} to list {source.location}: {answer.detail}; fix the endpoint or "
                "the network, or set platform.preflight.onUnreachable: warn to deploy it unchecked")),))
        return S3Verdict(None, warnings=(f"cannot reach {endpoint} ({answer.detail}): deploying {source.location} "
                                         "unchecked and unpinned (platform.preflight.onUnreachable: warn)",))
    if not answer.objects and source.version_at:
        return S3Verdict(None, errors=(Problem("source.versionAt", (
            f"no object under {where} at {source.version_at}; write a time after the weights were uploaded, "
            "or check source.prefix")),))
    if not answer.objects:
        return S3Verdict(None, errors=(Problem("source.prefix", (
            f"no object under {where}; check source.prefix (a folder of the bucket, e.g. "
            "'llama-3.1-8b-instruct/')")),))
    errors: list[Problem] = []
    notes: list[str] = []
    if source.streams:  # no volume to size: what the server's loader will find (preflight/stream.py)
        errors, notes = decide_stream(source, answer.objects)
        if pin:
            notes.append(f"{source.location} pinned to the {len(answer.objects)} keys and ETags listed now")
        return S3Verdict(answer.objects if pin else None, tuple(errors), (), tuple(notes))
    total = sum(o.size for o in answer.objects)
    capacity = values.parse_quantity(volume_size)
    need = needed_bytes(total * revisions_held, headroom_percent)
    notes.append(f"{source.location}: {len(answer.objects)} objects, {human(total)} to copy (weights.size {volume_size})")
    if need > capacity:
        which = (f"the default weights.size ({volume_size}; the model does not set it)" if volume_size_default
                 else f"{volume_size} ({human(capacity)})")
        errors.append(Problem("weights.size", (
            f"{which} is too small for {source.location}: its objects total {human(total)}, "
            f"{human(need)}{held_note(revisions_held)} with {headroom_percent}% headroom; "
            f"set weights.size: {recommended_size(total * revisions_held, headroom_percent)}")))
    if not any(o.key == "config.json" for o in answer.objects):
        notes.append(f"{source.location} has no config.json at the prefix's top: is the prefix the model's folder?")
    if source.version_at:
        notes.append(f"{source.location} read as it was at {source.version_at} (object versions)")
    warnings: list[str] = []
    if pin:
        notes.append(f"{source.location} pinned to the {len(answer.objects)} keys and ETags listed now")
        sized = sum(1 for o in answer.objects if o.part_size)
        if sized:
            notes.append(f"{source.location}: {sized} objects uploaded in parts: the puller recomputes their "
                         "multipart ETags from its copy (part size from HEAD ?partNumber=1)")
        if answer.unsized:
            shown = "; ".join(f"{key} ({why})" for key, why in answer.unsized[:3])
            more = f" and {len(answer.unsized) - 3} more" if len(answer.unsized) > 3 else ""
            warnings.append(f"{source.location}: {len(answer.unsized)} objects uploaded in parts are checked by "
                            f"size only, the store gave no part size to recompute their ETags from: {shown}{more}")
    return S3Verdict(answer.objects if pin else None, tuple(errors), tuple(warnings), tuple(notes))
