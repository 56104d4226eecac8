"""A containerd of our own for trying the images, and a container run the way a kubelet would run
a rendered one. Stdlib only.

The containerd runs with its own config: root, state, sockets and runc's root all under one
directory (default ``$LLM_SERVING_IMAGES_DIR/containerd``), the CRI plugin off (nothing here
needs Kubernetes), so it shares nothing with a node's containerd (scripts/cluster: the real node's)
and can start and stop beside it. ``run`` turns a container of a rendered manifest into an OCI
runtime spec, as the kubelet and containerd's CRI would: the command is the rendered command, or
the image's ENTRYPOINT; the args the rendered args, or the image's CMD; the user the security
context's runAsUser/runAsGroup; readOnlyRootFilesystem, allowPrivilegeEscalation: false and
capabilities drop ALL as rendered; an emptyDir a tmpfs (``medium: Memory`` too), other volumes a
bind mount of a host directory the caller gives. What it leaves out (said in docs/images.md): the
seccomp profile, cgroup limits, the pod's network (a network namespace the caller creates, or
none: loopback only), the pause container.

    python3 private_containerd.py start|stop|address [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

CACHE = Path(os.environ.get("LLM_SERVING_IMAGES_DIR", Path.home() / ".cache" / "llm-serving-images"))
NAMESPACE = "k8s.io"
CONFIG = """version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[debug]
  address = "{d}/debug.sock"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
