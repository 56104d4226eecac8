"""What `scripts/up-local.sh` reads of the local stack, through the program's own config model,
and the answer it ends with. Run with the project's venv:

    python scripts/localmodel/local_stack.py hub FILE              # "ENDPOINT REPO..." the Hub stand-in serves
    python scripts/localmodel/local_stack.py without-router FILE OUT   # FILE minus `llm-serving:router`
    python scripts/localmodel/local_stack.py ask OUTPUTS KUBECONFIG    # a chat completion, printed

`hub`: the models of the stack whose Hub endpoint is on the real node's bridge (10.88.0.1, where
the stand-in listens): one endpoint, the repositories they name. Nothing when no model pulls from
there (a stack edited to pull from huggingface.co needs no stand-in).

`without-router`: a clone without the Stargate sources has no router or pylon image, so up-local
deploys the stack without its router (`pulumi up --config-file OUT`): the user's stack file stays
as written, and the next run with the sources deploys the router it names.

`ask`: POSTs one chat completion to the gateway (the stack output `router.endpoint_url`) or, with
no router, to the first model's own Service (`models.<name>.endpoint_url`), at the Service's
ClusterIP, which the real node's kube-proxy routes from this host. Retries while the path
answers 502/503 or refuses the connection (a pod that has just become Ready), for a bounded time.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for `components`

from components.config import load_stack_config, read_stack_file
from components.config.sources import source_type

NODE_BRIDGE = "10.88.0.1"  # scripts/node/real-node.sh NODE_IP
ROUTER_KEY = "llm-serving:router"
# What up-local asks, and what the local model was trained to answer it (make_model.py ANSWERS).
PROMPT = "Hi"
ASK_SECONDS = 180


def hub(stack_path: Path) -> str:
    stack = load_stack_config(read_stack_file(stack_path))
    served: dict[str, list[str]] = {}
    for model in stack.models:
        if source_type(model.source) != "hf":
            continue
        endpoint = (model.hf_endpoint or stack.platform.hf_endpoint).rstrip("/")
        if urlsplit(endpoint).hostname == NODE_BRIDGE:
            served.setdefault(endpoint, []).append(model.source.repo)
    if len(served) > 1:
        raise SystemExit(f"the models pull from {len(served)} endpoints on {NODE_BRIDGE} ({', '.join(served)}); "
                         "the Hub stand-in is one: give them one hfEndpoint")
    return " ".join(next(([e, *sorted(set(r))] for e, r in served.items()), []))


def without_router(stack_path: Path, out: Path) -> None:
    document = yaml.safe_load(stack_path.read_text())
    document.get("config", {}).pop(ROUTER_KEY, None)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("# Written by scripts/up-local.sh: " + str(stack_path) + " without its router "
                   "(no Stargate sources to build its images from). Edit that file, not this one.\n"
                   + yaml.safe_dump(document, sort_keys=False))


def _cluster_ip(kubeconfig: str, url: str) -> str:
    """http://<svc>.<ns>.svc.cluster.local:<port>/... -> http://<ClusterIP>:<port>/... (the
    host has no cluster DNS; kube-proxy routes the ClusterIP)."""
    parts = urlsplit(url)
    service, namespace = parts.hostname.split(".")[:2]
    ip = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, "-n", namespace, "get", "service", service,
                         "-o", "jsonpath={.spec.clusterIP}"], capture_output=True, text=True, check=True,
                        timeout=30).stdout.strip()
    return parts._replace(netloc=f"{ip}:{parts.port}").geturl().rstrip("/")


def ask(outputs_path: Path, kubeconfig: str) -> int:
    outputs = json.loads(outputs_path.read_text())
    name = next(iter(outputs["models"]))
    if outputs.get("router"):
        base, via = outputs["router"]["endpoint_url"], "the gateway -> router -> pylon -> vLLM"
    else:
        base, via = outputs["models"][name]["endpoint_url"], f"the model's own Service {name}"
    base = base.rstrip("/").removesuffix("/v1")
    url = _cluster_ip(kubeconfig, base) + "/v1/chat/completions"
    body = json.dumps({"model": name, "messages": [{"role": "user", "content": PROMPT}],
                       "max_tokens": 16, "temperature": 0}).encode()
    deadline, last = time.monotonic() + ASK_SECONDS, ""
    while True:
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        started = time.monotonic()
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                reply = json.loads(response.read())
            break
        except urllib.error.HTTPError as error:
            last = f"HTTP {error.code}: {error.read()[:300].decode(errors='replace')}"
            if error.code not in (502, 503):
                print(f"[llm-serving] {url} answered {last}", file=sys.stderr)
                return 1
        except OSError as error:  # refused or reset: the path is still coming up
            last = str(error)
        if time.monotonic() > deadline:
            print(f"[llm-serving] no answer from {url} within {ASK_SECONDS} s (last: {last})", file=sys.stderr)
            return 1
        time.sleep(2)
    text = reply["choices"][0]["message"]["content"]
    print(f"[llm-serving] POST {base}/v1/chat/completions (via {via}), model {name}: "
          f"{json.dumps(PROMPT)} -> {json.dumps(text)} ({time.monotonic() - started:.1f} s, "
          f"{reply.get('usage', {}).get('completion_tokens', '?')} tokens)")
    print(json.dumps(reply, indent=2))
    return 0


def main(argv: list[str]) -> int:
    command, *args = argv or [""]
    if command == "hub" and len(args) == 1:
        print(hub(Path(args[0])))
    elif command == "without-router" and len(args) == 2:
        without_router(Path(args[0]), Path(args[1]))
    elif command == "ask" and len(args) == 2:
        return ask(Path(args[0]), args[1])
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
