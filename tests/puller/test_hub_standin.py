"""The Hub stand-in `scripts/up-local.sh` runs (scripts/localmodel/hub.py): it serves a directory's
files under each repository named, at the endpoint given, and a SIGTERM (cluster.sh stop) ends it
cleanly. Here on loopback; up-local runs it on the real node's bridge."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

from testkit.ports import free_port
from tests.support.builders import ROOT

HUB = ROOT / "scripts" / "localmodel" / "hub.py"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_the_stand_in_serves_each_repo_and_stops_on_sigterm(tmp_path):
    files = tmp_path / "model"
    files.mkdir()
    (files / "config.json").write_text('{"model_type": "llama"}')
    (files / "model.safetensors").write_bytes(b"\0" * 64)
    endpoint = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen([sys.executable, str(HUB), "--endpoint", endpoint, "--repo", "acme/a",
                                "--repo", "acme/b", "--files", str(files)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, info = time.monotonic() + 20, None
        while info is None:
            try:
                info = get_json(f"{endpoint}/api/models/acme/b")
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
                time.sleep(0.1)
        assert sorted(s["rfilename"] for s in info["siblings"]) == ["config.json", "model.safetensors"]
        assert get_json(f"{endpoint}/api/models/acme/a")["id"] == "acme/a"
        with urllib.request.urlopen(f"{endpoint}/acme/a/resolve/main/config.json", timeout=5) as response:
            assert response.read() == b'{"model_type": "llama"}'
    finally:
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=20)
    assert process.returncode == 0, out
    assert out.splitlines()[-1] == "[hub] stopped", out