"""
HOST_NETWORK = "host"  # `netns` value: no network namespace of its own
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ContainerdError(RuntimeError):
    pass


class Containerd:
    def __init__(self, directory: Optional[Path] = None):
        self.dir = Path(directory or CACHE / "containerd")
        self.address = str(self.dir / "containerd.sock")
        self.pid_file = self.dir / "containerd.pid"

    # --- the daemon ----------------------------------------------------------------------------
    def pid(self) -> Optional[int]:
        try:
            pid = int(self.pid_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            return None
        # Ours only: a containerd started with this directory's config (a recycled pid is not).
        return pid if str(self.dir / "config.toml").encode() in cmdline else None

    def ctr(self, *args: str, timeout: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        result = subprocess.run(["ctr", "--address", self.address, "--namespace", NAMESPACE, *args],
                                capture_output=True, text=True, timeout=timeout, **kwargs)
        if check and result.returncode != 0:
            raise ContainerdError(f"ctr {' '.join(args[:4])} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def ready(self) -> bool:
        return self.ctr("version", timeout=10, check=False).returncode == 0

    def start(self, timeout_s: float = 60) -> Containerd:
        if self.pid() and self.ready():
            return self
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.toml").write_text(CONFIG.format(d=self.dir))
        with open(self.dir / "containerd.log", "ab") as log:
            process = subprocess.Popen(["containerd", "--config", str(self.dir / "config.toml")],
                                       stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       start_new_session=True)
        self.pid_file.write_text(str(process.pid))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise ContainerdError(f"containerd exited {process.returncode}; log: {self.dir / 'containerd.log'}")
            if self.ready():
                return self
            time.sleep(0.2)
        raise ContainerdError(f"containerd not ready after {timeout_s:g}s; log: {self.dir / 'containerd.log'}")

    def shims(self) -> list[int]:
        """The shims of this containerd: started with this socket as their -address."""
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and self.address.encode() in argv:
                found.append(int(proc.name))
        return found

    def stop(self, timeout_s: float = 30) -> None:
        """Containers first (their tasks and snapshots), then the daemon, then any shim left."""
        pid = self.pid()
        if pid and self.ready():
            for line in self.ctr("tasks", "list", "-q", check=False).stdout.split():
                self.ctr("tasks", "kill", "-s", "SIGKILL", line, check=False)
                self.ctr("tasks", "delete", "-f", line, check=False)
            for line in self.ctr("containers", "list", "-q", check=False).stdout.split():
                self.ctr("containers", "delete", line, check=False)
        for target in ([pid] if pid else []) + self.shims():
            try:
                os.kill(target, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and ((pid and _alive(pid)) or self.shims()):
            time.sleep(0.2)
        for target in ([pid] if pid and _alive(pid) else []) + self.shims():
            os.kill(target, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)

    def purge(self) -> None:
        """Its directory removed (the daemon stopped first): the snapshots' mounts go first."""
        if self.pid():
            raise ContainerdError("stop it first")
        for line in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            target = line.split()[1]
            if target.startswith(str(self.dir) + "/"):
                subprocess.run(["umount", "-l", target], check=False, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- images --------------------------------------------------------------------------------
    def image_digest(self, name: str) -> Optional[str]:
        for line in self.ctr("images", "list").stdout.splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == name:
                return fields[2]
        return None

    def has_snapshot(self, key: str) -> bool:
        """Whether the committed snapshot ``key`` (a one-layer image's unpacked layer: its chain id
        is its diff id) exists. An image can be listed, with the right digest, without it: a
        containerd stopped in the middle of an unpack or a snapshot removal keeps the image record
        (seen: two test runs sharing this containerd; every run then failed with "parent snapshot
        ... does not exist")."""
        return self.ctr("snapshots", "info", key, check=False).returncode == 0

    def remove_images(self, names: list[str]) -> None:
        self.ctr("images", "rm", *names, check=False)

    def import_layout(self, layout: Path, oci_script: Path) -> str:
        """Stream the layout into `ctr images import -` (nothing written beside it)."""
        writer = subprocess.Popen([sys.executable, str(oci_script), "archive", str(layout)], stdout=subprocess.PIPE)
        result = self.ctr("images", "import", "-", stdin=writer.stdout, check=False, timeout=3600)
        writer.stdout.close()
        if writer.wait() != 0 or result.returncode != 0:
            raise ContainerdError(f"import of {layout} failed: {result.stdout}{result.stderr}")
        return result.stdout

    # --- containers ----------------------------------------------------------------------------
    def run(self, image: str, image_config: dict, container: dict, name: str, timeout_s: float = 120,
            binds: Optional[dict[str, Path]] = None, netns: Optional[str] = None,
            field_env: Optional[dict[str, str]] = None, detach: bool = False,
            files: Optional[dict[str, Path]] = None) -> subprocess.CompletedProcess:
        """Run ``container`` (a rendered container: command, args, env, securityContext,
        volumeMounts) from ``image``; its exit status and output (``detach``: started and left
        running; ``stop_container`` ends it)."""
        self.remove_container(name)
        rootfs = self.mount_rootfs(image_config, name)
        spec = runtime_spec(image_config, container, name, binds or {}, netns, field_env or {}, files or {})
        spec["root"]["path"] = str(rootfs)
        spec_file = self.dir / "specs" / f"{name}.json"
        spec_file.parent.mkdir(parents=True, exist_ok=True)
        spec_file.write_text(json.dumps(spec))
        argv = ["run", "--config", str(spec_file), "--runc-root", str(self.dir / "runc")]
        # Detached: its output to a file (log_of), read when a test fails.
        argv += ["--detach", "--log-uri", f"file://{self.log_of(name)}"] if detach else ["--rm"]
        self.log_of(name).unlink(missing_ok=True)
        try:
            return self.ctr(*argv, name, check=False, timeout=timeout_s)
        finally:
            if not detach:
                self.remove_container(name)

    def exec_in(self, name: str, argv: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess:
        """A process in a running container, with the container's own user and environment (what
        the kubelet does for an exec probe or a preStop exec hook)."""
        exec_id = f"exec-{time.monotonic_ns()}"
        return self.ctr("tasks", "exec", "--exec-id", exec_id, name, *argv, check=False, timeout=timeout_s)

    def exit_code(self, name: str) -> Optional[int]:
        """A stopped task's exit status (its task is deleted), or None while it runs. ctr 1.6
        reports a non-zero status only as a warning on `tasks delete`."""
        listing = self.ctr("tasks", "list", check=False).stdout.split("\n")
        if not any(line.split()[:1] == [name] and "STOPPED" in line for line in listing):
            return None
        deleted = self.ctr("tasks", "delete", name, check=False)
        match = re.search(r"exit with non-zero exit code (\d+)", deleted.stderr)
        return int(match.group(1)) if match else 0

    def log_of(self, name: str) -> Path:
        return self.dir / "specs" / f"{name}.log"

    def log_tail(self, name: str, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_of(name).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def mount_rootfs(self, image_config: dict, name: str) -> Path:
        """A writable snapshot of the image (as containerd prepares one for a container), mounted
        where the spec's root points: with a spec file of its own, ctr takes no image."""
        diff_ids = image_config["rootfs"]["diff_ids"]
        if len(diff_ids) != 1:
            raise ContainerdError("only one-layer images (scripts/images/oci.py) can be run here")
        target = self.dir / "specs" / f"{name}.rootfs"
        target.mkdir(parents=True, exist_ok=True)
        self.ctr("snapshots", "prepare", f"{name}-rootfs", diff_ids[0])  # one layer: its chain id is its diff id
        command = self.ctr("snapshots", "mounts", str(target), f"{name}-rootfs").stdout.strip()
        subprocess.run(["sh", "-c", command], check=True, capture_output=True, text=True)
        return target
    def remove_container(self, name: str) -> None:
        self.ctr("tasks", "kill", "-s", "SIGKILL", name, check=False)
        self.ctr("tasks", "delete", "-f", name, check=False)
        self.ctr("containers", "delete", name, check=False)
        target = self.dir / "specs" / f"{name}.rootfs"
        if os.path.ismount(target):
            subprocess.run(["umount", str(target)], check=True, capture_output=True)
        self.ctr("snapshots", "rm", f"{name}-rootfs", check=False)


def _alive(pid: int) -> bool:
    """Running (a zombie is not: the daemon we started exits as our child until reaped)."""
    try:
        os.waitpid(pid, os.WNOHANG)  # reaps it when it is our child and has exited
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _expand(value: str, env: dict[str, str]) -> str:
    """$(NAME) as the kubelet expands it in command, args and env."""
    for key, replacement in env.items():
        value = value.replace(f"$({key})", replacement)
    return value


def runtime_spec(image_config: dict, container: dict, name: str, binds: dict[str, Path],
                 netns: Optional[str], field_env: dict[str, str], files: Optional[dict[str, Path]] = None) -> dict:
    """The OCI runtime spec of a rendered container (see the module's docstring). ``files``:
    container path -> host file, bound read-only (what the kubelet adds: /etc/resolv.conf, /etc/hosts)."""
    image = image_config.get("config", {})
    env: dict[str, str] = dict(entry.split("=", 1) for entry in image.get("Env") or [])
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = _expand(item["value"], env)
        else:  # valueFrom: the value the caller says the kubelet would give (pod name, IP, ...)
            env[item["name"]] = field_env.get(item["name"], "")
    if "command" in container:
        argv = list(container["command"]) + list(container.get("args") or [])
    else:
        argv = list(image.get("Entrypoint") or []) + list(container.get("args") or image.get("Cmd") or [])
    argv = [_expand(a, env) for a in argv]
    if not argv:
        raise ValueError(f"container {container.get('name')}: no command, and the image has no ENTRYPOINT or CMD")
    security = container.get("securityContext") or {}
    image_user = (image.get("User") or "0:0").split(":")
    uid = security.get("runAsUser", int(image_user[0]))
    gid = security.get("runAsGroup", int(image_user[1]) if len(image_user) > 1 else 0)
    dropped_all = "ALL" in ((security.get("capabilities") or {}).get("drop") or [])
    capabilities = [] if dropped_all else ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER",
                                            "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE", "CAP_KILL"]
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
    ]
    mounted = set()
    for mount in container.get("volumeMounts") or []:
        path = mount["mountPath"]
        mounted.add(path)
        if mount["name"] in binds:
            options = ["rbind", "ro" if mount.get("readOnly") else "rw"]
            mounts.append({"destination": path, "type": "bind", "source": str(binds[mount["name"]]), "options": options})
        else:  # an emptyDir: world-writable like the kubelet's (0777), in memory here
            mounts.append({"destination": path, "type": "tmpfs", "source": "tmpfs",
                           "options": ["nosuid", "nodev", "mode=1777", "size=1g"]})
    for path, source in (files or {}).items():
        mounts.append({"destination": path, "type": "bind", "source": str(source), "options": ["rbind", "ro"]})
    if "/dev/shm" not in mounted:
        mounts.append({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
                       "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]})
    namespaces = [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]
    if netns != HOST_NETWORK:  # the host's: this machine's loopback (a test server on 127.0.0.1)
        namespaces.append({"type": "network", **({"path": netns} if netns else {})})
    return {
        "ociVersion": "1.0.2-dev",
        "hostname": name,
        "process": {
            "user": {"uid": uid, "gid": gid},
            "args": argv,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": image.get("WorkingDir") or "/",
            "capabilities": {k: capabilities for k in ("bounding", "effective", "permitted")},
            "noNewPrivileges": security.get("allowPrivilegeEscalation") is False or dropped_all,
        },
        "root": {"path": "rootfs", "readonly": bool(security.get("readOnlyRootFilesystem"))},
        "mounts": mounts,
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "cgroupsPath": f"/llm-serving-images/{name}",
            "namespaces": namespaces,
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
                            "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("start", "stop", "address", "purge"),
                        help="purge: stop, then remove its whole directory (every image imported into it)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    containerd = Containerd(args.dir)
    if args.command == "start":
        containerd.start()
    elif args.command in ("stop", "purge"):
        containerd.stop()
    if args.command == "purge":
        containerd.purge()
    print(containerd.address)
    return 0


if __name__ == "__main__":
    sys.exit(main())
