"""Run the gateway's rendered files on a real nginx on loopback, for the tests and the bench.

The nginx is the one the stack ships: 1.26.3 with njs 0.8.9, Debian trixie's packages run with
their own libraries (``scripts/gateway/ensure-nginx-shipped.sh`` fetches and caches them; see
its header). ``LLM_GATEWAY_NGINX=debian12`` runs this machine's nginx 1.22.1 + njs 0.7.9 instead
(``scripts/gateway/ensure-nginx.sh``). Everything that starts an nginx takes its binary and js
module from ``nginx_build()``."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from components.compile.gateway.nginx import GatewaySettings, render_files

REPO = Path(__file__).resolve().parents[2]
ENSURE_SHIPPED = REPO / "scripts" / "gateway" / "ensure-nginx-shipped.sh"
ENSURE_DEBIAN12 = REPO / "scripts" / "gateway" / "ensure-nginx.sh"
DEBIAN12_JS_MODULE = "/usr/lib/nginx/modules/ngx_http_js_module.so"
NOBODY = 65534


@dataclass(frozen=True)
class NginxBuild:
    binary: str      # what to exec (the shipped build: a wrapper running trixie's loader)
    js_module: str   # the njs module that binary loads (nginx.conf's load_module)


@functools.cache
def nginx_build() -> NginxBuild:
    """The nginx + njs the tests run; fetched and cached when missing (fails, never skips)."""
    debian12 = os.environ.get("LLM_GATEWAY_NGINX") == "debian12"
    ensure = ENSURE_DEBIAN12 if debian12 else ENSURE_SHIPPED
    done = subprocess.run(["bash", str(ensure)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"installing nginx + njs failed ({ensure.name}):\n{done.stderr[-3000:]}")
    binary = done.stdout.strip().splitlines()[-1]
    if debian12:
        return NginxBuild(binary, DEBIAN12_JS_MODULE)
    # <cache>/bin/nginx -> <cache>/root/usr/lib/nginx/modules/ngx_http_js_module.so
    module = Path(binary).parents[1] / "root" / "usr" / "lib" / "nginx" / "modules" / "ngx_http_js_module.so"
    return NginxBuild(binary, str(module))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gateway:
    """The rendered gateway on 127.0.0.1: ``base`` is its URL; ``files`` what it runs."""

    def __init__(self, settings: GatewaySettings, keys: str | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="llm-gateway-"))
        self.port, self.health_port = free_port(), free_port()
        keys_file = str(self.dir / "keys") if settings.keys_file else None
        self.settings = replace(settings, listen=f"127.0.0.1:{self.port}", health_listen=f"127.0.0.1:{self.health_port}",
                                config_dir=str(self.dir), scratch_dir=str(self.dir / "tmp"), keys_file=keys_file,
                                js_module=nginx_build().js_module)
        self.files = render_files(self.settings)
        (self.dir / "tmp").mkdir()
        for name, text in self.files.items():
            (self.dir / name).write_text(text)
        if keys_file:
            Path(keys_file).write_text(keys or "")
        # nginx runs as nobody (below): it reads these files and writes only under tmp/, like the
        # pod's read-only config mount and /tmp emptyDir.
        os.chmod(self.dir, 0o755)
        for path in self.dir.iterdir():
            os.chmod(path, 0o777 if path.is_dir() else 0o644)
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def write_keys(self, text: str) -> None:
        Path(self.settings.keys_file).write_text(text)

    def start(self) -> Gateway:
        binary = nginx_build().binary
        self.log = open(self.dir / "nginx.log", "w")
        argv = [binary, "-e", "stderr", "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")]
        if os.geteuid() == 0 and shutil.which("setpriv"):
            # As in the pod: the master process is not root (then nginx never switches users).
            argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nginx exited {self.proc.returncode}:\n{(self.dir / 'nginx.log').read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/healthz", timeout=1) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not answer its health port within 15 s")

    def errors(self) -> str:
        return (self.dir / "nginx.log").read_text()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
