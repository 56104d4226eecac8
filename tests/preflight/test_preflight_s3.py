"""S3 preflight's decisions (issue 23), pure: a listing or an error in, problems / warnings / the
pinned listing out; and preflight_stack wiring it per model (the real client against a real
server is tests/puller/test_s3_puller.py)."""

from __future__ import annotations

import pytest
import requests

from components.compile import common
from components.config import load_stack_config
from components.config.sources import S3Object
from components.preflight import PreflightError, preflight_stack
from components.preflight.s3 import ENDPOINT_ENV, Listing, S3Error, signed_headers

OBJECTS = (S3Object(key="config.json", size=100, etag="a" * 32),
           S3Object(key="model.safetensors", size=3 << 30, etag="b" * 32 + "-2"))


def stack(pin: bool = True, on_unreachable: str = "fail", multi_node=None, **weights):
    first = {"name": "m", "weights": weights or {"size": "10Gi"},
             "source": {"type": "s3", "bucket": "models", "prefix": "llama/"}}
    if multi_node:
        first.update(gpus=4, tensorParallelSize=4, multiNode=multi_node)
    return load_stack_config({
        "platform": {"pin": pin, "preflight": {"onUnreachable": on_unreachable}},
        "models": [first, {"name": "claim", "source": {"type": "pvc", "claimName": "w"}}]})


def listing(answer):
    calls = []

    def list_objects(endpoint, region, bucket, prefix, creds, virtual_host=False, part_sizes=False):
        calls.append((endpoint, region, bucket, prefix, creds, virtual_host))
        return answer
    return list_objects, calls


def test_pinned_listing_names_the_volume_and_aws_is_asked_virtual_hosted():
    fake, calls = listing(Listing(OBJECTS))
    report = preflight_stack(stack(), env={}, list_objects=fake)
    model = report.stack.models[0]
    assert model.source.manifest == OBJECTS
    assert common.ModelNames.of(model).weights != common.ModelNames.of(stack().models[0]).weights
    assert calls == [("https://s3.us-east-1.amazonaws.com", "us-east-1", "models", "llama/", None, True)]
    assert any("2 objects, 3.0 GiB to copy" in n for n in report.notes)
    assert report.stack.models[1] == stack().models[1]  # pvc: nothing to ask at preview


def test_pin_false_checks_but_does_not_pin():
    fake, _ = listing(Listing(OBJECTS))
    assert preflight_stack(stack(pin=False), env={}, list_objects=fake).stack.models[0].source.manifest is None


def test_the_override_endpoint_is_asked_path_style_with_this_machines_keys():
    fake, calls = listing(Listing(OBJECTS))
    preflight_stack(stack(), env={ENDPOINT_ENV: "http://127.0.0.1:9000/", "AWS_ACCESS_KEY_ID": "k",
                                  "AWS_SECRET_ACCESS_KEY": "s"}, list_objects=fake)
    (endpoint, _, _, _, creds, virtual_host), = calls
    assert (endpoint, creds.access_key_id, virtual_host) == ("http://127.0.0.1:9000", "k", False)


@pytest.mark.parametrize("answer, line", [
    (S3Error("unauthorized", "HTTP 403 AccessDenied", 403), "models.0.source.credentials: cannot list"),
    (S3Error("bucket_not_found", "HTTP 404 NoSuchBucket", 404), "models.0.source.bucket: bucket 'models' not found"),
    (S3Error("unreachable", "ConnectError: refused"), "models.0.source.endpoint: cannot reach"),
    (S3Error("too_many", "more than 5000 objects under the prefix"), "models.0.source.prefix:"),
    (Listing(()), "models.0.source.prefix: no object under s3://models/llama/"),
])
def test_refusals_name_the_key_to_change(answer, line):
    fake, _ = listing(answer)
    with pytest.raises(PreflightError) as refused:
        preflight_stack(stack(), env={}, list_objects=fake)
    assert refused.value.problems[0].startswith(line), refused.value.problems


def test_too_small_a_volume_says_the_size_to_set():
    fake, _ = listing(Listing(OBJECTS))
    with pytest.raises(PreflightError) as refused:
        preflight_stack(stack(size="1Gi"), env={}, list_objects=fake)
    assert refused.value.problems == [
        "models.0.weights.size: 1Gi (1.0 GiB) is too small for s3://models/llama/: its objects total 3.0 GiB, "
        "3.3 GiB with 10% headroom; set weights.size: 4Gi"]


