"""The gateway script's own tests: tests/gateway/js/*.test.mjs under node's test runner, on the
real components/compile/gateway/gateway.js (unmodified; tests/gateway/js/hooks.mjs resolves its
settings import to the module rendered here by the compiler's own ``settings_module``).

Needs only node (>= 20.6, for module hooks); a failing JS test fails this one, with node's report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from components.compile.gateway.nginx import GatewaySettings, settings_module

HERE = Path(__file__).parent / "js"
REPO = Path(__file__).resolve().parents[2]


def test_the_scripts_own_tests_pass(tmp_path):
    node = shutil.which("node")
    assert node, "node is needed for the gateway script's tests (tests/gateway/js)"
    config = tmp_path / "gateway_config.js"
    config.write_text(settings_module(GatewaySettings(upstream="127.0.0.1:1", models=("m",),
                                                      session_header="x-session-id",
                                                      splits=(("m", "m-next", 30),))))
    done = subprocess.run([node, "--import", str(HERE / "hooks.mjs"), "--test", str(HERE)],
                          cwd=REPO, env={**os.environ, "GATEWAY_CONFIG": str(config)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# pass 0" not in done.stdout, done.stdout[-2000:]
