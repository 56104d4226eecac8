"""Malformed or dangerous stack configs: one table, refused by `python -m components validate`
(tests/faults/test_bad_input_validate.py) and by `pulumi preview` (test_bad_input_preview.py),
each with the field path to change and without a single call to the cluster.

A case is the `llm-serving:<section>` values of a stack file (section -> value), the field path
the refusal must name, a fragment of its message, and what would go wrong if it were accepted.
Everything else a case needs is valid, so the named problem is the only one (or among few).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROJECT = "llm-serving"
ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.6.0"
BACKEND_IMAGE = "nvcr.io/nvidia/llm-backend-router:0.6.0"
NIM_IMAGE = "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4"
# What a token looks like; must never be echoed back by a refusal.
PLAINTEXT_TOKEN = "hf_PlainTextTokenThatMustNeverBeEchoed0123"
PLAINTEXT_NGC_KEY = "nvapi-PlainTextKeyThatMustNeverBeEchoed0123"


def model(name: str = "chat", **fields: Any) -> dict:
    """A valid model section unless ``fields`` make it not."""
    return {"name": name, "source": {"repo": "acme/tiny-llm", "revision": "main"}, **fields}


# An s3 source the vLLM server streams from (source.load: stream).
STREAM = {"type": "s3", "load": "stream", "bucket": "models", "prefix": "llama/",
          "endpoint": "http://minio.storage.svc:9000", "credentials": {"secret": "s3-keys"}}


RWX = {"accessMode": "ReadWriteMany"}
NEXT = {"weight": 10, "source": {"repo": "acme/tiny-llm-v2", "revision": "main"}}


def nim(name: str = "nim", **fields: Any) -> dict:
    return model(name, engine="nim", image=NIM_IMAGE, **fields)


def router(**fields: Any) -> dict:
    return {"image": ROUTER_IMAGE, **fields}


@dataclass(frozen=True)
class BadConfig:
    id: str
    sections: dict  # llm-serving:<section> -> value
    path: str  # a refusal line starts with "<path>:"
    fragment: str  # ... and contains this
    danger: str  # what accepting it would do
    secrets: tuple[str, ...] = field(default=())  # values that must not appear in any output


BAD_CONFIGS: tuple[BadConfig, ...] = (
    # --- wrong types, unknown keys --------------------------------------------------------------
    BadConfig("models-not-a-list", {"models": "llama-8b"}, "models", "must be a list",
              "a string where the model list belongs"),
    BadConfig("gpus-not-a-number", {"models": [model(gpus="two")]}, "models.0.gpus", "whole number",
              "a GPU limit Kubernetes cannot parse"),
    BadConfig("replicas-fractional", {"models": [model(replicas=1.5)]}, "models.0.replicas", "whole number",
              "a replica count silently truncated"),
    BadConfig("platform-not-a-mapping", {"platform": ["llm-serving"]}, "platform", "must be a mapping",
              "a list where the platform section belongs"),
    BadConfig("lora-enabled-not-a-bool", {"models": [model(lora={"enabled": "yes please"})]},
              "models.0.lora.enabled", "true or false", "a flag that means nothing"),
    BadConfig("unknown-model-key", {"models": [model(gpu=2)]}, "models.0.gpu", "did you mean `gpus`?",
              "a typo ('gpu' for 'gpus') silently ignored: one GPU instead of two"),
    BadConfig("unknown-platform-key", {"platform": {"namespce": "prod"}}, "platform.namespce", "did you mean `namespace`?",
              "a typo that deploys into the default namespace"),
    BadConfig("unknown-section", {"modles": [model()]}, f"{PROJECT}:modles", "did you mean `llm-serving:models`?",
              "a misspelled section: a stack that silently deploys no models"),
    # --- privilege: nothing can ask for it; extra keys are refused (extra=forbid) ------------------
    BadConfig("platform-uid-0", {"platform": {"vllmUid": 0}}, "platform.vllmUid", "no pod runs as root",
              "every vLLM pod as root"),
    BadConfig("model-runs-as-root", {"models": [model(securityContext={"runAsUser": 0, "allowNonDefaultIdentity": True})]},
              "models.0.securityContext.runAsUser", "no pod runs as root", "one model's pods as root"),
    BadConfig("router-uid-0", {"models": [model()], "router": router(uid=0)}, "router.uid", "no pod runs as root",
              "router pods as root"),
    BadConfig("privileged-container", {"models": [model(securityContext={"privileged": True})]},
              "models.0.securityContext.privileged", "unknown field", "a privileged container"),
    BadConfig("privilege-escalation", {"models": [model(securityContext={"allowPrivilegeEscalation": True})]},
              "models.0.securityContext.allowPrivilegeEscalation", "unknown field", "setuid escalation"),
    BadConfig("added-capabilities", {"models": [model(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}})]},
              "models.0.securityContext.capabilities", "unknown field", "CAP_SYS_ADMIN"),
    BadConfig("host-network", {"models": [model(hostNetwork=True)]}, "models.0.hostNetwork", "unknown field",
              "a pod on the node's network"),
    BadConfig("host-path-volume", {"models": [model(volumes=[{"name": "root", "hostPath": {"path": "/"}}])]},
              "models.0.volumes", "unknown field", "the node's filesystem mounted in a pod"),
    BadConfig("router-privileged", {"models": [model()], "router": router(securityContext={"privileged": True})},
              "router.securityContext", "unknown field", "a privileged router"),
    BadConfig("nim-with-vllm-uid", {"models": [nim(securityContext={"runAsUser": 2000})]},
              "models.0.securityContext.runAsUser", "vLLM's uid", "a NIM image crashing on getpwuid()"),
    # --- endpoints the puller pod cannot reach -------------------------------------------------
    BadConfig("hf-endpoint-loopback", {"platform": {"hfEndpoint": "http://127.0.0.1:8080"}},
              "platform.hfEndpoint", "loopback", "every puller dialing itself"),
    BadConfig("model-hf-endpoint-localhost", {"models": [model(hfEndpoint="http://localhost:8080")]},
              "models.0.hfEndpoint", "loopback", "one puller dialing itself"),
    BadConfig("hf-endpoint-mapped-loopback", {"platform": {"hfEndpoint": "http://[::ffff:127.0.0.1]:8080"}},
              "platform.hfEndpoint", "loopback", "a loopback address in disguise"),
    # --- sizing and topology of one model --------------------------------------------------------
    BadConfig("tensor-parallel-oversized", {"models": [model(gpus=1, tensorParallelSize=8)]},
              "models.0.tensorParallelSize", "does not divide", "a server that cannot start its workers"),
    BadConfig("rwo-with-replicas", {"models": [model(replicas=2)]}, "models.0.replicas", "ReadWriteOnce",
              "a second replica stuck on Multi-Attach forever"),
    BadConfig("shm-above-memory", {"models": [model(sharedMemorySizeLimit="64Gi")]},
              "models.0.sharedMemorySizeLimit", "exceeds the container's memory", "an OOM kill through /dev/shm"),
    # --- names ---------------------------------------------------------------------------------
    BadConfig("model-name-46-chars", {"models": [model("m" * 46)]}, "models.0.name", "at most 45",
              "derived names ('<name>-weights-<hash>') over 63 characters"),
    BadConfig("model-name-64-chars", {"models": [model("m" * 64)]}, "models.0.name", "at most 45",
              "a Service name Kubernetes refuses, mid-apply"),
    BadConfig("namespace-64-chars", {"platform": {"namespace": "n" * 64}}, "platform.namespace", "DNS-1123",
              "a namespace Kubernetes refuses, mid-apply"),
    BadConfig("router-name-41-chars", {"models": [model()], "router": router(name="r" * 41)}, "router.name",
              "at most 40", "'<name>-headless' and pod labels over the limit"),
    BadConfig("duplicate-models", {"models": [model("chat"), model("chat")]}, "models.1.name", "declared twice",
              "two components fighting over one Deployment"),
    # --- router topology contradictions (components/config/router.py) ----------------------------
    BadConfig("router-without-image", {"models": [model()], "router": {"replicas": 1}}, "router.image", "required",
              "a router with no image to run"),
    BadConfig("router-replicas-without-discovery",
              {"models": [model()], "router": router(replicas=3, backendRouter={"enabled": False})},
              "router.backendRouter.enabled", "needs the backend router", "three routers that cannot find each other"),
    BadConfig("router-dns-on-deployment", {"models": [model()], "router": router(dnsDiscovery=True)},
              "router.dnsDiscovery", "StatefulSet", "per-pod DNS names that do not exist"),
    BadConfig("router-migrate-from-same-kind",
              {"models": [model()], "router": router(workload={"kind": "Deployment", "migrateFrom": "Deployment"})},
              "router.workload.migrateFrom", "names the kind the config already asks for",
              "an acknowledgement that acknowledges nothing"),
    BadConfig("router-args-repeat-a-managed-flag",
              {"models": [model()], "router": router(args=["--http-listen-addr=0.0.0.0:9000"])},
              "router.args.0", "set by the router component", "a router serving away from its Service and probes"),
    BadConfig("router-fronts-unknown-model", {"models": [model()], "router": router(models=["ghost"])},
              "router.models.0", "not a model of this stack", "a router with nothing behind it"),
    BadConfig("router-name-collides-with-model", {"models": [model("llm-router")], "router": router()},
              "router.name", "collides", "two Services with one name"),
    BadConfig("router-tls-foreign-name",
              {"models": [model()], "router": router(tls={"enabled": True, "dnsNames": ["bank.example.com"]})},
              "router.tls.dnsNames.0", "outside the allowed domains", "a certificate for someone else's name"),
    BadConfig("router-env-shadows-discovery",
              {"models": [model()], "router": router(env={"STARGATE_DISABLE_DNS_DISCOVERY": "true"})},
              "router.env.STARGATE_DISABLE_DNS_DISCOVERY", "set by the router component",
              "discovery overridden behind the config's back (a Stargate flag alias)"),
    # --- secrets ---------------------------------------------------------------------------------
    BadConfig("nim-operator-without-auth-secret", {"models": [nim(path="operator")]},
              "models.0.nim.authSecret", "NGC_API_KEY", "a NIMCache that can never download"),
    BadConfig("nim-operator-hf-without-pull-secret",
              {"models": [nim(path="operator", nim={"cacheSource": "hf", "authSecret": "hf-creds"})]},
              "models.0.nim.pullSecret", "image pull Secret", "a cache Job that cannot pull its image"),
    BadConfig("operator-with-hf-token-secret",
              {"models": [nim(path="operator", nim={"authSecret": "ngc"}, hfTokenSecret={"name": "hf"})]},
              "models.0.hfTokenSecret", "nim.authSecret", "a token the operator never reads"),
    BadConfig("hf-token-in-plain-text", {"hfToken": PLAINTEXT_TOKEN, "models": [model()]}, "hfToken",
              "plain text", "a token readable by anyone who reads the stack file",
              secrets=(PLAINTEXT_TOKEN,)),
    BadConfig("ngc-key-in-plain-text", {"ngcApiKey": PLAINTEXT_NGC_KEY, "models": [nim()]}, "ngcApiKey",
              "plain text", "an NGC key readable by anyone who reads the stack file",
              secrets=(PLAINTEXT_NGC_KEY,)),
    BadConfig("nim-without-image", {"models": [model(engine="nim")]}, "models.0.image", "NIM images are per model",
              "a NIM server with vLLM's image"),
    # --- images ----------------------------------------------------------------------------------
    BadConfig("image-latest", {"platform": {"vllmImage": "docker.io/vllm/vllm-openai:latest"}},
              "platform.vllmImage", "':latest'", "two nodes running different code under one spec"),
    BadConfig("image-short-name", {"models": [model(image="vllm-openai:v0.11.0")]}, "models.0.image",
              "not fully qualified", "an image resolved by whatever registry the node defaults to"),
    # --- network policy --------------------------------------------------------------------------
    BadConfig("network-policy-without-router", {"platform": {"networkPolicy": {"enabled": True}}, "models": [model()]},
              "platform.networkPolicy.enabled", "no router", "models nobody can reach"),
    BadConfig("network-policy-admits-every-namespace",
              {"platform": {"networkPolicy": {"enabled": True, "allowFrom": [{"namespaceSelector": {}}]}},
               "models": [model()], "router": router()},
              "platform.networkPolicy.allowFrom.0.namespaceSelector", "every namespace",
              "a policy that isolates nothing"),
    # --- platform.metrics ------------------------------------------------------------------------
    BadConfig("metrics-scraper-shut-out",
              {"platform": {"metrics": {"enabled": True}, "networkPolicy": {"enabled": True, "allowFrom": []}},
               "models": [model()], "router": router()},
              "platform.networkPolicy.allowFrom", "no Prometheus can scrape",
              "ServiceMonitors whose every scrape the models' NetworkPolicy drops: empty dashboards"),
    BadConfig("metrics-interval-not-a-duration", {"platform": {"metrics": {"enabled": True, "interval": "30"}},
                                                  "models": [model()]},
              "platform.metrics.interval", "Prometheus duration",
              "a ServiceMonitor the API server refuses half-way through an `up`"),
)

# --- input that cannot hurt (issue 15 items 2, 9, 11, 12, 13) ---------------------------------
BAD_CONFIGS += (
    BadConfig("gpus-boolean", {"models": [model(gpus=True)]}, "models.0.gpus", "boolean",
              "`gpus: true` read as one GPU"),
    BadConfig("replicas-quoted", {"models": [model(replicas="2")]}, "models.0.replicas", "without quotes",
              "a quoted number silently converted"),
    BadConfig("router-replicas-boolean", {"models": [model()], "router": router(replicas=True)},
              "router.replicas", "boolean", "`replicas: true` read as one router"),
    BadConfig("quantity-absurd-exponent", {"models": [model(weights={"size": "1e1000000"})]},
              "models.0.weights.size", "out of range", "a traceback from decimal overflow"),
    BadConfig("quantity-huge-exponent", {"models": [model(resources={"memory": "1e999999999999Ki"})]},
              "models.0.resources.memory", "not a Kubernetes quantity", "a traceback from decimal overflow"),
    BadConfig("quantity-huge-number", {"models": [model(resources={"cpu": "9" * 5000})]},
              "models.0.resources.cpu", "too large", "a quantity Kubernetes caps behind our back"),
    BadConfig("args-port", {"models": [model(args=["--port", "9000"])]}, "models.0.args.0",
              "--port is managed", "probes and the Service on 8000, the server on 9000"),
    BadConfig("args-tp-equals", {"models": [model(args=["--tensor-parallel-size=4"])]}, "models.0.args.0",
              "set tensorParallelSize", "a TP that bypasses the GPU check"),
    BadConfig("args-served-name", {"models": [model(args=["--served-model-name", "other"])]},
              "models.0.args.0", "set name", "the router asking for a name the server does not serve"),
    # The model's own args put to its release line's parser (components/config/vllm_args.py): the
    # real `vllm serve` exits 2 on each, and the pod would crash-loop after `up`.
    BadConfig("args-not-an-int", {"models": [model(args=["--max-num-seqs", "abc"])]}, "models.0.args.0",
              "invalid int value: 'abc'", "a server that exits 2 at start, crash-looping"),
    BadConfig("args-unknown-flag", {"models": [model(args=["--no-such-flag"])]}, "models.0.args.0",
              "unrecognized arguments: --no-such-flag", "a server that exits 2 at start, crash-looping"),
    BadConfig("args-bad-choice", {"models": [model(args=["--dtype", "float8"])]}, "models.0.args.0",
              "invalid choice: 'float8'", "a server that exits 2 at start, crash-looping"),
    BadConfig("args-flag-the-line-removed", {"platform": {"vllmRelease": "0.32"},
                                             "models": [model(args=["--enable-lora-bias"])]},
              "models.0.args.0", "removed in vLLM 0.12", "a 0.11 flag given to a 0.32 server, which exits 2"),
    BadConfig("vllm-image-of-no-line", {"models": [model(image="docker.io/vllm/vllm-openai:v0.10.2")]},
              "models.0.image", "no release line this program renders", "flags checked against another vLLM"),
    BadConfig("vllm-release-contradicts-image", {"platform": {"vllmRelease": "0.32",
                                                              "vllmImage": "docker.io/vllm/vllm-openai:v0.11.0"},
                                                 "models": [model()]},
              "platform.vllmRelease", "does not match the image", "0.32's flags given to a 0.11 server"),
    BadConfig("env-managed", {"models": [model(env={"HF_HUB_OFFLINE": "0"})]}, "models.0.env.HF_HUB_OFFLINE",
              "is set by this program", "a server reaching for the hub at start"),
    BadConfig("env-plaintext-token", {"models": [model(env={"HF_TOKEN": PLAINTEXT_TOKEN})]},
              "models.0.env.HF_TOKEN", "hfTokenSecret", "a token in the stack file and the pod spec",
              secrets=(PLAINTEXT_TOKEN,)),
    BadConfig("env-plaintext-password", {"models": [model(env={"DB_PASSWORD": "hunter2-plaintext"})]},
              "models.0.env.DB_PASSWORD", "secret reference", "a password in the stack file and the pod spec",
              secrets=("hunter2-plaintext",)),
    BadConfig("teardown-shares-serving-account",
              {"platform": {"teardownIdentity": {"enabled": True, "serviceAccountName": "llm-serving-model"}}},
              "platform.teardownIdentity.serviceAccountName", "delete rights",
              "serving pods running with the teardown Role's delete rights"),
    BadConfig("namespace-kube-system", {"platform": {"namespace": "kube-system"}}, "platform.namespace",
              "belongs to Kubernetes", "models in the control plane's namespace, relabelled restricted"),
    BadConfig("namespace-default-created", {"platform": {"namespace": "default"}}, "platform.namespace",
              "createNamespace: false", "the default namespace relabelled with Pod Security restricted"),
    BadConfig("name-not-text", {"models": [model(name=12)]}, "models.0.name", "must be text",
              "a raw validator message instead of the fix"),
    BadConfig("source-not-a-mapping", {"models": [model(source="acme/tiny-llm")]}, "models.0.source",
              "must be a mapping", "'instance of ModelSource' instead of the fix"),
    # --- weight sources (s3, pvc; docs/weight-sources.md) ----------------------------------------
    BadConfig("source-type-unknown", {"models": [model(source={"type": "ftp", "bucket": "models"})]},
              "models.0.source.type", "use one of hf, s3, pvc", "a source no puller knows"),
    BadConfig("source-s3-key-on-hub", {"models": [model(source={"repo": "acme/tiny-llm", "bucket": "models"})]},
              "models.0.source.bucket", "set `type: s3`", "an object-store key silently read as a Hub source"),
    BadConfig("s3-bucket-missing", {"models": [model(source={"type": "s3", "prefix": "llama/"})]},
              "models.0.source.bucket", "required", "a copy from no bucket"),
    BadConfig("s3-bucket-invalid", {"models": [model(source={"type": "s3", "bucket": "My_Models"})]},
              "models.0.source.bucket", "not a bucket name", "a bucket every S3 API refuses, found at pull time"),
    BadConfig("s3-prefix-absolute", {"models": [model(source={"type": "s3", "bucket": "models", "prefix": "/llama"})]},
              "models.0.source.prefix", "without a leading '/'", "a prefix that matches no key: an empty volume"),
    BadConfig("s3-prefix-glob", {"models": [model(source={"type": "s3", "bucket": "models", "prefix": "llama*"})]},
              "models.0.source.prefix", "wildcards", "a glob read as a literal key prefix"),
    BadConfig("s3-endpoint-loopback",
              {"models": [model(source={"type": "s3", "bucket": "models", "endpoint": "http://127.0.0.1:9000"})]},
              "models.0.source.endpoint", "the puller pod can reach", "a puller dialling its own pod"),
    BadConfig("s3-endpoint-with-bucket-path",
              {"models": [model(source={"type": "s3", "bucket": "models", "endpoint": "https://minio.example:9000/models"})]},
              "models.0.source.endpoint", "has a path", "the bucket named twice, every key 404"),
    BadConfig("s3-region-invalid", {"models": [model(source={"type": "s3", "bucket": "models", "region": "US East"})]},
              "models.0.source.region", "not a region name", "requests signed for a region that does not exist"),
    BadConfig("s3-provider-unknown", {"models": [model(source={"type": "s3", "bucket": "models", "provider": "Wasabi!"})]},
              "models.0.source.provider", "use one of", "rclone refusing the provider inside the pod"),
    BadConfig("s3-credentials-no-secret",
              {"models": [model(source={"type": "s3", "bucket": "models", "credentials": {"accessKeyIdKey": "id"}})]},
              "models.0.source.credentials.secret", "required", "keys read from no Secret"),
    BadConfig("s3-manifest-by-hand",
              {"models": [model(source={"type": "s3", "bucket": "models", "manifest": [{"key": "a", "size": 1}]})]},
              "models.0.source.manifest", "preview fills this", "a hand-written file list the store does not hold"),
    BadConfig("s3-version-at-malformed",
              {"models": [model(source={"type": "s3", "bucket": "models", "versionAt": "2026-11-30"})]},
              "models.0.source.versionAt", "not an RFC 3339 time", "rclone reading a date as midnight in no zone"),
    BadConfig("s3-version-at-future",
              {"models": [model(source={"type": "s3", "bucket": "models", "versionAt": "2999-01-01T00:00:00Z"})]},
              "models.0.source.versionAt", "is in the future", "a pin the store keeps changing under"),
    BadConfig("s3-on-nim-operator",
              {"models": [nim(path="operator", nim={"authSecret": "ngc"},
                              source={"type": "s3", "bucket": "models"})]},
              "models.0.source.type", "needs path: raw", "an s3 source the NIMCache ignores"),
    BadConfig("pvc-claim-missing", {"models": [model(source={"type": "pvc", "subPath": "llama"})]},
              "models.0.source.claimName", "required", "a server mounting no volume"),
    BadConfig("pvc-sub-path-escapes",
              {"models": [model(source={"type": "pvc", "claimName": "shared-weights", "subPath": "../other"})]},
              "models.0.source.subPath", "no '..'", "a mount outside the model's folder"),
    BadConfig("pvc-expect-glob",
              {"models": [model(source={"type": "pvc", "claimName": "shared-weights", "expectFiles": ["*.json"]})]},
              "models.0.source.expectFiles", "is a glob", "a check for a file literally named '*.json'"),
    BadConfig("pvc-weights-size",
              {"models": [model(source={"type": "pvc", "claimName": "shared-weights"}, weights={"size": "100Gi"})]},
              "models.0.weights.size", "keeps its own size", "a size that sizes nothing (the claim exists)"),
    # --- s3 with load: stream (config/streaming.py) ----------------------------------------------
    BadConfig("stream-on-nim", {"models": [nim(source=STREAM)]},
              "models.0.source.load", "use load: copy", "a NIM server given an s3:// model it cannot load"),
    BadConfig("stream-multi-node", {"models": [model(source=STREAM, gpus=2, multiNode={"nodes": 2})]},
              "models.0.multiNode", "remove multiNode or use source.load: copy",
              "worker pods looking for config files only the leader copied"),
    BadConfig("stream-lora", {"models": [model(source=STREAM, lora={"enabled": True})]},
              "models.0.lora.enabled", "use source.load: copy", "adapters re-based onto a weights path that does not exist"),
    BadConfig("stream-version-at", {"models": [model(source={**STREAM, "versionAt": "2026-11-30T18:00:00Z"})]},
              "models.0.source.versionAt", "use source.load: copy",
              "a pin preview lists while the server streams the latest objects"),
    BadConfig("stream-weights-size", {"models": [model(source=STREAM, weights={"size": "100Gi"})]},
              "models.0.weights.size", "has no weights volume", "a size that sizes nothing (no volume)"),
    BadConfig("stream-memory-limit-too-big", {"models": [model(source={**STREAM, "streamMemoryLimit": "30Gi"})]},
              "models.0.source.streamMemoryLimit", "more than half of resources.memory",
              "a streamer buffer that gets the server OOM-killed while loading"),
)

# --- issue 25: what `validate` accepts, the API server accepts and the engine uses ---------------
AWS_KEY_ID = "AKIA" + "Q7RZ3XJ5WVTK2M4P"
BAD_CONFIGS += (
    # Kubernetes' ranges and syntax (components/config/kube.py)
    BadConfig("int32-replicas", {"models": [model(replicas=2**31, weights={"accessMode": "ReadWriteMany"})]},
              "models.0.replicas", "32-bit integer range", "a Deployment the API server refuses mid-`up`"),
    BadConfig("int32-router-replicas", {"models": [model()], "router": router(replicas=2**31)},
              "router.replicas", "32-bit integer range", "a router workload the API server refuses"),
    BadConfig("label-node-selector-key", {"models": [model(nodeSelector={"gpu type": "a100"})]},
              "models.0.nodeSelector.gpu type", "not a label key", "a pod template the API server refuses"),
    BadConfig("label-network-peer-value",
              {"platform": {"networkPolicy": {"enabled": True, "allowFrom": [{"podSelector": {"app": "prom/server"}}]}},
               "models": [model()], "router": router()},
              "platform.networkPolicy.allowFrom.0.podSelector.app", "not a label value",
              "a NetworkPolicy the API server refuses"),
    BadConfig("label-toleration-equal-without-key", {"platform": {"gpuTolerations": [{"operator": "Equal", "value": "gpu"}]}},
              "platform.gpuTolerations.0.key", "required with operator 'Equal'", "pods the API server refuses"),
    # messages per expected shape (components/config/messages.py)
    BadConfig("shape-duration-bare-number", {"platform": {"metrics": {"enabled": True, "interval": 30}}, "models": [model()]},
              "platform.metrics.interval", "duration with its unit", "'quote it', then a second refusal"),
    BadConfig("shape-mapping-for-selector", {"platform": {"gpuNodeSelector": "gpu=a100"}}, "platform.gpuNodeSelector",
              "must be a mapping", "'must be text; quote it' for a mapping"),
    BadConfig("shape-quoted-boolean", {"models": [model(lora={"enabled": "yes"})]}, "models.0.lora.enabled",
              "true or false without quotes", "a quoted 'yes' silently read as true"),
    # credential-shaped values in plain fields (components/config/secret_values.py)
    BadConfig("secret-value-hub-token-in-env", {"models": [model(env={"MODEL_OPTS": PLAINTEXT_TOKEN})]},
              "models.0.env.MODEL_OPTS", "Hugging Face token", "a hub token in the manifest and the state",
              secrets=(PLAINTEXT_TOKEN,)),
    BadConfig("secret-value-ngc-key-in-args", {"models": [nim(args=[f"--ngc-key={PLAINTEXT_NGC_KEY}"])]},
              "models.0.args.0", "nim.authSecret", "an NGC key in the pod spec", secrets=(PLAINTEXT_NGC_KEY,)),
    BadConfig("secret-value-aws-key-in-labels", {"platform": {"metrics": {"labels": {"owner": AWS_KEY_ID}}}},
              "platform.metrics.labels.owner", "AWS access key id", "a cloud key on every ServiceMonitor",
              secrets=(AWS_KEY_ID,)),
    # settings without effect (components/config/engines/nim.py; the rule: components/config/effect.py)
    BadConfig("no-effect-lora-on-nim", {"models": [nim(lora={"enabled": True, "adapters": [
        {"name": "sql", "repo": "acme/sql-lora"}]})]}, "models.0.lora.enabled", "NIM_PEFT_SOURCE",
              "adapters downloaded where NIM never looks"),
    BadConfig("no-effect-tp-on-nim-raw", {"models": [nim(gpus=2, tensorParallelSize=2)]},
              "models.0.tensorParallelSize", "passes no parallelism", "a TP setting NIM never sees"),
    BadConfig("no-effect-drain-on-operator",
              {"models": [nim(path="operator", nim={"authSecret": "ngc"}, disruption={"drainSeconds": 60})]},
              "models.0.disruption.drainSeconds", "no drain wait", "a drain wait that is never rendered"),
    BadConfig("served-name-adapter-is-base", {"models": [model("chat", lora={"enabled": True, "adapters": [
        {"name": "chat", "repo": "acme/sql-lora"}]})]}, "models.0.lora.adapters.0.name", "served name of its base model",
              "an adapter the base model always shadows"),
    BadConfig("served-name-adapter-is-other-model", {"models": [model("chat", lora={"enabled": True, "adapters": [
        {"name": "code", "repo": "acme/sql-lora"}]}), model("code")]}, "models.0.lora.adapters.0.name",
              "already served by model 'code'", "requests for 'code' reaching either"),
    # Issue 38: names that meet a next revision's, and what nothing could serve or wake.
    BadConfig("object-name-router-is-a-revision", {"models": [model("chat", weights=RWX, next=NEXT)],
                                                   "router": {"image": ROUTER_IMAGE, "name": "chat-next"}},
              "router.name", "collide with the next revision of model 'chat'",
              "two Deployments and two Services named chat-next"),
    BadConfig("served-name-adapter-is-a-revision", {"models": [
        model("chat", weights=RWX, next=NEXT),
        model("code", lora={"enabled": True, "adapters": [{"name": "chat-next", "repo": "acme/sql-lora"}]})],
        "router": {"image": ROUTER_IMAGE}}, "models.1.lora.adapters.0.name", "next revision of model 'chat'",
              "the adapter and the revision registered with the router under one name"),
    BadConfig("revision-replicas-on-rwo", {"models": [model("chat", next={**NEXT, "replicas": 3})],
                                           "router": {"image": ROUTER_IMAGE}},
              "models.0.next.replicas", "cannot share a ReadWriteOnce", "three revision pods on one RWO claim"),
    BadConfig("args-headless", {"models": [model(args=["--headless"])]}, "models.0.args.0",
              "starts vLLM without its API server", "a server whose probes and Service never answer"),
    BadConfig("sleeping-model-only-scoped-tenants", {
        "platform": {"metrics": {"enabled": True}},
        "models": [model("chat", weights=RWX, autoscaling={"enabled": True, "minReplicas": 0, "maxReplicas": 2})],
        "router": {"image": ROUTER_IMAGE, "gateway": {"hold": {"timeoutSeconds": 60}, "apiKeys": {
            "secretName": "keys", "tenants": [{"name": "a", "routingKey": "team-a"}]}}}},
              "models.0.autoscaling.minReplicas", "has a routingKey", "a model asleep that no request can wake"),
)

BY_ID = {case.id: case for case in BAD_CONFIGS}
assert len(BY_ID) == len(BAD_CONFIGS), "case ids must be unique"

def stack_document(sections: dict) -> dict:
    return {"config": {f"{PROJECT}:{key}": value for key, value in sections.items()}}


def write_stack_file(path: Path, sections: dict) -> Path:
    path.write_text(yaml.safe_dump(stack_document(sections), sort_keys=False))
    return path


def refusal_lines(output: str, case: BadConfig) -> list[str]:
    """The lines of ``output`` that refuse ``case`` at its field path with its message."""
    return [line.strip() for line in output.splitlines()
            if line.strip().startswith(f"{case.path}:") and case.fragment in line]