def test_per_pod_volumes_are_sized_for_two_revisions():
    # multiNode.weights: perPod pulls the next revision beside the serving one (docs/multi-node.md).
    fake, _ = listing(Listing(OBJECTS))
    preflight_stack(stack(size="4Gi"), env={}, list_objects=fake)  # one revision: 3.3 GiB fits
    with pytest.raises(PreflightError) as refused:
        preflight_stack(stack(size="4Gi", multi_node={"nodes": 2, "weights": "perPod"}), env={}, list_objects=fake)
    assert refused.value.problems == [
        "models.0.weights.size: 4Gi (4.0 GiB) is too small for s3://models/llama/: its objects total 3.0 GiB, "
        "6.6 GiB for 2 revisions (a per-pod volume keeps the serving revision while the next is pulled beside it: "
        "multiNode.weights: perPod) with 10% headroom; set weights.size: 7Gi"]


def test_unreachable_with_warn_deploys_unpinned():
    fake, _ = listing(S3Error("unreachable", "ConnectError: refused"))
    report = preflight_stack(stack(on_unreachable="warn"), env={}, list_objects=fake)
    assert report.stack.models[0].source.manifest is None
    assert any("unchecked and unpinned" in w for w in report.warnings)


def test_anonymous_requests_are_not_signed_and_signed_ones_carry_the_scope():
    import datetime

    assert signed_headers("GET", "http://h/b?list-type=2", "us-east-1", None) == {}
    from components.preflight.s3 import Credentials

    at = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
    headers = signed_headers("GET", "http://h:9000/b?list-type=2&prefix=a%2F", "eu-west-1",
                             Credentials("AKID", "secret", "tok"), now=at)
    assert headers["x-amz-date"] == "20261201T120000Z" and headers["x-amz-security-token"] == "tok"
    assert headers["Authorization"].startswith(
        "AWS4-HMAC-SHA256 Credential=AKID/20261201/eu-west-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature=")


# --- source.versionAt ----------------------------------------------------------------------------

AT = "2026-11-30T18:00:00Z"


def versioned_stack(**source):
    return load_stack_config({"models": [{"name": "m", "weights": {"size": "10Gi"}, "source": {
        "type": "s3", "bucket": "models", "prefix": "llama/", "versionAt": AT, **source}}]})


def versions(answer):
    calls = []

    def list_versions_at(endpoint, region, bucket, prefix, creds, version_at, virtual_host=False, part_sizes=False):
        calls.append((bucket, prefix, version_at, virtual_host))
        return answer
    return list_versions_at, calls


def not_latest(*args, **kwargs):
    raise AssertionError("with versionAt the versions are listed, not the latest objects")


def test_version_at_lists_the_versions_at_that_time_and_pins_them():
    fake, calls = versions(Listing(OBJECTS))
    report = preflight_stack(versioned_stack(), env={}, list_objects=not_latest, list_versions_at=fake)
    source = report.stack.models[0].source
    assert calls == [("models", "llama/", AT, True)]
    assert source.manifest == OBJECTS and source.ref.startswith(f"s3://models/llama/@{AT}#")
    assert any(f"read as it was at {AT}" in n for n in report.notes)


@pytest.mark.parametrize("answer, line", [
    (S3Error("not_versioned", "GetBucketVersioning: versioning was never enabled"),
     "models.0.source.versionAt: bucket 'models' at https://s3.us-east-1.amazonaws.com keeps no object versions "
     f"(GetBucketVersioning: versioning was never enabled), so nothing can be read as it was at {AT}; remove "
     "source.versionAt (the latest objects, pinned by their ETags), or enable versioning on the bucket and pin a "
     "time after that"),
    (Listing(()), f"models.0.source.versionAt: no object under s3://models/llama/ at https://s3.us-east-1.amazonaws.com "
     f"at {AT}; write a time after the weights were uploaded, or check source.prefix"),
    (S3Error("bucket_not_found", "HTTP 404 NoSuchBucket", 404), "models.0.source.bucket: bucket 'models' not found"),
], ids=["unversioned-bucket", "nothing-then", "no-bucket"])
def test_version_at_refusals_name_the_key_and_the_fix(answer, line):
    fake, _ = versions(answer)
    with pytest.raises(PreflightError) as refused:
        preflight_stack(versioned_stack(), env={}, list_objects=not_latest, list_versions_at=fake)
    (problem,) = refused.value.problems
    assert problem.startswith(line), problem


def test_a_body_is_signed_by_its_hash():
    import hashlib

    from components.preflight.s3 import Credentials

    headers = signed_headers("PUT", "http://h/b?versioning=", "us-east-1", Credentials("AKID", "s"), body=b"<x/>")
    assert headers["x-amz-content-sha256"] == hashlib.sha256(b"<x/>").hexdigest()


