"""Conformance kit: the real Stargate binaries, started on loopback with OUR rendered arguments.

The public Stargate sources (NVIDIA/nvcf@fadc0f8, Stargate 0.4.0) are vendored beside the
repository at ``../shared/vendor/stargate``; ``../shared/tools/build-stargate.sh`` builds
``stargate`` (the router), ``stargate-k8s-router`` (the backend router) and ``pylon`` (cached
under ``~/.cache/llm-serving-stargate``; ~10-30 min of CPU cold, instant warm). Where the sources
are present the suite builds and runs (a failed build fails it); where they are absent the whole
suite skips, saying why (``require_binaries``).

How to start the router stack (e.g. for the gateway's tests)
------------------------------------------------------------
Fixtures (``tests/conformance/conftest.py``; put your test module in ``tests/conformance/``):

- ``stargate_bin`` (session): the directory holding the three binaries (builds them if missing).
- ``router_stack`` (function): a factory; every stack it starts is stopped at teardown::

      def test_something(router_stack):
          stack = router_stack()                      # router + 1 pylon + 1 fake engine, registered
          stack = router_stack(engines=2)             # two engine "pods" (two pylons, two engines)
          stack = router_stack(router={"loadBalancer": {...}})  # extra `llm-serving:router` settings
          stack = router_stack(backend=True)          # through stargate-k8s-router (the cluster)

  ``router_stack(...)`` takes ``router`` (a dict merged into the router section of a stack like
  ``stacks/Pulumi.local.yaml``: release, replicas, tls, loadBalancer, ...), ``engines`` (int),
  ``backend`` (bool: a 2-replica router topology; one router "pod" runs, published as an
  EndpointSlice in a fresh namespace of the simulated cluster, and the backend router watches it;
  needs ``KUBECONFIG`` and, by the team's rule, the cluster lock around the run), ``cluster`` (a
  ``Cluster``, default the ``cluster_namespace`` fixture's), ``tls`` (a ``TlsFiles`` from
  ``make_ca_issued_tls``: the Secret a CA issuer writes; the router section gets ``tls.enabled``)
  and ``release`` (default ``public-0.4``, the line of the binaries).
- A real engine instead of the fakes: ``RouterStack(stack, bin_dir, workdir,
  upstreams=(url, ...))`` puts one pylon in front of each engine already running at those base
  URLs (the caller starts and stops them: e.g. the real vLLM of the engine kit).

``RouterStack`` (what the factory returns, already registered):

- ``stack.http_url``: the router's HTTP listener (``http://127.0.0.1:<port>``), i.e. what the
  in-cluster Service ``<router>:8000`` serves. Point the gateway's upstream at it.
- ``stack.model``: the model id pylons register (``chat``); ``stack.engines``: the
  ``FakeEngine``s (``.requests``, ``.user_requests()``, ``.override``, ``.chunk_delay_s``,
  ``.name``; each answers ``Hello from <name>``).
- ``stack.post(path, body, headers=None)`` -> ``Reply(status, headers, body)``: one request with
  the contract headers (``contract_headers``: ``x-request-id``, ``x-model``, ``x-input-tokens``)
  unless ``headers`` is given; ``stack.get(path)``.
- ``stack.restart_router()``, ``stack.restart_pylon(i)``, ``stack.stop()``;
  ``stack.rewrites``: every rewrite applied to the rendered arguments (below).
- Without pytest: ``RouterStack(stack_config(...), bin_dir=build_binaries(), workdir=...).start()``
  and ``.stop()`` in a ``finally``; ``build_binaries(profile="release")`` for the optimised build
  (benchmarks), ``RouterStack(..., engine=factory)`` for engines that are not the in-process fake.

What is rewritten to run outside a pod (everything else is the compiler's output, verbatim)
-----------------------------------------------------------------------------------------
- ``$(POD_NAME)``, ``$(POD_NAMESPACE)``, ``$(POD_IP)``: expanded as the kubelet would (a pod
  name chosen by the kit; the stack namespace; ``127.0.0.1``), and set as env (clap reads
  ``POD_NAME``/``POD_NAMESPACE``).
- Listen addresses ``0.0.0.0:<port>`` (``--listen-addr``, ``--http-listen-addr``,
  ``--reverse-tunnel-listen-addr``, ``--health-listen-addr``) and ``--advertise-addr``: to
  ``127.0.0.1:<free port>``; ``--metrics-port``: a free port. Several pods share one host here.
  With the backend router, the router pod's gRPC and QUIC listeners (and ``$(POD_IP)``) use the
  address its EndpointSlice carries: 127.0.0.1 where the API server accepts it, else this
  machine's own IPv4 (Kubernetes refuses loopback endpoint addresses; ``Cluster.endpoint_address``).
- Added ``--model-discovery-listen-addr=127.0.0.1:<free port>`` on the router (its default
  ``0.0.0.0:50073`` is fixed; two router "pods" on one host would collide), and
  ``--metrics-host=127.0.0.1`` on pylon (default ``0.0.0.0``).
- Cluster DNS names do not resolve here: ``--stargate-address`` (pylon), ``--grpc-pylon-dial-addr``
  and ``--reverse-tunnel-pylon-dial-addr`` (router) point at the loopback port of the Service they
  name (the router's own, or the backend router's). Without the backend router the rendered
  router has no dial address (pylons dial its advertised name, a Service DNS name): the kit adds
  both, pointing at the router's loopback ports. The advertised hostname (``:authority`` and QUIC
  SNI) is never rewritten, so TLS names are checked as in a cluster.
- ``--upstream-http-base-url=http://127.0.0.1:8000`` (the engine in the same pod): the fake
  engine's port, or the real engine's URL (``upstreams``).
- File paths (``--tls-cert-path``, ``--tls-key-path``, ``--lb-config-path``,
  ``--auth-token-file``, ``--worker-auth-file``): the same files, under the test's directory, with
  the content the mounted Secret / ConfigMap / init container would give them.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from components.compile import pylon as pylon_compile
from components.compile.router import compile_router, lb
from components.compile.router import names as router_names
from components.config import StackConfig, load_stack_config
from components.config.model import revision_model
from testkit.fake_engine import FakeEngine
from testkit.ports import free_port, host_ipv4

REPO = Path(__file__).resolve().parents[1]
ROUTER_NAME = "llm-router"
MODEL = "chat"


# --- the binaries ----------------------------------------------------------------------------
def shared_dir() -> Optional[Path]:
    """``../shared`` beside the repository (for a git worktree, beside the main checkout too)."""
    candidates = [REPO.parent / "shared"]
    git = REPO / ".git"
    if git.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        gitdir = Path(git.read_text().split(":", 1)[1].strip())
        candidates.append(gitdir.parents[2].parent / "shared")
    for candidate in candidates:
        if (candidate / "vendor" / "stargate").is_dir():
            return candidate
    return None


BUILD_LOCK = Path(os.environ.get("STARGATE_CACHE_DIR", Path.home() / ".cache" / "llm-serving-stargate")) / ".build.lock"
_built: dict[str, Path] = {}


def build_binaries(timeout_s: float = 3 * 3600, profile: str = "debug") -> Path:
    """Build (or find cached) the three binaries; the directory holding them. Raises on failure.
    One build at a time on this machine (a file lock): the script is cached, a second caller
    waits and then returns at once. ``profile``: ``debug`` (the tests) or ``release`` (the
    benchmarks: the debug build is many times slower per request), each cached apart."""
    if profile not in ("debug", "release"):
        raise ValueError(f"profile must be debug or release, not {profile!r}")
    if profile in _built:
        return _built[profile]
    shared = shared_dir()
    if shared is None:
        raise FileNotFoundError("no ../shared/vendor/stargate beside the repository")
    BUILD_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(BUILD_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        result = subprocess.run(["nice", "-n", "10", "bash", str(shared / "tools" / "build-stargate.sh")],
                                capture_output=True, text=True, timeout=timeout_s,
                                env={**os.environ, "STARGATE_PROFILE": profile})
    if result.returncode != 0:
        raise RuntimeError(f"build-stargate.sh failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    bin_dir = Path(result.stdout.strip().splitlines()[-1])
    for name in ("stargate", "stargate-k8s-router", "pylon"):
        if not os.access(bin_dir / name, os.X_OK):
            raise RuntimeError(f"build-stargate.sh printed {bin_dir}, which has no {name}")
    _built[profile] = bin_dir
    return bin_dir


def require_binaries() -> Path:
    """For fixtures: skip (whole suite) without the sources, fail when the build fails."""
    import pytest

    if shared_dir() is None:
        pytest.skip("conformance suite skipped as a whole: the Stargate sources are not on this machine "
                    f"(expected {REPO.parent / 'shared' / 'vendor' / 'stargate'}); they are needed to build "
                    "the real router, backend router and pylon")
    try:
        return build_binaries()
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        pytest.fail(f"the Stargate sources are present but the binaries did not build: {error}")


# --- small helpers ---------------------------------------------------------------------------


def wait_until(check: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.2,
               context: Callable[[], str] = lambda: "") -> Any:
    """Poll ``check`` until it returns a truthy value; bounded in time (and so in count)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as error:  # noqa: BLE001 - polled; reported on timeout
            last = error
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what} (last: {last!r})\n{context()}")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def sse_data(self) -> list[str]:
        """The ``data:`` payloads of an event stream, in order."""
        return [line[5:].strip() for line in self.body.decode().splitlines() if line.startswith("data:")]


