"""NIM's server on the raw path (`engine: nim`, `path: raw`): the NIM image's own entrypoint, told
by environment where the weights are and what to answer to. The operator path's NIMCache and
NIMService are ``components/compile/nim.py``; what NIM accepts: ``components/config/engines/nim.py``."""

from __future__ import annotations

from ...config.engines.nim import NIM
from ...config.model import ModelConfig
from ...config.platform import PlatformConfig
from .. import common
from .base import Server

NGC_API_KEY_SECRET_KEY = "NGC_API_KEY"
# Where NIM writes its cache (NIM_CACHE_PATH; the NIM images' default location). The NIM operator
# points NIM_CACHE_PATH at its read-write model PVC (k8s-nim-operator NIMService standard env:
# NIM_CACHE_PATH=/model-store) and, for a Hugging Face cache, NIM_MODEL_NAME at the same local
# path. Our weights volume is mounted read-only, so NIM gets the local model path from
# NIM_MODEL_NAME and a writable emptyDir for its cache: no copy of the weights.
NIM_CACHE_MOUNT = "/opt/nim/.cache"
NIM_CACHE_SIZE_LIMIT = "10Gi"


class NimServer(Server):
    engine = NIM
    metrics_path = "/v1/metrics"
    owned = (("apps.nvidia.com", ("nimcaches", "nimservices")),)  # the operator path's custom resources

    def image(self, model: ModelConfig, platform: PlatformConfig) -> str:
        # The config model requires an image on NIM models (NIM images are per model).
        raise ValueError(f"model '{model.name}': NIM models need an explicit image")

    def command(self, model: ModelConfig) -> dict:
        # NIM images start their own server from the image entrypoint.
        return {"args": list(model.args)} if model.args else {}

    def env(self, model: ModelConfig, platform: PlatformConfig) -> list[dict]:
        env = [
            {"name": "NIM_CACHE_PATH", "value": NIM_CACHE_MOUNT},
            {"name": "NIM_SERVER_PORT", "value": str(common.SERVER_PORT)},
            {"name": "NIM_HTTP_API_PORT", "value": str(common.SERVER_PORT)},
            {"name": "NIM_MODEL_NAME", "value": common.WEIGHTS_MOUNT},
            {"name": "NIM_SERVED_MODEL_NAME", "value": model.name},
        ]
        if model.nim_settings.auth_secret:
            # Same Secret and key the NIM operator reads, so one Secret serves both paths.
            env.append({"name": "NGC_API_KEY", "valueFrom": {"secretKeyRef": {
                "name": model.nim_settings.auth_secret, "key": NGC_API_KEY_SECRET_KEY,
            }}})
        return env

    def volumes(self, model: ModelConfig) -> tuple[list[dict], list[dict]]:
        # NIM writes into NIM_CACHE_PATH; the weights mount is read-only.
        return ([{"name": "nim-cache", "emptyDir": {"sizeLimit": NIM_CACHE_SIZE_LIMIT}}],
                [{"name": "nim-cache", "mountPath": NIM_CACHE_MOUNT}])


NIM_SERVER = NimServer()
