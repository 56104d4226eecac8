"""Run the gateway's rendered files on a real nginx (Debian's nginx + njs, installed by
``scripts/gateway/ensure-nginx.sh`` when missing) on loopback, for the tests and the bench."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

from components.compile.gateway.nginx import GatewaySettings, render_files

REPO = Path(__file__).resolve().parents[2]
ENSURE = REPO / "scripts" / "gateway" / "ensure-nginx.sh"
NOBODY = 65534


def nginx_binary() -> str:
    """nginx's path; installs the Debian packages when missing (fails, never skips)."""
    done = subprocess.run(["bash", str(ENSURE)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"installing nginx + njs failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


# An unpacked nginx root (e.g. Debian trixie's nginx 1.26.3 + njs 0.8.9 with its own libraries),
# run through that root's dynamic loader; unset: the host's nginx (ensure-nginx.sh).
NGINX_ROOT = os.environ.get("LLM_GATEWAY_NGINX_ROOT")
LIB = "usr/lib/x86_64-linux-gnu"


def nginx_command() -> list[str]:
    if NGINX_ROOT:
        root = Path(NGINX_ROOT)
        return [str(root / LIB / "ld-linux-x86-64.so.2"), "--library-path", str(root / LIB),
                str(root / "usr/sbin/nginx")]
    return [nginx_binary()]


def js_module(default: str) -> str:
    return str(Path(NGINX_ROOT) / "usr/lib/nginx/modules/ngx_http_js_module.so") if NGINX_ROOT else default


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
                                js_module=js_module(settings.js_module))
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
        self.log = open(self.dir / "nginx.log", "w")
        argv = [*nginx_command(), "-e", "stderr", "-p", str(self.dir), "-c", str(self.dir / "nginx.conf")]
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