def http(method: str, url: str, body: Any = None, headers: Optional[dict] = None, timeout_s: float = 30) -> Reply:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    if data is not None and "content-type" not in {k.lower() for k in request.headers}:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return Reply(response.status, {k.lower(): v for k, v in response.headers.items()}, response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, {k.lower(): v for k, v in error.headers.items()}, error.read())


def contract_headers(model: str = MODEL, input_tokens: int = 8, request_id: Optional[str] = None,
                     **extra: str) -> dict[str, str]:
    """The headers the router requires of its gateway (api-gateway-contract.md)."""
    headers = {"x-request-id": request_id or f"req-{uuid.uuid4().hex[:12]}", "x-model": model,
               "x-input-tokens": str(input_tokens)}
    headers.update({k.replace("_", "-"): v for k, v in extra.items()})
    return headers


def chat_body(text: str = "hi", stream: bool = True, model: str = MODEL, **extra: Any) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": stream, **extra}


def shape(value: Any) -> Any:
    """Keys and value types, recursively (lists by their first item): two answers alike in form."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    return type(value).__name__


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Every field by its path (lists by their first item), containers included."""
    found: dict[str, Any] = {path: value} if path else {}
    if isinstance(value, dict):
        for key, item in value.items():
            found.update(_leaves(item, f"{path}.{key}" if path else key))
    elif isinstance(value, list) and value:
        found.update(_leaves(value[0], f"{path}[0]"))
    return found


