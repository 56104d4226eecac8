"""The kit's own rules: skip only without the sources, fail on a failed build, and refuse to run
an address it does not know how to localize (so a new rendered address cannot slip through
unrewritten, or be silently dropped)."""

from __future__ import annotations

import pytest
from _pytest.outcomes import Failed, Skipped

from testkit import stargate as kit

# The kit's own logic, on fakes: no binary runs (tests/tiers.py).
pytestmark = pytest.mark.unit


@pytest.fixture
def fresh_build(monkeypatch):
    monkeypatch.setattr(kit, "_built", {})


def test_without_the_sources_the_suite_skips_saying_why(monkeypatch, fresh_build):
    monkeypatch.setattr(kit, "shared_dir", lambda: None)
    with pytest.raises(Skipped) as skipped:
        kit.require_binaries()
    assert "sources are not on this machine" in str(skipped.value)


def test_with_the_sources_a_failed_build_fails(monkeypatch, fresh_build, tmp_path):
    (tmp_path / "vendor" / "stargate").mkdir(parents=True)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "build-stargate.sh").write_text("echo 'cargo: error[E0433]' >&2; exit 101\n")
    monkeypatch.setattr(kit, "shared_dir", lambda: tmp_path)
    monkeypatch.setattr(kit, "BUILD_LOCK", tmp_path / "build.lock")
    with pytest.raises(Failed) as failed:
        kit.require_binaries()
    assert "did not build" in str(failed.value) and "E0433" in str(failed.value)


def test_unknown_addresses_are_refused_and_every_rewrite_is_recorded():
    local = kit.Localizer("pod-0", "ns", {})
    with pytest.raises(ValueError):
        local(["--some-new-listen-addr=0.0.0.0:1234"], {})
    with pytest.raises(ValueError):
        local(["--peer=http://x.ns.svc.cluster.local:50071"], {})
    with pytest.raises(KeyError):
        local(["--tls-cert-path=/etc/unknown.crt"], {})
    out = local(["--stargate-id=$(POD_NAME)", "--listen-addr=0.0.0.0:50071", "--keep=1"],
                {"--listen-addr": "127.0.0.1:9"}, ("--added=1",))
    assert out == ["--stargate-id=pod-0", "--listen-addr=127.0.0.1:9", "--keep=1", "--added=1"]
    assert len(local.rewrites) == 3


def test_the_profile_reaches_the_build_script_and_each_is_cached_apart(monkeypatch, fresh_build, tmp_path):
    (tmp_path / "vendor" / "stargate").mkdir(parents=True)
    (tmp_path / "tools").mkdir()
    for profile in ("debug", "release"):
        for name in ("stargate", "stargate-k8s-router", "pylon"):
            binary = tmp_path / profile / name
            binary.parent.mkdir(exist_ok=True)
            binary.write_text("#!/bin/sh\n")
            binary.chmod(0o755)
    # As the real script: the directory for $STARGATE_PROFILE, printed last.
    (tmp_path / "tools" / "build-stargate.sh").write_text(f'echo "{tmp_path}/$STARGATE_PROFILE"\n')
    monkeypatch.setattr(kit, "shared_dir", lambda: tmp_path)
    monkeypatch.setattr(kit, "BUILD_LOCK", tmp_path / "build.lock")
    assert kit.build_binaries() == tmp_path / "debug"
    assert kit.build_binaries(profile="release") == tmp_path / "release"
    assert kit.build_binaries() == tmp_path / "debug"
    with pytest.raises(ValueError):
        kit.build_binaries(profile="fast")