# --- multipart objects: the part size (HEAD ?partNumber=1) --------------------------------------

class Answer:
    def __init__(self, status: int, headers: dict):
        self.status_code, self.headers = status, headers


class Session:
    def __init__(self, answer):
        self.answer, self.urls = answer, []

    def head(self, url, headers, timeout):
        self.urls.append(url)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


SHARD = S3Object(key="model.safetensors", size=(12 << 20) + 7, etag="b" * 32 + "-3")


@pytest.mark.parametrize("answer, expected", [
    (Answer(206, {"Content-Length": str(5 << 20), "x-amz-mp-parts-count": "3"}), 5 << 20),
    (Answer(206, {"Content-Length": str(5 << 20)}), 5 << 20),  # no parts count: the arithmetic must hold
    (Answer(200, {"Content-Length": str((12 << 20) + 7)}),  # a store that ignores partNumber: the whole object
     f"HEAD ?partNumber=1: a part of {(12 << 20) + 7} bytes does not make 3 parts of {(12 << 20) + 7} bytes"),
    (Answer(206, {"Content-Length": str(4 << 20), "x-amz-mp-parts-count": "3"}),
     f"HEAD ?partNumber=1: a part of {4 << 20} bytes does not make 3 parts of {(12 << 20) + 7} bytes"),
    (Answer(206, {"Content-Length": str(5 << 20), "x-amz-mp-parts-count": "4"}), "HEAD ?partNumber=1 says 4 parts, the ETag 3"),
    (Answer(206, {"Content-Length": str(5 << 20), "x-amz-server-side-encryption": "aws:kms"}),
     "encrypted with SSE-KMS or SSE-C: its ETag is not made of MD5s"),
    (Answer(206, {"Content-Length": str(5 << 20), "x-amz-meta-md5chksum": "abc="}), None),  # rclone checks that MD5
    (Answer(501, {}), "HEAD ?partNumber=1: HTTP 501"),
    (requests.ConnectionError("refused"), "HEAD ?partNumber=1: ConnectionError"),
], ids=["206", "no-count", "ignored", "uneven", "count-differs", "sse-kms", "rclone-md5", "refused", "unreachable"])
def test_the_part_size_is_taken_only_when_it_makes_the_etags_parts(answer, expected):
    from components.preflight.s3 import part_size

    session = Session(answer)
    assert part_size(session, "http://h/b/k", "us-east-1", None, SHARD, 3, 1.0, "v 1") == expected
    assert session.urls == ["http://h/b/k?partNumber=1&versionId=v%201"]


def test_multipart_etags():
    from components.preflight.s3 import multipart_parts

    assert [multipart_parts(e) for e in ("a" * 32 + "-12", "a" * 32 + "-1", "a" * 32, "x-2", "")] == [12, 0, 0, 0, 0]


def test_preview_says_which_multipart_objects_get_which_check():
    sized = S3Object(key="a.safetensors", size=3 << 30, etag="c" * 32 + "-2", part_size=2 << 30)
    fake, _ = listing(Listing((*OBJECTS, sized), unsized=(("model.safetensors", "HEAD ?partNumber=1: HTTP 501"),)))
    report = preflight_stack(stack(), env={}, list_objects=fake)
    assert report.stack.models[0].source.manifest == (*OBJECTS, sized)
    assert any("1 objects uploaded in parts: the puller recomputes their multipart ETags" in n for n in report.notes)
    assert report.warnings == ["model 'm': s3://models/llama/: 1 objects uploaded in parts are checked by size only, "
                               "the store gave no part size to recompute their ETags from: model.safetensors "
                               "(HEAD ?partNumber=1: HTTP 501)"]


def test_part_sizes_are_asked_only_for_a_pinned_copy():
    asked = []

    def fake(*args, **kwargs):
        asked.append(kwargs.get("part_sizes", False))
        return Listing(OBJECTS)
    preflight_stack(stack(), env={}, list_objects=fake)
    preflight_stack(stack(pin=False), env={}, list_objects=fake)
    assert asked == [True, False]


def test_the_part_size_is_not_the_sources_identity():
    plain = stack().models[0].source.model_copy(update={"manifest": OBJECTS})
    sized = plain.model_copy(update={"manifest": (OBJECTS[0], OBJECTS[1].model_copy(update={"part_size": 1 << 30}))})
    assert sized.ref == plain.ref  # a stack previewed before part sizes were read keeps its volume