def _empty(value: Any) -> bool:
    return value is None or value == [] or value == {}


def fold_differences(ours: dict, theirs: dict) -> list[str]:
    """How a folded answer differs from the engine's own non-streaming answer, beyond what a stream
    cannot carry: a field in both must have the same type; a field in one only must be empty there
    (null or an empty list: the engine's extras that no stream chunk carries, e.g. vLLM 0.11's
    usage.prompt_tokens_details, a field named per engine line that was not streamed, 0.11's empty
    tool_calls list); the top-level fields keep the engine's order. Empty when the two are alike."""
    mine, real = _leaves(ours), _leaves(theirs)
    problems = [f"{path}: {type(mine[path]).__name__} here, {type(real[path]).__name__} from the engine"
                for path in mine.keys() & real.keys() if type(mine[path]) is not type(real[path])]
    problems += [f"{path}: only from the engine, and not empty ({real[path]!r})"
                 for path in real.keys() - mine.keys() if not _empty(real[path])]
    problems += [f"{path}: only here, and not empty ({mine[path]!r})"
                 for path in mine.keys() - real.keys() if not _empty(mine[path])]
    common = [key for key in theirs if key in ours]
    if [key for key in ours if key in theirs] != common:
        problems.append(f"top-level order {list(ours)}, the engine's {list(theirs)}")
    return sorted(problems)


