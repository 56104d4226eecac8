"""What a serving engine is to the config: the interface every variant (``vllm.py``, ``nim.py``)
implements, with the answer most engines give as the default.

A model's ``engine`` key names its variant (``engines.ENGINES``); the shared checks of
``config/model.py`` and the compilers ask the variant instead of comparing the name, so a new
engine is a new module here (and its server in ``components/compile/engines/``), not an edit of
every place that reads ``engine``.
"""

from __future__ import annotations

from typing import Any, Optional

from ..values import Problem

# Where every engine's server listens (the probes and the Service use it).
SERVER_PORT = 8000

# The model a variant checks: a ``ModelConfig`` (config/model.py). model.py imports this package to
# validate with it, so the variant names no class of model.py (that would be an import circle,
# type-only or not: .importlinter's config contract counts both).
Model = Any


class Engine:
    """One engine. Attributes are what differs as data; methods are the checks that read a model."""

    name: str  # the stack file's `engine` value
    label: str  # how messages name it
    health_path: str  # the probes' default path (`healthPath` unset)
    identity: tuple[int, int]  # (uid, gid) the engine's image has a passwd entry for
    identity_keys: tuple[str, str]  # the platform fields that hold that uid and gid
    # What the program sets on the server (config/managed.py refuses them in `args` and `env`), each
    # with what to do instead: its flags (None: it is passed none) and its environment.
    managed_flags: Optional[dict[str, str]] = None
    managed_env: dict[str, str]
    # Which models' settings this engine serves; a refusal (the message at the key) where it does not.
    release_lines: bool = False  # its image runs one of vLLM's release lines (vllm_checks.py)
    serves_lora: bool = True
    cpu_refusal: Optional[str] = None  # at `gpus`, for `gpus: 0`
    stream_refusal: Optional[str] = None  # at `source.load`, for `load: stream`
    revision_refusal: Optional[str] = None  # why `next` is not offered (a next revision)

    def resolve_path(self, path: Optional[str]) -> Optional[str]:
        """The model's `path` (NIM's raw or operator path): this engine's default, or a refusal
        (a ``ValueError``, which pydantic reports at `path`)."""
        return path

    def settings_problems(self, model: Model) -> list[Problem]:
        """The model's settings this engine needs or refuses (image, release line, its own section)."""
        return []

    def autoscaling_problems(self, model: Model) -> Optional[list[Problem]]:
        """With `autoscaling.enabled`: this engine's own answer, or None where the shared queue-depth
        checks apply (config/model.py ``autoscaling_problems``)."""
        return None

    def multinode_refusal(self, model: Model) -> list[Problem]:
        """Why this model cannot span nodes at all (empty: the shared checks apply)."""
        return []

    def multinode_problems(self, model: Model) -> list[Problem]:
        """This engine's own rules for a multi-node group (after the shared ones)."""
        return []

    def no_effect_problems(self, model: Model) -> list[Problem]:
        """Settings this engine (or its path) ignores, each refused with what to use instead
        (config/effect.py says why a setting without effect is refused)."""
        return []

    def auth_secret_problems(self, model: Model) -> list[Problem]:
        """A credential this engine needs and the model does not name (checked with the stack's
        secret defaults in place)."""
        return []

    def ngc_api_key_default(self, model: Model) -> Optional[dict]:
        """The update that makes the model read the stack secret `ngcApiKey`; None: it does not."""
        return None

    def reads_ngc_api_key(self, model: Model) -> bool:
        return False
