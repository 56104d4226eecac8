"""The whole client path in front of a running real vLLM, on loopback (issue 31 item 3):

    openai SDK -> the rendered gateway (nginx + njs, testkit/nginx_kit.py)
               -> the real router and pylon (testkit/stargate.py, our rendered args)
               -> the vLLM server of testkit/engine.py (``Engine``), as rendered

``running_path(engine, workdir)`` renders the engine tests' own stack with its router on the line
the Stargate binaries are (``public-0.4``), puts one pylon in front of the running vLLM (the
kit's ``upstreams``) and the gateway in front of the router; stopped on exit (the engine is the
caller's). Used by tests/engine/test_whole_path.py and bench/engine_path.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import openai

from components.compile.gateway import settings as gateway_settings
from components.config import StackConfig
from testkit.engine import Engine, parse_samples, stack_config
from testkit.nginx_kit import Gateway
from testkit.stargate import RouterStack, require_binaries

# The router line the binaries are (testkit/stargate.py builds the public Stargate 0.4.0):
# the stack's router section on that line, its image named for it.
PUBLIC_ROUTER = {"release": "public-0.4", "image": "nvcr.io/nvidia/llm-request-router:0.4.0"}


@dataclass
class WholePath:
    engine: Engine
    config: StackConfig
    stack: RouterStack
    gateway: Gateway
    started: float

    def sdk(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.gateway.base}/v1", api_key="unused", max_retries=0, timeout=60)

    def direct(self) -> openai.OpenAI:
        """The same vLLM, called straight (what the pod's loopback would see without the path)."""
        return openai.OpenAI(base_url=f"{self.engine.base_url}/v1", api_key="unused", max_retries=0, timeout=60)

    def engine_metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        status, text = self.engine.get("/metrics")
        assert status == 200
        return parse_samples(text)

    def pylon_log(self) -> str:
        return self.stack.pylons[0].log.read_text(errors="replace")


def engine_counter(samples: dict, name: str, **labels: str) -> float:
    """The sum of a counter's samples whose labels include ``labels``."""
    return sum(value for got, value in samples.get(name, []) if all(got.get(k) == v for k, v in labels.items()))


@contextmanager
def running_path(engine: Engine, workdir: Path, bin_dir: Path | None = None) -> Iterator[WholePath]:
    """Router, pylon and gateway for ``engine``'s stack, registered and answering; stopped on exit.
    ``bin_dir``: the Stargate binaries (default: the kit's build, skipping without the sources)."""
    config = stack_config(engine.config.platform.hf_endpoint, router=PUBLIC_ROUTER)
    started = time.monotonic()
    stack = RouterStack(config, bin_dir or require_binaries(), workdir, upstreams=(engine.base_url,))
    stack.start()
    try:
        upstream = stack.http_url.removeprefix("http://")
        gateway = Gateway(replace(gateway_settings(config), upstream=upstream)).start()
        try:
            yield WholePath(engine, config, stack, gateway, started)
        finally:
            gateway.stop()
    finally:
        stack.stop()
