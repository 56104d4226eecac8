"""Run the gateway's rendered files on a real nginx on loopback, for the tests and the bench.

The nginx is the one the stack ships: 1.26.3 with njs 0.8.9, Debian trixie's packages run with
their own libraries (``scripts/gateway/ensure-nginx-shipped.sh`` fetches and caches them; see
its header). ``LLM_GATEWAY_NGINX=debian12`` runs this machine's nginx 1.22.1 + njs 0.7.9 instead
(``scripts/gateway/ensure-nginx.sh``). Everything that starts an nginx takes its binary and js
module from ``nginx_build()``: the gateway's replicas and its limiter."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from components.compile.gateway.limiter import LIMITER_CONF, LIMITER_HEALTH_PATH
from components.compile.gateway.nginx import GatewaySettings, limiter_files, render_files
from components.compile.gateway.resolver import RESOLVER_FILE, resolver_line
from testkit.ports import free_port

REPO = Path(__file__).resolve().parents[1]
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
    if os.environ.get("LLM_GATEWAY_JS_MODULE"):
        # Another build of the njs module for this nginx (e.g. one with QuickJS, see engine_conf).
        return NginxBuild(binary, os.environ["LLM_GATEWAY_JS_MODULE"])
    if debian12:
        return NginxBuild(binary, DEBIAN12_JS_MODULE)
    # <cache>/bin/nginx -> <cache>/root/usr/lib/nginx/modules/ngx_http_js_module.so
    module = Path(binary).parents[1] / "root" / "usr" / "lib" / "nginx" / "modules" / "ngx_http_js_module.so"
    return NginxBuild(binary, str(module))


def engine_conf(name: str, text: str) -> str:
    """The rendered file as run: with LLM_GATEWAY_JS_ENGINE=qjs (and a module built with QuickJS in
    LLM_GATEWAY_JS_MODULE), nginx.conf and limiter.conf select njs's QuickJS engine; the stack
    sets no js_engine (the image runs njs's own engine)."""
    engine = os.environ.get("LLM_GATEWAY_JS_ENGINE")
    if engine and name.endswith(".conf"):
        return text.replace("\nhttp {\n", f"\nhttp {{\n    js_engine {engine};\n", 1)
    return text


def start_nginx(directory: Path, conf: str, health_url: str, log_name: str) -> tuple[subprocess.Popen, object]:
    """nginx on a rendered config, as an unprivileged user; returns once health_url answers 200."""
    log = open(directory / log_name, "w")
    argv = [nginx_build().binary, "-e", "stderr", "-p", str(directory), "-c", str(directory / conf)]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        # As in the pod: the master process is not root (then nginx never switches users).
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited {proc.returncode}:\n{(directory / log_name).read_text()}")
        try:
            with urllib.request.urlopen(health_url, timeout=1) as reply:
                if reply.status == 200:
                    return proc, log
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nginx did not answer {health_url} within 15 s")


def stop_nginx(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _share(directory: Path) -> None:
    # nginx runs as nobody: it reads these files and writes only under tmp/, like the pod's
    # read-only config mount and /tmp emptyDir.
    os.chmod(directory, 0o755)
    for path in directory.iterdir():
        os.chmod(path, 0o777 if path.is_dir() else 0o644)


class Limiter:
    """The gateway's limiter (limiter.conf) for the tenants of ``settings``, on 127.0.0.1."""

    def __init__(self, settings: GatewaySettings):
        self.dir = Path(tempfile.mkdtemp(prefix="llm-limiter-"))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.settings = replace(settings, config_dir=str(self.dir), scratch_dir=str(self.dir / "tmp"),
                                js_module=nginx_build().js_module, limiter=self.address)
        (self.dir / "tmp").mkdir()
        for name, text in limiter_files(self.settings, listen=self.address).items():
            (self.dir / name).write_text(engine_conf(name, text))
        _share(self.dir)
        self.proc: subprocess.Popen | None = None

    def start(self) -> Limiter:
        self.proc, self.log = start_nginx(self.dir, LIMITER_CONF, f"http://{self.address}{LIMITER_HEALTH_PATH}",
                                          "limiter.log")
        return self

    def stop(self) -> None:
        stop_nginx(self.proc)
        self.proc = None
        self.log.close()

    def close(self) -> None:
        if self.proc is not None:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Limiter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class Gateway:
    """The rendered gateway on 127.0.0.1: ``base`` is its URL; ``files`` what it runs."""

    def __init__(self, settings: GatewaySettings, keys: str | None = None, limiter: Limiter | None = None,
                 dns: str = "127.0.0.1:53", tls: tuple[bytes, bytes] | None = None):
        """``dns``: the resolver nginx asks for the router's name (the pod's start command writes
        the pod's nameservers there; a test with an IP upstream never asks). ``tls``: (certificate
        chain, key) PEM, written where the pod mounts the TLS Secret (``<dir>/tls``); the client
        port then serves HTTPS and ``base`` is ``https://``."""
        self.dir = Path(tempfile.mkdtemp(prefix="llm-gateway-"))
        self.port, self.health_port = free_port(), free_port()
        keys_file = str(self.dir / "keys") if settings.keys_file else None
        # Tenants with limits need the limiter: a shared one (replicas), else one of its own.
        self.own_limiter = None
        if limiter is None and any(t.limited for t in settings.tenants):
            limiter = self.own_limiter = Limiter(settings)
        self.limiter = limiter
        self.settings = replace(settings, listen=f"127.0.0.1:{self.port}", health_listen=f"127.0.0.1:{self.health_port}",
                                internal_listen=f"127.0.0.1:{free_port()}", fold_listen=f"127.0.0.1:{free_port()}",
                                limiter=limiter.address if limiter else None, js_module=nginx_build().js_module,
                                config_dir=str(self.dir), scratch_dir=str(self.dir / "tmp"), keys_file=keys_file,
                                tls_dir=str(self.dir / "tls") if tls else None)
        self.files = render_files(self.settings)
        (self.dir / "tmp").mkdir()
        if tls:
            (self.dir / "tls").mkdir()
            self.write_tls(*tls)
        for name, text in self.files.items():
            (self.dir / name).write_text(engine_conf(name, text))
        (self.dir / "tmp" / RESOLVER_FILE).write_text(resolver_line([dns]))
        if keys_file:
            Path(keys_file).write_text(keys or "")
        _share(self.dir)
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def write_tls(self, chain: bytes, key: bytes) -> None:
        """Replace the served certificate as the kubelet updates a Secret volume: both files
        renamed into place (nginx reads them at each handshake)."""
        tls = self.dir / "tls"
        for name, data in (("tls.key", key), ("tls.crt", chain)):
            staged = tls / f".{name}"
            staged.write_bytes(data)
            os.chmod(staged, 0o644)
            os.replace(staged, tls / name)

    def write_keys(self, text: str) -> None:
        Path(self.settings.keys_file).write_text(text)

    def start(self) -> Gateway:
        if self.own_limiter is not None:
            self.own_limiter.start()
        self.proc, self.log = start_nginx(self.dir, "nginx.conf", f"http://127.0.0.1:{self.health_port}/healthz",
                                          "nginx.log")
        return self

    def errors(self) -> str:
        return (self.dir / "nginx.log").read_text()

    def stop(self) -> None:
        stop_nginx(self.proc)
        self.log.close()
        if self.own_limiter is not None:
            self.own_limiter.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Gateway:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
