"""`source.type` (issue 23): the Hub stays the default, s3 and pvc validate, identities are stable."""

from __future__ import annotations

import pytest

from components.compile import common
from components.config import ConfigError, load_stack_config
from components.config.sources import ModelSource, PvcSource, S3Object, S3Source
from tests.support.kube_schema import assert_valid_kubernetes


def one(source: dict, **fields):
    return load_stack_config({"models": [{"name": "m", "source": source, **fields}]}).models[0]


def test_a_source_without_type_is_the_hub_as_before():
    model = one({"repo": "acme/tiny", "revision": "main"})
    assert isinstance(model.source, ModelSource) and model.source.type == "hf"
    assert one({"type": "hf", "repo": "acme/tiny"}).source == model.source
    # The identity (object names) of a Hub model did not move: the names of existing stacks hold.
    assert model.source.ref == "acme/tiny@main"
    assert common.ModelNames.of(model).weights == f"m-weights-{common.source_hash(model)}"


def test_hub_names_are_the_ones_from_before_the_union():
    import hashlib

    model = one({"repo": "acme/tiny", "revision": "v1.0"})
    assert common.source_hash(model) == hashlib.sha256(b"acme/tiny@v1.0").hexdigest()[:8]


def test_s3_defaults_and_identity():
    model = one({"type": "s3", "bucket": "models", "prefix": "llama-8b"})
    source = model.source
    assert isinstance(source, S3Source)
    assert source.prefix == "llama-8b/"  # a folder
    assert source.rclone_provider == "AWS" and source.endpoint_url == "https://s3.us-east-1.amazonaws.com"
    assert source.ref == "s3://models/llama-8b/"
    other = one({"type": "s3", "bucket": "models", "prefix": "llama-8b", "endpoint": "http://minio.storage.svc:9000"})
    assert other.source.rclone_provider == "Other"
    assert other.source.ref == "s3://minio.storage.svc:9000/models/llama-8b/"
    assert common.source_hash(other) != common.source_hash(model)


def test_the_listing_preview_read_is_the_identity():
    source = one({"type": "s3", "bucket": "models", "prefix": "llama"}).source
    listed = source.model_copy(update={"manifest": (S3Object(key="config.json", size=10, etag="a"),
                                                    S3Object(key="model.safetensors", size=99, etag="b"))})
    changed = source.model_copy(update={"manifest": (S3Object(key="config.json", size=10, etag="a"),
                                                     S3Object(key="model.safetensors", size=99, etag="c"))})
    reordered = source.model_copy(update={"manifest": tuple(reversed(listed.manifest))})
    assert listed.ref.startswith("s3://models/llama/#") and listed.ref != source.ref
    assert changed.ref != listed.ref  # one ETag changed: other weights, a new volume and pull
    assert reordered.ref == listed.ref  # the listing's order is not the identity


def test_pvc_source():
    model = one({"type": "pvc", "claimName": "shared-weights", "subPath": "llama/8b/"})
    assert isinstance(model.source, PvcSource)
    assert model.source.sub_path == "llama/8b" and model.source.expect_files == ("config.json",)
    assert model.source.ref == "pvc://shared-weights/llama/8b"


@pytest.mark.parametrize("source, line", [
    ({"type": "s3"}, "models.0.source.bucket: required"),
    ({"type": "nfs"}, "models.0.source.type: 'nfs' is not a source type"),
    ({"repo": "acme/x", "claimName": "w"}, "models.0.source.claimName: a key of `type: pvc` sources"),
    ({"type": "s3", "bucket": "models", "prefx": "a"}, "models.0.source.prefx: unknown field; did you mean `prefix`?"),
])
def test_errors_name_the_key_of_the_stack_file(source, line):
    with pytest.raises(ConfigError) as caught:
        one(source)
    assert line in str(caught.value)