# --- processes -------------------------------------------------------------------------------
class Proc:
    """One binary, its own process group, output to a log file; stop() always reaps it."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path):
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.popen: Optional[subprocess.Popen] = None
        self.starts = 0

    def start(self) -> Proc:
        self.starts += 1
        with open(self.log, "ab") as out:
            out.write(f"\n--- start {self.starts}: {' '.join(self.argv)}\n".encode())
            self.popen = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace_s: float = 5.0) -> Optional[int]:
        if self.popen is None:
            return None
        popen, self.popen = self.popen, None
        if popen.poll() is None:
            try:
                os.killpg(popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                popen.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(10)
        return popen.returncode

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return f"--- {self.name} ({self.log}) ---\n" + "\n".join(text[-lines:])


# --- rendered arguments, localized ----------------------------------------------------------
def stack_config(router: Optional[dict] = None, namespace: str = "llm-serving", models: tuple[str, ...] = (MODEL,),
                 release: str = "public-0.4", next_revision: Optional[dict] = None) -> StackConfig:
    """A stack like ``stacks/Pulumi.local.yaml`` (one router, pylons, open worker auth) with
    ``router`` merged into its router section; the router line defaults to the public one (the
    build that runs here). ``next_revision``: the first model's `next` (models[].next)."""
    section: dict = {
        "name": ROUTER_NAME, "image": "nvcr.io/nvidia/llm-request-router:0.4.0", "release": release,
        # The fake engine answers in milliseconds: pylon starts from a matching input rate. At
        # the default 100 tokens/s, two concurrent requests on one engine trip pylon's
        # queue-mismatch admission (429 to the router, which retries, then answers 503).
        "replicas": 1, "pylon": {"image": "nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0",
                                 "initialInputTps": 100000},
        "workerAuth": {"mode": "open"},
    }
    section.update(router or {})
    return load_stack_config({
        "platform": {"namespace": namespace},
        "models": [{"name": name, "source": {"repo": "Qwen/Qwen2.5-0.5B-Instruct"},
                    **({"next": next_revision} if next_revision and index == 0 else {})}
                   for index, name in enumerate(models)],
        "router": section,
    })


def container_args(workload: dict, name: str) -> list[str]:
    (container,) = [c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name]
    return list(container["args"])


@dataclass
class Rendered:
    """What the compiler renders for the router's processes (verbatim)."""

    router: list[str]
    backend: Optional[list[str]]
    pylon: dict[str, list[str]]
    files: dict[str, str] = field(default_factory=dict)  # in-pod path -> content (ConfigMaps)
    backend_sidecars: list[dict] = field(default_factory=list)  # the backend router's init containers


def rendered(stack: StackConfig) -> Rendered:
    manifests = compile_router(stack)
    files: dict[str, str] = {}
    if manifests.lb_config is not None:
        files[lb.LB_PATH] = manifests.lb_config["data"][lb.LB_FILE]
    backend = manifests.backend_deployment
    return Rendered(
        router=container_args(manifests.workload, "router"),
        backend=container_args(backend, "backend-router") if backend is not None else None,
        # A model's next revision (models[].next) has pods of its own: its pylon registers it.
        pylon={m.name: pylon_compile.pylon_args(m, stack)
               for served in stack.models for m in ((served, revision_model(served)) if served.next else (served,))
               if pylon_compile.is_fronted(m, stack)},
        files=files,
        backend_sidecars=list(backend["spec"]["template"]["spec"].get("initContainers", [])) if backend else [],
    )


# A cluster DNS name with a port: an address some process dials (not a template or DNS name).
_DIAL = re.compile(r"\.svc\.cluster\.local:\d+")
_VAR = re.compile(r"\$\((POD_NAME|POD_NAMESPACE|POD_IP)\)")
PATH_FLAGS = ("--tls-cert-path", "--tls-key-path", "--lb-config-path", "--auth-token-file", "--worker-auth-file")


class Localizer:
    """Rewrites rendered args for loopback, recording each rewrite (see the module docstring)."""

    def __init__(self, pod: str, namespace: str, paths: dict[str, Path], pod_ip: str = "127.0.0.1"):
        self.pod, self.namespace, self.paths, self.pod_ip = pod, namespace, paths, pod_ip
        self.rewrites: list[str] = []

    def expand(self, arg: str) -> str:
        values = {"POD_NAME": self.pod, "POD_NAMESPACE": self.namespace, "POD_IP": self.pod_ip}
        return _VAR.sub(lambda m: values[m.group(1)], arg)

    def __call__(self, args: list[str], replace: dict[str, str], add: tuple[str, ...] = ()) -> list[str]:
        out = []
        for raw in args:
            arg = self.expand(raw)
            flag, eq, value = arg.partition("=")
            if flag in replace:
                new = f"{flag}={replace[flag]}"
            elif flag in PATH_FLAGS and eq:
                if value not in self.paths:
                    raise KeyError(f"{flag}={value}: the kit has no local file for this path")
                new = f"{flag}={self.paths[value]}"
            elif "0.0.0.0:" in value or _DIAL.search(value):
                raise ValueError(f"{raw}: an address the kit does not know how to localize")
            else:
                new = arg
            if new != raw:
                self.rewrites.append(f"{raw} -> {new}")
            out.append(new)
        for extra in add:
            self.rewrites.append(f"(added) {extra}")
            out.append(extra)
        return out


