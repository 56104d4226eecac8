"""How long the first request after a sleep waits (scale to zero), excluding the engine's load.

    bash scripts/up-local.sh      # once: the toolchain, the operators (KEDA's) and the simulated cluster
    .venv/bin/python bench/wake.py [--cycles 3] [--json build/bench/<date>-wake.json]

On the simulated cluster: KEDA's real operator (2.16.1, scripts/toolchain/operators.sh) scales a
compiled model whose `autoscaling.minReplicas` is 0; the rendered gateway (real nginx + njs) holds
its requests in front of a stand-in router that lists the model while its Deployment has a ready
pod (as a pylon registers once its engine serves; a KWOK pod is ready at once, so the engine's
load time, minutes on a GPU, is not in these figures). A stand-in Prometheus answers KEDA's
queries with the gateway's live held count. Each cycle: wait until KEDA has scaled the model to
zero (the ScaledObject's cooldownPeriod is lowered to 10 s here, which changes what is measured
only by when the cycle may start), send one streaming chat, and time its first byte; the peer is
the same request once the model is awake. Medians and their ratio; nothing is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from components.compile.gateway.nginx import GatewaySettings  # noqa: E402
from components.compile.plan import compile_stack  # noqa: E402
from components.config import load_stack_config  # noqa: E402
from testkit.fake_router import FakeRouter  # noqa: E402
from testkit.keda_operator import start_operator, throwaway_certs  # noqa: E402
from testkit.nginx_kit import Gateway  # noqa: E402
from testkit.ports import host_ipv4  # noqa: E402
from testkit.prometheus_standin import PrometheusStandIn  # noqa: E402

POLL_SECONDS = 5
COOLDOWN_SECONDS = 10
KINDS = ("ServiceAccount", "PersistentVolumeClaim", "Deployment", "ScaledObject")


def kubectl(*args: str, body: dict | None = None) -> str:
    done = subprocess.run(["kubectl", *args], input=json.dumps(body) if body else None, capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def replicas(namespace: str) -> tuple[int, int]:
    out = json.loads(kubectl("get", "deployment", "tiny", "-n", namespace, "-o", "json"))
    return int(out["spec"].get("replicas") or 0), int(out.get("status", {}).get("readyReplicas") or 0)


def first_byte(gateway: Gateway, timeout: float = 180) -> float:
    body = json.dumps({"model": "tiny", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=timeout)
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    reply.read(1)
    elapsed = time.monotonic() - started
    if reply.status != 200:
        raise RuntimeError(f"the gateway answered {reply.status}")
    reply.read()
    conn.close()
    return elapsed


def wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    operator_bin = os.environ.get("LLM_SERVING_KEDA_OPERATOR", "")
    crds = Path(os.environ.get("LLM_SERVING_CRDS_DIR", "")) / "keda"
    if not os.access(operator_bin, os.X_OK) or not crds.is_dir():
        print("needs KEDA's operator and CRDs: source the operators' env.sh (scripts/toolchain/operators.sh)",
              file=sys.stderr)
        return 2
    namespace = f"bench-wake-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "--server-side", "-f", str(crds))
    kubectl("create", "namespace", namespace)
    scratch = throwaway_certs(Path(tempfile.mkdtemp(prefix="bench-wake-")))
    operator = None
    wakes: list[float] = []
    awake: list[float] = []
    settings = GatewaySettings(upstream="127.0.0.1:1", models=("tiny",), hold_timeout_seconds=170, sleepers=("tiny",))
    try:
        with FakeRouter(models=()) as router, Gateway(replace(settings, upstream=f"127.0.0.1:{router.port}")) as gateway:
            def held() -> float:
                conn = http.client.HTTPConnection("127.0.0.1", gateway.health_port, timeout=5)
                conn.request("GET", "/metrics")
                text = conn.getresponse().read().decode()
                return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.startswith('gateway_held_requests{model="tiny"}'))

            with PrometheusStandIn({"gateway_held_requests": held, "gateway_requests_total": lambda: 0,
                                    "vllm:num_requests_waiting": lambda: 0}, host="0.0.0.0") as prometheus:
                stack = load_stack_config({
                    "platform": {"namespace": namespace, "storageClassName": "local-weights",
                                 "sharedMemorySizeLimit": "1Gi", "preflight": {"enabled": False},
                                 "autoscaling": {"requireModelMetrics": False, "pollingIntervalSeconds": POLL_SECONDS,
                                                 "prometheusAddress": f"http://{host_ipv4()}:{prometheus.port}"}},
                    "models": [{"name": "tiny", "source": {"repo": "acme/tiny-llm"}, "gpus": 1,
                                "resources": {"cpu": "1", "memory": "4Gi"},
                                "weights": {"size": "1Gi", "accessMode": "ReadWriteMany"},
                                "autoscaling": {"enabled": True, "minReplicas": 0, "maxReplicas": 2}}],
                    "router": {"image": "registry.example.com/llm/request-router:0.16.2",
                               "gateway": {"hold": {"timeoutSeconds": 170}}},
                })
                for manifest in compile_stack(stack):
                    if manifest["kind"] in KINDS and manifest["metadata"].get("namespace") == namespace:
                        if manifest["kind"] == "ScaledObject":
                            manifest["spec"]["cooldownPeriod"] = COOLDOWN_SECONDS
                        kubectl("apply", "--server-side", "-f", "-", body=manifest)
                log = open(scratch / "operator.log", "w")
                operator = start_operator(operator_bin, namespace, scratch, log)
                stop = threading.Event()

                def pylon() -> None:  # the router lists the model while a pod is ready
                    while not stop.is_set():
                        try:
                            router.models[:] = ["tiny"] if replicas(namespace)[1] else []
                        except RuntimeError:
                            pass
                        time.sleep(0.2)

                threading.Thread(target=pylon, daemon=True).start()
                for cycle in range(args.cycles):
                    wait(lambda: replicas(namespace) == (0, 0), 120, "KEDA to scale the model to zero")
                    time.sleep(1)  # the router's list follows the pod
                    wakes.append(first_byte(gateway))
                    awake.append(first_byte(gateway))
                    print(f"cycle {cycle + 1}: first byte after a sleep {wakes[-1]:.2f}s, awake {awake[-1] * 1000:.1f} ms",
                          flush=True)
                stop.set()
    finally:
        if operator is not None:
            kubectl("delete", "scaledobject", "tiny", "-n", namespace, "--wait=true")
            operator.terminate()
            operator.wait(10)
        kubectl("delete", "namespace", namespace, "--wait=false")
    result = {"date": time.strftime("%Y-%m-%d"), "polling_interval_seconds": POLL_SECONDS,
              "wake_first_byte_s": wakes, "awake_first_byte_s": awake,
              "median_wake_s": statistics.median(wakes), "median_awake_s": statistics.median(awake)}
    ratio = result["median_wake_s"] / result["median_awake_s"]
    print(f"\nwake (first request after a sleep, to its first byte; KEDA polling every {POLL_SECONDS}s, no engine "
          f"load): median {result['median_wake_s']:.2f}s over {len(wakes)}; the same request awake: median "
          f"{result['median_awake_s'] * 1000:.1f} ms; ratio {ratio:.0f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