def test_s3_and_pvc_objects_are_valid_kubernetes():
    from components.compile.plan import compile_stack

    config = load_stack_config({"platform": {"networkPolicy": {"enabled": True, "allowFrom": [
        {"namespaceSelector": {"kubernetes.io/metadata.name": "apps"}}]}}, "models": [
        {"name": "objstore", "source": {"type": "s3", "bucket": "models", "prefix": "llama/",
                                        "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "k"}}},
        {"name": "onclaim", "source": {"type": "pvc", "claimName": "shared-weights", "subPath": "llama"}}]})
    manifests = compile_stack(config)
    for manifest in manifests:
        assert_valid_kubernetes(manifest)
    (job,) = [m for m in manifests if m["kind"] == "Job" and m["metadata"]["name"].startswith("objstore")]
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [42]
    assert not [m for m in manifests if m["kind"] == "PersistentVolumeClaim" and "onclaim" in m["metadata"]["name"]]


# --- source.versionAt: a versioned bucket as it was at a time ----------------------------------

S3 = {"type": "s3", "bucket": "models", "prefix": "llama"}


def test_version_at_is_utc_and_part_of_the_identity():
    plain = one(S3)
    pinned = one({**S3, "versionAt": "2026-11-30T18:00:00Z"})
    same_instant = one({**S3, "versionAt": "2026-11-30T19:00:00+01:00"})
    later = one({**S3, "versionAt": "2026-11-30T18:00:01Z"})
    assert pinned.source.version_at == same_instant.source.version_at == "2026-11-30T18:00:00Z"
    assert pinned.source.ref == "s3://models/llama/@2026-11-30T18:00:00Z"
    # Another time is another pull; the same instant written another way is the same volume.
    assert common.source_hash(pinned) == common.source_hash(same_instant)
    assert len({common.source_hash(m) for m in (plain, pinned, later)}) == 3
    # Without versionAt the identity is exactly the one from before the field existed.
    assert plain.source.ref == "s3://models/llama/" and plain.source.version_at is None


def test_version_at_read_by_yaml_as_a_timestamp_is_accepted():
    import yaml

    raw = yaml.safe_load("source: {type: s3, bucket: models, versionAt: 2026-11-30T18:00:00.5Z}")
    assert one(raw["source"]).source.version_at == "2026-11-30T18:00:00.5Z"


@pytest.mark.parametrize("value, says", [
    ("2026-11-30", "is not an RFC 3339 time; write a date, a time and its offset, e.g. '2026-11-30T18:00:00Z'"),
    ("2026-11-30T18:00:00", "is not an RFC 3339 time"),
    ("2026-02-30T18:00:00Z", "is not a valid date and time; write an RFC 3339 time in UTC"),
    ("1h", "is not an RFC 3339 time"),
    ("2999-01-01T00:00:00Z", "2999-01-01T00:00:00Z is in the future (now is "),
], ids=["date-only", "no-offset", "no-such-day", "duration", "future"])
def test_bad_version_at_names_the_field_and_the_fix(value, says):
    with pytest.raises(ConfigError) as caught:
        one({**S3, "versionAt": value})
    (line,) = caught.value.problems
    assert line.startswith("models.0.source.versionAt: ") and says in line, line


def test_the_future_is_checked_against_the_clock():
    import datetime

    from components.config.sources import check_version_at

    now = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
    assert check_version_at("2026-12-01T12:00:00Z", now=now) == "2026-12-01T12:00:00Z"
    with pytest.raises(ValueError, match="in the future"):
        check_version_at("2026-12-01T12:00:00.000001Z", now=now)


def test_the_puller_reads_the_bucket_at_that_time_and_nothing_else_changes():
    from components.compile import weights

    def remote_env(model):
        job = weights.compile_puller_job(model, load_stack_config({}).platform)
        spec = job["spec"]["template"]["spec"]
        return [{e["name"]: e.get("value") for e in c["env"]} for c in [*spec["initContainers"], *spec["containers"]]]

    pinned = remote_env(one({**S3, "versionAt": "2026-11-30T18:00:00Z"}))
    plain = remote_env(one(S3))
    assert [env.get("RCLONE_CONFIG_SRC_VERSION_AT") for env in pinned] == ["2026-11-30T18:00:00Z"] * 2  # pull, verify
    assert [env.get("RCLONE_CONFIG_SRC_VERSION_AT") for env in plain] == [None, None]
    assert [{k: v for k, v in env.items() if k != "RCLONE_CONFIG_SRC_VERSION_AT"} for env in pinned] == plain


def test_a_streamed_source_cannot_be_pinned_to_a_time():
    # The stream reads the objects as they are; only the copy honours versionAt.
    with pytest.raises(ConfigError) as caught:
        one({**S3, "load": "stream", "versionAt": "2026-11-30T18:00:00Z"}, resources={"memory": "16Gi"})
    (line,) = caught.value.problems
    assert line.startswith("models.0.source.versionAt: a streamed server reads the objects as they are"), line
    assert one({**S3, "load": "stream"}, resources={"memory": "16Gi"}).source.version_at is None
