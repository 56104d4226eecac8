"""`router.pylon` and `router.workerAuth`: how model servers register with the request router.

The router (NVIDIA's llm-request-router, "Stargate") never discovers model Services. Each model
pod runs a ``pylon`` sidecar that dials the router, registers the model and opens a QUIC reverse
tunnel; requests reach the engine on loopback. ``router.pylon`` turns that sidecar on for every
fronted model (its image has no public default, so it is required); ``router.workerAuth`` says how
the router tells a real worker from anyone else that can reach its gRPC port. There is no default
for ``workerAuth.mode``: an open router must be a decision written in the stack file.

Paths of the problems here are relative to the router section (``pylon_problems``); whether each
fronted model can carry the sidecar is the stack's check (``stack.pylon_problems``).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Optional

from pydantic import AfterValidator, Field, model_validator

from . import values
from .types import Image, PositiveQuantity, Strict
from .values import Problem

Label = Annotated[str, AfterValidator(values.check_dns1123_label)]

# A Secret key: what Kubernetes accepts as a data key.
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")


def check_secret_key(key: str) -> str:
    if not _SECRET_KEY.match(key or ""):
        raise ValueError(f"'{key}' is not a Secret key; use letters, digits, '-', '_' and '.'")
    return key


SecretKey = Annotated[str, AfterValidator(check_secret_key)]

# Flags the compiler renders on the pylon from config (components.compile.pylon); `args` may not
# repeat them, since clap takes the last value of a flag and a duplicate would silently win.
RENDERED_FLAGS = (
    "--upstream-http-base-url", "--stargate-address", "--model-name", "--inference-server-id",
    "--cluster-id", "--backend-connectivity", "--auth-token", "--auth-token-file",
    "--tls-cert-path", "--quic-insecure", "--metrics-host", "--metrics-port",
    "--upstream-health-path", "--upstream-health-wait-ms", "--initial-input-tps",
    "--do-calibration", "--pylon-upstream-backend", "--engine-stats-stream",
)


class PylonResources(Strict):
    # NVCF injects its pylon ("llm-worker" container) with requests 500m/512Mi and limits 1/1Gi
    # (NVIDIA/nvcf src/libraries/go/lib/pkg/icms-translate/translate/function/llm.go).
    cpu: PositiveQuantity = Field("500m", description="CPU request of the pylon container.")
    memory: PositiveQuantity = Field("512Mi", description="Memory request of the pylon container.")
    cpu_limit: PositiveQuantity = Field("1", description="CPU limit of the pylon container.")
    memory_limit: PositiveQuantity = Field("1Gi", description="Memory limit of the pylon container.")

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> PylonResources:
        problems = [
            Problem(limit, f"must be at least {request} ({self_value})")
            for limit, request, self_value, wanted in (
                ("cpuLimit", "cpu", self.cpu, self.cpu_limit),
                ("memoryLimit", "memory", self.memory, self.memory_limit),
            )
            if values.parse_quantity(wanted) < values.parse_quantity(self_value)
        ]
        if problems:
            raise values.Problems(problems)
        return self


class PylonConfig(Strict):
    """The pylon sidecar beside every model server the router fronts."""

    image: Image = Field(
        description="Pylon image, fully qualified and pinned (no public default; NVCF calls it "
        "`stargate-client`), e.g. `nvcr.io/<org>/stargate-client:<tag>`."
    )
    resources: PylonResources = Field(default_factory=PylonResources, description="Pylon CPU and memory.")
    initial_input_tps: float = Field(
        100, gt=0, allow_inf_nan=False,
        description="`--initial-input-tps`: the input tokens/s each model starts with before pylon "
        "measures it (NVCF passes 100). Calibration (`--do-calibration`) is for a cluster's sole "
        "pylon only, so it is not used.",
    )
    upstream_backend: Literal["passthrough", "dynamo"] = Field(
        "passthrough",
        description="`--pylon-upstream-backend`: `passthrough` forwards requests unchanged (vLLM, "
        "NIM); `dynamo` derives Dynamo's priority headers from `x-priority`.",
    )
    args: tuple[str, ...] = Field((), description="Extra pylon arguments (not the flags rendered from config).")

    @model_validator(mode="after")
    def _no_rendered_flag(self) -> PylonConfig:
        problems = [
            Problem(f"args.{index}", f"{arg.split('=', 1)[0]} is rendered from config; remove it")
            for index, arg in enumerate(self.args)
            if arg.split("=", 1)[0] in RENDERED_FLAGS
        ]
        if problems:
            raise values.Problems(problems)
        return self


# The first Stargate release line assumed to have `--worker-auth-file`. Known: chart 0.16.2's
# Stargate (devilkun/nvcf@e07119fa crates/stargate/src/main.rs) has only --worker-auth-endpoint
# and would refuse the unknown flag at startup; the flag appears in later sources
# (NVIDIA/nvcf@5f8ee2ab, @38d452db stargate/README.md "Worker authentication"). Which release
# first ships it is not published, so the bound refuses what is known not to work (0.16.x and
# older) and accepts the next minor line up.
WORKER_AUTH_FILE_SINCE = (0, 17, 0)
# A version tag: 0.16.2, v0.18.0, 0.17 or 0.18.0-rc1 (pre-release and build suffixes ignored).
_VERSION_TAG = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+.][0-9A-Za-z.+-]*)?$")
# Flags of the router that select a worker authenticator: Stargate takes exactly one, so with
# token mode (which renders --worker-auth-file) `router.args` may carry neither of the others.
OTHER_AUTHENTICATORS = ("--worker-auth-endpoint", "--allow-open-worker-auth")


def image_version(image: str) -> Optional[tuple[int, int, int]]:
    """The version an image's tag names, or None: pinned by digest only, or a tag that is not a
    version (e.g. a build id). A tag next to a digest still names the version it was built as."""
    match = values._IMAGE.match(image)
    tag = match.group("tag") if match else None
    version = _VERSION_TAG.match(tag or "")
    if version is None:
        return None
    major, minor, patch = version.groups()
    return int(major), int(minor), int(patch or 0)


def worker_auth_file_problem(router_image: str) -> Optional[str]:
    """Why token mode cannot run on ``router_image``, or None."""
    version = image_version(router_image)
    if version is None or version >= WORKER_AUTH_FILE_SINCE:
        return None
    since = ".".join(map(str, WORKER_AUTH_FILE_SINCE))
    return (
        f"mode: token needs a Stargate with --worker-auth-file, and the router image "
        f"'{router_image}' is version {'.'.join(map(str, version))}: Stargate 0.16.x and older "
        "(the chart 0.16.2 this render follows) know only --worker-auth-endpoint (NVCF's API) and "
        "refuse to start on the unknown flag. Set workerAuth.mode: open for a 0.16.2 router "
        "(and keep its grpc/quic ports to model pods: the router's NetworkPolicy), or use a "
        f"router image {since} or newer"
    )


class WorkerAuth(Strict):
    """How the router authenticates pylons (registration stream and reverse tunnel)."""

    mode: Literal["token", "open"] = Field(
        description="`token`: each pylon sends a bearer token read from a Secret, and the router "
        "checks it against a worker-auth file from the same Secret (`--worker-auth-file`). That "
        "flag is newer than chart 0.16.2: token mode is refused when `router.image`'s tag is a "
        "version below 0.17.0 (Stargate 0.16.x and older lack it); an image pinned by digest "
        "only, or with a tag that is not a version, is accepted, and must be a Stargate with "
        "`--worker-auth-file`. `open`: no auth flag, the router accepts any worker that reaches "
        "its gRPC port: how a 0.16.2 router runs without NVCF (newer images also need "
        "`--allow-open-worker-auth` in `router.args`). No default: choose one.",
    )
    secret_name: Optional[Label] = Field(
        None, description="`token` only: the existing Secret holding the token and the router's worker-auth file.",
    )
    token_key: SecretKey = Field("token", description="`token` only: the Secret key of the bearer token pylons send.")
    auth_file_key: SecretKey = Field(
        "worker-auth.yaml",
        description="`token` only: the Secret key of the router's worker-auth file (YAML: "
        "`clusters: {<clusterId>: [sha256:<hex of the token>]}`).",
    )
    cluster_id: Optional[Label] = Field(
        None,
        description="`token` only: the cluster id pylons register with (`--cluster-id`), which the "
        "worker-auth file binds the token to. Unset: the router's name.",
    )

    @model_validator(mode="after")
    def _mode_fields(self) -> WorkerAuth:
        token_only = ("secret_name", "token_key", "auth_file_key", "cluster_id")
        if self.mode == "token" and self.secret_name is None:
            raise values.Problems([Problem(
                "secretName",
                "required with mode: token; name the Secret holding the pylons' token and the "
                "router's worker-auth file, or set mode: open",
            )])
        if self.mode == "open":
            stray = [name for name in token_only if name in self.model_fields_set]
            if stray:
                raise values.Problems([
                    Problem(type(self).model_fields[name].alias or name, "applies to mode: token only; remove it")
                    for name in stray
                ])
        return self
