"""The rendered pod, run as processes on loopback: the containers `render` writes for a stack, with
only the substitutions running outside a pod, on a CPU, needs — each recorded, so a test can
assert they are the only ones.

A container becomes an argv and an environment (``Runnable``) by ``bind``:
- every path under one of the container's volume mounts (in args and env values) is mapped to a
  temp dir standing for that volume (volumes are keyed by name, so the puller's ``weights``
  claim and the server's are the same directory, as in the cluster);
- the executable the image's PATH would find (`vllm`, `hf`, `sh`) is the kit's or the host's;
- env entries with a ``secretKeyRef`` take the test's value for that Secret key (recorded);
- nothing of this process's environment leaks in: PATH, LANG and the listed additions only.
The server gets, on top (``cpu_server``): ``--host`` 127.0.0.1, ``--port`` a free port,
``--tensor-parallel-size`` 1, the CPU env (testkit/engine_kit.py CPU_ENV), and HOME (the image's /tmp) a
temp dir.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Runnable:
    argv: list[str]
    env: dict[str, str]
    substitutions: list[tuple[str, str, str]] = field(default_factory=list)  # (what, rendered, used)




def mounts_of(container: dict, volumes: dict[str, Path]) -> dict[str, Path]:
    """mountPath -> the temp dir of that volume (created)."""
    mapped = {}
    for mount in container.get("volumeMounts", []):
        host = volumes[mount["name"]]
        host.mkdir(parents=True, exist_ok=True)
        mapped[mount["mountPath"]] = host
    return mapped


def map_path(value: str, mounts: dict[str, Path]) -> str:
    """``value`` with a leading mount path replaced by its temp dir (whole path segments only)."""
    for mount_path in sorted(mounts, key=len, reverse=True):
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return str(mounts[mount_path]) + value[len(mount_path):]
    return value


def bind(container: dict, volumes: dict[str, Path], executables: dict[str, str],
         base_env: dict[str, str], pod_paths: dict[str, Path] | None = None,
         secrets: dict[tuple[str, str], str] | None = None) -> Runnable:
    """The container's command + args and env, with its mounts mapped (``volumes``: volume name
    -> temp dir; a mount whose volume is not given is an error: every mount is accounted for).
    ``pod_paths``: mount paths of the pod's other containers that this one's values name (the
    LoRA init container tells the adapters the server's weights path), mapped the same way.
    ``secrets``: (Secret name, key) -> value, for env entries with a secretKeyRef (each recorded)."""
    mounts = {**(pod_paths or {}), **mounts_of(container, volumes)}
    run = Runnable([], dict(base_env))
    rendered = [*container.get("command", []), *container.get("args", [])]
    for index, arg in enumerate(rendered):
        used = map_path(arg, mounts)
        if index == 0 and arg in executables:
            used = executables[arg]
        if used != arg:
            run.substitutions.append((f"argv[{index}]", arg, used))
        run.argv.append(used)
    for item in container.get("env", []):
        if "value" not in item:
            ref = item["valueFrom"]["secretKeyRef"]
            run.env[item["name"]] = (secrets or {})[(ref["name"], ref["key"])]
            run.substitutions.append((f"env {item['name']}", f"secret {ref['name']}/{ref['key']}", "(the key)"))
            continue
        used = map_path(item["value"], mounts)
        if used != item["value"]:
            run.substitutions.append((f"env {item['name']}", item["value"], used))
        run.env[item["name"]] = used
    return run


def set_flag(run: Runnable, flag: str, value: str) -> None:
    """Replace the value of ``flag`` in the argv (space-separated form, as rendered)."""
    index = run.argv.index(flag) + 1
    if run.argv[index] != value:
        run.substitutions.append((flag, run.argv[index], value))
        run.argv[index] = value


def set_env(run: Runnable, name: str, value: str) -> None:
    before = run.env.get(name)
    if before != value:
        run.substitutions.append((f"env {name}", before if before is not None else "(unset)", value))
        run.env[name] = value