# --- TLS material ----------------------------------------------------------------------------
@dataclass
class TlsFiles:
    """What cert-manager's CA issuer writes to the Secret: tls.crt (the leaf only), tls.key and
    ca.crt (the issuing CA)."""

    dir: Path
    crt: Path
    key: Path
    ca: Path


def make_ca_issued_tls(directory: Path, dns_names: list[str]) -> TlsFiles:
    """A CA and a leaf it signs for ``dns_names`` (openssl), laid out as cert-manager's CA issuer
    lays out the Secret: ``<directory>/secret`` holds exactly tls.crt, tls.key and ca.crt."""
    work, secret = directory / "issuer", directory / "secret"
    work.mkdir(parents=True, exist_ok=True)
    secret.mkdir(parents=True, exist_ok=True)

    def run(*argv: str) -> None:
        subprocess.run(argv, check=True, capture_output=True, cwd=work, timeout=60)

    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=conformance-internal-ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "tls.key", "-out", "leaf.csr", "-subj", f"/CN={dns_names[0]}")
    (work / "leaf.ext").write_text(
        "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=" + ",".join(f"DNS:{n}" for n in dns_names) + "\n")
    run("openssl", "x509", "-req", "-in", "leaf.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "tls.crt", "-days", "2", "-extfile", "leaf.ext")
    for name in ("tls.crt", "tls.key", "ca.crt"):
        (secret / name).write_bytes((work / name).read_bytes())
    return TlsFiles(secret, secret / "tls.crt", secret / "tls.key", secret / "ca.crt")


# --- the simulated cluster's EndpointSlices --------------------------------------------------
def pod_slice(namespace: str, service: str, pod: str, grpc: int, quic: int, ready: bool = True,
              address: str = "127.0.0.1") -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{service}-{pod}", "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": service,
                                "endpointslice.kubernetes.io/managed-by": "conformance-kit"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": ready, "serving": ready,
                                                                  "terminating": False},
                       "targetRef": {"kind": "Pod", "name": pod, "namespace": namespace}}],
        "ports": [{"name": "grpc", "port": grpc, "protocol": "TCP"},
                  {"name": "quic", "port": quic, "protocol": "UDP"}],
    }


