"""The image builds are cached by their inputs (scripts/images/build.py): the same inputs, the same
key and no work; a changed lock, binary or recipe field, a new key."""

from __future__ import annotations

import dataclasses

import pytest

from tests.images.imagekit import build

pytestmark = pytest.mark.unit


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CACHE", tmp_path / "cache")
    lock = tmp_path / "lock.txt"
    lock.write_text("idna==3.21 --hash=sha256:aa\n")
    return dataclasses.replace(build.RECIPES["hf"], inputs=lambda: {"lock": lock}), lock


def test_the_key_is_a_function_of_the_inputs(recipe):
    hf, lock = recipe
    files = build.input_files(hf)
    key = build.cache_key(hf, files)
    assert key == build.cache_key(hf, build.input_files(hf)) and len(key) == 16
    lock.write_text("idna==3.22 --hash=sha256:bb\n")
    assert build.cache_key(hf, files) != key
    lock.write_text("idna==3.21 --hash=sha256:aa\n")
    assert build.cache_key(hf, files) == key
    for change in ({"packages": [*hf.packages, "libnuma1"]}, {"names": ["localhost/x/hf:1"]},
                   {"config": {**hf.config, "User": "1000:0"}}, {"revision": hf.revision + 1}):
        assert build.cache_key(dataclasses.replace(hf, **change), files) != key, change


def test_a_complete_build_is_not_built_again(recipe, monkeypatch):
    hf, _ = recipe
    directory = build.image_dir(hf, build.cache_key(hf, build.input_files(hf)))
    directory.mkdir(parents=True)
    (directory / ".complete").write_text("")

    def no_apt(*_):
        raise AssertionError("a cached image was rebuilt")

    monkeypatch.setattr(build.Apt, "fetch", no_apt)
    assert build.build(hf) == directory


def test_a_missing_input_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(build, "CACHE", tmp_path)
    missing = dataclasses.replace(build.RECIPES["hf"], inputs=lambda: {"lock": tmp_path / "nope.txt"})
    with pytest.raises(build.BuildError, match="missing input"):
        build.build(missing)


def test_the_vllm_image_is_the_0_32_kit_lock_with_its_alias():
    vllm = build.RECIPES["vllm-cpu"]
    assert build.vllm_lock().name == "lock-0.32.txt" and build.vllm_version() == "0.32.0"
    assert vllm.config["Entrypoint"] == ["vllm", "serve"]
    assert vllm.config["User"] == "2000:0"
    assert all(name.endswith(("v0.32.0", "0.32.0")) for name in vllm.names)


def test_skip_present_imports_again_a_name_on_another_digest(recipe, monkeypatch):
    hf, _ = recipe
    monkeypatch.setitem(build.RECIPES, "hf", hf)
    directory = build.image_dir(hf, build.cache_key(hf, build.input_files(hf)))
    directory.mkdir(parents=True)
    (directory / ".complete").write_text("")
    (directory / "provenance.json").write_text('{"oci": {"manifest": "sha256:new"}}')
    imported = []
    monkeypatch.setattr(build, "import_image", lambda path, *_: imported.append(path))

    def listing(digest: str):
        rows = "".join(f"{name} application/vnd.oci.image.manifest.v1+json {digest} 1 MiB linux/amd64 -\n"
                       for name in hf.names)
        return lambda *_a, **_k: type("Done", (), {"stdout": "REF TYPE DIGEST SIZE PLATFORMS LABELS\n" + rows})()

    argv = ["import", "--address", "/nowhere.sock", "--skip-present", "--built-only", "hf"]
    monkeypatch.setattr(build, "run", listing("sha256:new"))
    assert build.main(argv) == 0 and imported == []  # held as built: skipped
    monkeypatch.setattr(build, "run", listing("sha256:old"))
    assert build.main(argv) == 0 and imported == [directory]  # an older build under the name


def test_the_stargate_images_carry_a_ca_bundle(tmp_path):
    # pylon 0.4.0 panics at start without system roots (docs/images.md, Stargate).
    for name in ("router", "pylon"):
        assert build.RECIPES[name].inputs is build.stargate_image_inputs
    inputs = {"pylon": tmp_path / "pylon", "ca_bundle": tmp_path / "ca.crt"}
    inputs["pylon"].write_bytes(b"\x7fELF")
    inputs["ca_bundle"].write_text("-----BEGIN CERTIFICATE-----\n")
    build.copy_binaries(("pylon",))(tmp_path / "rootfs", inputs)
    assert (tmp_path / "rootfs/etc/ssl/certs/ca-certificates.crt").read_text() == "-----BEGIN CERTIFICATE-----\n"