class Cluster:
    """The simulated cluster's API (KUBECONFIG): a namespace for the test and its slices."""

    def __init__(self, namespace: str):
        from kubernetes import client, config

        config.load_kube_config()
        self.core, self.discovery, self.namespace = client.CoreV1Api(), client.DiscoveryV1Api(), namespace
        self.created_namespace = False

    def ensure_namespace(self) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.core.create_namespace({"metadata": {"name": self.namespace,
                                                     "labels": {"llm-serving/test": "conformance"}}})
            self.created_namespace = True
        except ApiException as error:
            if error.status != 409:
                raise

    def endpoint_address(self) -> str:
        """127.0.0.1 when the API server takes it as an endpoint address; otherwise (Kubernetes
        validation refuses loopback endpoint IPs) this machine's own non-loopback IPv4, which a
        router "pod" then listens on for gRPC and QUIC."""
        from kubernetes.client.rest import ApiException

        probe = pod_slice(self.namespace, "conformance-probe", "probe", 1, 2)
        try:
            self.discovery.create_namespaced_endpoint_slice(self.namespace, probe, dry_run="All")
            return "127.0.0.1"
        except ApiException as error:
            if error.status != 422:
                raise
        return host_ipv4()

    def apply_slice(self, body: dict) -> None:
        from kubernetes.client.rest import ApiException

        name = body["metadata"]["name"]
        try:
            self.discovery.create_namespaced_endpoint_slice(self.namespace, body)
        except ApiException as error:
            if error.status != 409:
                raise
            self.discovery.replace_namespaced_endpoint_slice(name, self.namespace, body)

    def delete_slice(self, name: str) -> None:
        from kubernetes.client.rest import ApiException

        try:
            self.discovery.delete_namespaced_endpoint_slice(name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise

    def cleanup(self) -> None:
        if self.created_namespace:
            self.core.delete_namespace(self.namespace)


# --- the stack -------------------------------------------------------------------------------
@dataclass
class RouterPorts:
    grpc: int = field(default_factory=free_port)
    http: int = field(default_factory=free_port)
    quic: int = field(default_factory=lambda: free_port(socket.SOCK_DGRAM))
    metrics: int = field(default_factory=free_port)
    discovery: int = field(default_factory=free_port)


@dataclass
class BackendPorts:
    grpc: int = field(default_factory=free_port)
    quic: int = field(default_factory=lambda: free_port(socket.SOCK_DGRAM))
    health: int = field(default_factory=free_port)


class RouterStack:
    """Router (+ backend router) + one pylon and fake engine per engine "pod", on loopback."""

    def __init__(self, stack: StackConfig, bin_dir: Path, workdir: Path, engines: int = 1,
                 tls: Optional[TlsFiles] = None, cluster: Optional[Cluster] = None,
                 start_timeout_s: float = 90, engine: Callable[[str, str], Any] = FakeEngine,
                 upstreams: tuple[str, ...] = (), pod_models: tuple[str, ...] = ()):
        self.stack, self.bin, self.dir = stack, bin_dir, workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.render = rendered(stack)
        self.model = next(iter(self.render.pylon))
        # Whose pylon each engine "pod" runs (a model's or its next revision's); default: the first model's.
        self.pod_models = tuple(pod_models) or (self.model,) * (len(upstreams) or engines)
        self.namespace = stack.platform.namespace
        self.tls, self.cluster, self.start_timeout_s = tls, cluster, start_timeout_s
        # Engines the caller runs (``upstreams``, their base URLs: one pylon each, never started
        # or stopped here), or engines this stack owns: ``engine(name, model)``, anything with
        # start() / stop() / url (the fake engine, or it in a process of its own:
        # bench/concurrency.py, its CPU apart from the caller's).
        self.upstreams = tuple(upstreams)
        self.engines = [] if upstreams else [engine(f"engine-{i}", self.pod_models[i]) for i in range(engines)]
        self.ports = RouterPorts()
        self.backend_ports = BackendPorts() if self.render.backend is not None else None
        self.router_pod = f"{ROUTER_NAME}-7c9d8-x{uuid.uuid4().hex[:4]}"
        # The router pod's IP: loopback, unless its EndpointSlice needs another (endpoint_address).
        self.pod_ip = "127.0.0.1"
        self.rewrites: list[str] = []
        self.procs: list[Proc] = []
        self.router: Optional[Proc] = None
        self.backend: Optional[Proc] = None
        self.pylons: list[Proc] = []
        self._paths = self._files()
        self._backend_paths = self._paths

    # -- files the pods would mount -----------------------------------------------------------
    def _files(self) -> dict[str, Path]:
        """In-pod path -> local file, for the router and pylons."""
        paths: dict[str, Path] = {}
        for in_pod, content in self.render.files.items():
            local = self.dir / "mounts" / in_pod.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(content)
            paths[in_pod] = local
        if self.tls is not None:
            paths[router_names.TLS_CERT] = self.tls.crt
            paths[router_names.TLS_KEY] = self.tls.key
            paths[pylon_compile.ROUTER_CA_FILE] = self.tls.ca
        return paths

    def start_backend_sidecars(self) -> dict[str, Path]:
        """Run the backend router's rendered init containers that are sidecars (the TLS chain):
        their own command, by /bin/sh, with the mount paths rewritten to local directories (the
        Secret: the TLS directory; the emptyDir: a fresh one). Returns the backend router's paths."""
        paths = dict(self._paths)
        for sidecar in self.render.backend_sidecars:
            if sidecar["name"] != "tls-chain" or self.tls is None:
                continue
            chain_dir = self.dir / "backend-tls"
            chain_dir.mkdir(exist_ok=True)
            script = sidecar["command"][-1]
            for in_pod, local in ((router_names.TLS_SECRET_MOUNT, self.tls.dir), (router_names.TLS_MOUNT, chain_dir)):
                script = script.replace(in_pod, str(local))
                self.rewrites.append(f"backend router sidecar {sidecar['name']}: {in_pod} -> {local}")
            self._proc(f"backend-{sidecar['name']}", ["/bin/sh", "-c", script], "backend").start()
            chain = chain_dir / "tls.crt"
            wait_until(lambda chain=chain: chain.is_file() and chain.stat().st_size > 0,
                       30, "the TLS chain sidecar's first chain (its startup probe)", context=self.logs)
            paths[router_names.TLS_CERT] = chain_dir / "tls.crt"
            paths[router_names.TLS_KEY] = chain_dir / "tls.key"
        return paths

    def _env(self, pod: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "KUBECONFIG", "LANG")}
        env.update(POD_NAME=pod, POD_NAMESPACE=self.namespace, RUST_LOG=os.environ.get("STARGATE_RUST_LOG", "info"),
                   NO_PROXY="*", no_proxy="*")
        return env

    def _proc(self, name: str, argv: list[str], pod: str) -> Proc:
        proc = Proc(name, argv, self._env(pod), self.dir / f"{name}.log")
        self.procs.append(proc)
        return proc

    # -- argument sets ------------------------------------------------------------------------
    def router_args(self) -> list[str]:
        p = self.ports
        ip = self.pod_ip
        local = Localizer(self.router_pod, self.namespace, self._paths, ip)
        replace = {
            "--listen-addr": f"{ip}:{p.grpc}", "--http-listen-addr": f"127.0.0.1:{p.http}",
            "--advertise-addr": f"{ip}:{p.grpc}", "--metrics-port": str(p.metrics),
            "--reverse-tunnel-listen-addr": f"{ip}:{p.quic}",
        }
        add = [f"--model-discovery-listen-addr=127.0.0.1:{p.discovery}"]
        if self.backend_ports is not None:
            replace["--grpc-pylon-dial-addr"] = f"http://127.0.0.1:{self.backend_ports.grpc}"
            replace["--reverse-tunnel-pylon-dial-addr"] = f"127.0.0.1:{self.backend_ports.quic}"
        else:
            flags = {a.split("=", 1)[0] for a in self.render.router}
            dial = {"--grpc-pylon-dial-addr": f"http://127.0.0.1:{p.grpc}",
                    "--reverse-tunnel-pylon-dial-addr": f"127.0.0.1:{p.quic}"}
            for flag, value in dial.items():
                if flag in flags:
                    replace[flag] = value
                else:
                    add.append(f"{flag}={value}")
        args = local(self.render.router, replace, tuple(add))
        self.rewrites += [f"router: {r}" for r in local.rewrites]
        return args

    def backend_args(self) -> list[str]:
        assert self.render.backend is not None and self.backend_ports is not None
        b = self.backend_ports
        local = Localizer(f"{ROUTER_NAME}-backend-router-0", self.namespace, self._backend_paths)
        replace = {"--listen-addr": f"127.0.0.1:{b.grpc}", "--reverse-tunnel-listen-addr": f"127.0.0.1:{b.quic}",
                   "--health-listen-addr": f"127.0.0.1:{b.health}",
                   "--grpc-pylon-dial-addr": f"http://127.0.0.1:{b.grpc}"}
        args = local(self.render.backend, replace)
        self.rewrites += [f"backend router: {r}" for r in local.rewrites]
        return args

    def pylon_args(self, index: int, pod: str) -> list[str]:
        local = Localizer(pod, self.namespace, self._paths)
        target = self.backend_ports.grpc if self.backend_ports is not None else self.ports.grpc
        replace = {"--upstream-http-base-url": self.engine_url(index),
                   "--stargate-address": f"http://127.0.0.1:{target}",
                   "--metrics-port": str(free_port())}
        args = local(self.render.pylon[self.pod_models[index]], replace, ("--metrics-host=127.0.0.1",))
        self.rewrites += [f"pylon {index}: {r}" for r in local.rewrites]
        return args

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def pods(self) -> int:
        """Engine "pods": one pylon each."""
        return len(self.upstreams or self.engines)

    def engine_url(self, index: int) -> str:
        return self.upstreams[index] if self.upstreams else self.engines[index].url

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.http}"

    def start(self) -> RouterStack:
        try:
            for engine in self.engines:
                engine.start()
            if self.render.backend is not None:
                assert self.cluster is not None, "the backend router topology needs the simulated cluster"
                self.pod_ip = self.cluster.endpoint_address()
                if self.pod_ip != "127.0.0.1":
                    self.rewrites.append(f"router pod IP: {self.pod_ip} (the API server refuses loopback "
                                         "endpoint addresses)")
            self.router = self._proc("router", [str(self.bin / "stargate"), *self.router_args()], self.router_pod).start()
            self.wait_router_live()
            if self.render.backend is not None:
                self.publish_router(ready=True)
                self._backend_paths = self.start_backend_sidecars()
                self.backend = self._proc("backend-router", [str(self.bin / "stargate-k8s-router"), *self.backend_args()],
                                          f"{ROUTER_NAME}-backend-router-0").start()
                wait_until(lambda: http("GET", f"http://127.0.0.1:{self.backend_ports.health}/readyz",
                                        timeout_s=2).status == 200,
                           self.start_timeout_s, "the backend router's /readyz", context=self.logs)
            for index in range(self.pods):
                pod = f"{self.pod_models[index]}-6f7b9-{index}"
                self.pylons.append(self._proc(f"pylon-{index}", [str(self.bin / "pylon"), *self.pylon_args(index, pod)], pod).start())
            self.wait_registered(self.pods)
        except BaseException:
            self.stop()
            raise
        return self

    def publish_router(self, ready: bool) -> None:
        from components.compile.router.names import RouterNames

        headless = RouterNames.of(self.stack.router).headless
        self.cluster.apply_slice(pod_slice(self.namespace, headless, self.router_pod, self.ports.grpc,
                                           self.ports.quic, ready, self.pod_ip))

    def wait_router_live(self) -> None:
        wait_until(lambda: self.router.alive and http("GET", f"{self.http_url}/healthz", timeout_s=2).status == 200,
                   self.start_timeout_s, "the router's /healthz", context=self.logs)

    def active_servers(self) -> int:
        """The router's gauge of active inference servers for the pods' models (its /metrics)."""
        text = http("GET", f"http://127.0.0.1:{self.ports.metrics}/metrics", timeout_s=2).body.decode()
        total = 0
        for line in text.splitlines():
            if "active_inference_servers{" in line and any(f'model="{m}"' in line for m in set(self.pod_models)):
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def wait_registered(self, count: int) -> None:
        """Every pylon registered and its tunnel up: the router lists the model and counts them."""
        def registered() -> bool:
            models = http("GET", f"{self.http_url}/v1/models", timeout_s=2)
            return (models.status == 200 and set(self.pod_models) <= set(models.json.get("model_ids", []))
                    and self.active_servers() >= count)

        wait_until(registered, self.start_timeout_s, f"{count} pylon(s) registered for {', '.join(sorted(set(self.pod_models)))}",
                   context=self.logs)

    def restart_router(self) -> None:
        assert self.router is not None
        self.router.stop()
        self.router.start()
        self.wait_router_live()

    def restart_pylon(self, index: int) -> None:
        self.pylons[index].stop()
        self.pylons[index].start()

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        for engine in self.engines:
            engine.stop()

    def logs(self, lines: int = 40) -> str:
        return "\n".join(proc.tail(lines) for proc in self.procs)

    # -- requests -----------------------------------------------------------------------------
    def post(self, path: str, body: Any, headers: Optional[dict] = None, timeout_s: float = 30) -> Reply:
        return http("POST", self.http_url + path, body,
                    contract_headers(self.model) if headers is None else headers, timeout_s)

    def get(self, path: str, headers: Optional[dict] = None) -> Reply:
        return http("GET", self.http_url + path, None, headers)


if __name__ == "__main__":
    # scripts/test.sh: build the binaries before the tests (a failure stops the run), or say why
    # the suite will skip.
    import sys

    if shared_dir() is None:
        print("conformance: no ../shared/vendor/stargate beside the repository; the suite will skip", file=sys.stderr)
        sys.exit(0)
    print(build_binaries())
