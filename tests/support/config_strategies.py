"""Hypothesis strategies for whole stack configs: every section and every setting, in the stack
file's spelling (the `llm-serving:*` sections as `validate` reads them).

Three families, drawn by ``STACKS`` (a quarter valid, half mutated, a quarter odd):
- ``VALID_STACKS``: only valid values, chosen so that most stacks pass validation and reach the
  compilers (an engine's settings follow the engine, tensor parallelism divides the GPUs, ...),
  while still combining every setting of every section, numbers up to int32's maximum included;
- ``ODD_STACKS``: the same with mistakes mixed in at every key: numbers beyond Kubernetes' int32
  range, label keys and values just outside the label rules, wrong types (a mapping for text, a
  bare number for a duration), credential-shaped values, settings the chosen engine or path does
  not use, sections of the wrong shape;
- ``MUTATED_STACKS``: a valid stack with one or two values replaced by a mistake of their shape,
  so a mistake the config model lets through is not hidden behind another that it refuses.

Shared by the render-level property test (tests/config/test_config_property.py) and the server-side
dry run (tests/integration/test_config_property_on_cluster.py).
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

INT32_MAX = 2**31 - 1
ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.18.0"
OLD_ROUTER_IMAGE = "nvcr.io/nvidia/llm-request-router:0.16.2"
PYLON_IMAGE = "nvcr.io/nvidia/stargate-client:0.18.0"
NIM_IMAGES = ("nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4",
              "nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.4@sha256:" + "a" * 64)
# Made-up values in credentials' published shapes: a refusal must never echo them.
CREDENTIALS = ("hf_" + "QxWvErTyUiOpAsDfGhJkLzXcVbNm123456", "nvapi-" + "Zq8x_Kd02-" * 6,
               "AKIA" + "Q7RZ3XJ5WVTK2M4P", "-----BEGIN PRIVATE KEY-----MIIE", "Bearer " + "q8Zt3LmN0pR5sV7wX9yB2cD4")
SECURE = {"secure": "v1:c2VjcmV0"}
ODD_ONE_IN = 30


def build(odd: bool) -> st.SearchStrategy:
    """Stacks with only valid values (``odd`` False), or with mistakes mixed in (``odd`` True)."""

    def maybe(valid: st.SearchStrategy, *odd_values: Any) -> st.SearchStrategy:
        """``valid``; with ``odd``, once in ``ODD_ONE_IN`` draws one of ``odd_values`` instead: a
        stack draws some 30-60 values, so it carries one or two mistakes, and a mistake the
        config model lets through is not hidden behind another it refuses."""
        if not odd or not odd_values:
            return valid
        return st.integers(0, ODD_ONE_IN - 1).flatmap(
            lambda n: st.sampled_from(odd_values) if n == 0 else valid)

    def whole(low: int, high: int, *extra: Any) -> st.SearchStrategy:
        """A whole number; valid ones reach int32's maximum now and then (where ``high`` allows)."""
        edges = [st.integers(low, high)] * 5 + [st.just(high)]
        return maybe(st.one_of(*edges), INT32_MAX, INT32_MAX + 1, -1, 0, 2**63, True, "2", 1.5, {"n": 1}, *extra)

    def pick(*values: Any) -> st.SearchStrategy:
        return st.sampled_from(values)

    def optional(**keys: st.SearchStrategy) -> st.SearchStrategy:
        return st.fixed_dictionaries({}, optional=keys)

    cpu = maybe(pick("1", "2", "4", "500m", "250m", 2, 0.5, "1.5"),
                "0", "-1", "1e40", "16GB", "", {"a": 1}, True, "9" * 30)
    memory = maybe(pick("16Gi", "32Gi", "64Gi", "1e11"), "4Gi", "512Mi", "0", "-1Gi", "1e40", "16GB", "", ["16Gi"])
    shm = maybe(pick("1Gi", "2Gi", "8Gi", "1e9"), "64Gi", "0", "1e40")
    label_keys = maybe(pick("gpu", "nvidia.com/gpu.product", "pool", "example.com/team", "release", "tier"),
                       "bad key", "-x", "Example.com/x", "x" * 64, "a/b/c", "example.com/",
                       "app.kubernetes.io/name", CREDENTIALS[0])
    label_values = maybe(pick("a100", "H100-SXM", "1", "", "monitoring", "team_a.b", "v" * 63),
                         "a b", "-x", "v" * 64, "x/y", CREDENTIALS[2], 5, True)
    labels = st.dictionaries(label_keys, label_values, max_size=3)
    env = st.dictionaries(
        maybe(pick("VLLM_LOGGING_LEVEL", "NIM_LOG_LEVEL", "TZ", "OMP_NUM_THREADS", "my.var"),
              "A=B", "", "HF_TOKEN", "DB_PASSWORD", "HF_HUB_OFFLINE", "NIM_SERVER_PORT", "STARGATE_X", "X\tY"),
        maybe(pick("DEBUG", "1", "UTC", "", "x y z"), *CREDENTIALS, 1, {"a": "b"}), max_size=3)
    images = maybe(pick("docker.io/vllm/vllm-openai:v0.11.0", "docker.io/library/busybox:1.37.0"),
                   "vllm/vllm-openai:v0.11.0", "docker.io/vllm/vllm-openai:latest", "docker.io/vllm/vllm-openai", 7)
    dns_label = maybe(pick("hf-token", "ngc", "creds", "my-secret"), "Bad_Name", "x" * 64, "")
    secret_key = maybe(pick("token", "NGC_API_KEY", "HF_TOKEN", "tls.crt"), "a/b", "..", "")
    storage_class = maybe(pick("fast", "nfs", "standard-rwx", "ebs.csi.aws.com"), "Fast_SSD", "nfs.", "")
    urls = maybe(pick("https://huggingface.co", "http://hf-mirror.mirrors.svc:8080"),
                 "http://127.0.0.1:8080", "huggingface.co", "http://[::ffff:127.0.0.1]:1", "ftp://x")
    revisions = maybe(pick("main", "v1.0", "0123456789abcdef0123456789abcdef01234567"), "abc1234", "..", "")
    repos = maybe(pick("acme/tiny-llm", "Qwen/Qwen2.5-0.5B-Instruct", "meta-llama/Llama-3.1-8B"),
                  "tiny-llm", "a/b/c", "../x")
    toleration = st.one_of(
        st.fixed_dictionaries({"key": maybe(pick("nvidia.com/gpu", "dedicated"), "bad key", "x" * 64),
                               "operator": pick("Exists")}, optional={"effect": pick("NoSchedule", "NoExecute")}),
        st.fixed_dictionaries({"key": pick("dedicated", "example.com/pool"), "operator": maybe(pick("Equal"), "In"),
                               "value": maybe(pick("gpu", "true", ""), "a b", "v" * 64)},
                              optional={"effect": maybe(pick("NoSchedule", "PreferNoSchedule"), "Never")}),
        maybe(st.just({"operator": "Exists"}), {"operator": "Equal", "value": "x"}),
    )
    disruption = optional(drainSeconds=whole(0, 3600, 3601),
                          topologySpread=maybe(pick("node", "node-and-zone", "off"), "zone"))

    @st.composite
    def model_section(draw: st.DrawFn, name: str) -> dict:
        engine = draw(maybe(pick("vllm", "vllm", "nim"), "generic", "sglang"))
        path = draw(pick("raw", "operator")) if engine == "nim" else None
        operator = path == "operator"
        gpus = draw(whole(1, 8))
        raw: dict = {"name": name, "source": draw(maybe(
            st.fixed_dictionaries({"repo": repos}, optional={
                "revision": revisions,
                **({} if operator and not odd else {
                    "allowPatterns": st.lists(maybe(pick("*.safetensors", "*.json"), "", "-x"), min_size=1, max_size=2),
                    "ignorePatterns": st.lists(pick("*.bin", "original/*"), max_size=2)}),
            }), "acme/tiny-llm"))}
        if engine != "vllm" or draw(st.booleans()):
            raw["engine"] = engine
        if operator and not odd:  # the operator path renders no drain wait (config/engines/nim.py)
            keys_disruption = optional(topologySpread=pick("node", "node-and-zone", "off"))
        else:
            keys_disruption = disruption
        if path and (odd or draw(st.booleans()) or operator):
            raw["path"] = path
        elif odd and draw(st.integers(0, 9)) == 0:
            raw["path"] = draw(pick("raw", "operator", "helm"))
        keys: dict[str, st.SearchStrategy] = {
            "gpus": st.just(gpus),
            "resources": optional(cpu=cpu, memory=memory),
            "weights": optional(size=memory, storageClassName=storage_class,
                                accessMode=maybe(pick("ReadWriteOnce", "ReadWriteMany"), "ReadOnlyMany")),
            "healthPath": maybe(pick("/health", "ping", "/v1/health/ready"), "", "/a b"),
            "sharedMemorySizeLimit": shm,
            # Flags every release line's parser takes; odd: managed flags, a credential, what the
            # line's parser refuses (a bare value, a bad int, an unknown flag).
            "args": st.lists(maybe(pick("--enforce-eager", "--max-model-len=4096", "--max-num-seqs=8"),
                                   "--port=9000", "-tp", "--served-model-name=x", f"--api-key={CREDENTIALS[1]}", 3,
                                   "8192", "--max-num-seqs=abc", "--no-such-flag"),
                             max_size=3),
            "env": env,
            "nodeSelector": labels,
            "tolerations": st.lists(toleration, max_size=2),
            "hfTokenSecret": st.fixed_dictionaries({"name": dns_label}, optional={"key": secret_key}),
            "pin": st.booleans(),
            "securityContext": st.fixed_dictionaries(
                {"allowNonDefaultIdentity": maybe(st.just(True), False, "yes"), "runAsUser": whole(1, INT32_MAX)},
                optional={"runAsGroup": whole(0, INT32_MAX)}),
            "disruption": keys_disruption,
        }
        # Replicas, or autoscaling on the engine that has it.
        if engine == "vllm" and draw(st.integers(0, 3)) == 0:
            # 0: the model may sleep (valid only behind a gateway that holds requests).
            low = draw(whole(0, 3))
            sleeps = {"idleSeconds": whole(60, 3600, 59)} if low == 0 else {}
            keys["autoscaling"] = st.fixed_dictionaries(
                {"enabled": maybe(st.just(True), "yes"), "minReplicas": st.just(low),
                 "maxReplicas": maybe(st.integers(low + 1, INT32_MAX) if isinstance(low, int) and low < INT32_MAX
                                      else st.just(INT32_MAX), 1)},
                optional={"targetQueueDepth": whole(1, 20), "scaleDownStabilizationSeconds": whole(0, 3600, 3601),
                          **sleeps})
            keys["weights"] = st.just({"accessMode": "ReadWriteMany"})
        else:
            keys["replicas"] = whole(0, INT32_MAX)
            if odd:
                keys["autoscaling"] = optional(enabled=st.booleans(), maxReplicas=whole(1, 10))
        if engine == "vllm":
            divisors = [d for d in (1, 2, 4, 8) if isinstance(gpus, int) and not isinstance(gpus, bool)
                        and gpus % d == 0] or [1]
            keys["tensorParallelSize"] = maybe(pick(*divisors), 3, 16)
            raw["gpus"] = gpus
            keys["lora"] = st.fixed_dictionaries({"enabled": maybe(st.just(True), False, "yes")}, optional=dict(
                maxLoras=whole(1, 8), maxLoraRank=maybe(pick(8, 16, 32, 64), 1, 17, 1024),
                cacheSizeLimit=memory,
                adapters=st.lists(st.fixed_dictionaries(
                    {"name": maybe(pick("sql-lora", "chat-v2", "code-fix"), name, "../x", "a b", ""),
                     "repo": repos}, optional={"revision": revisions}), max_size=2, unique_by=lambda a: a["name"])))
            keys["image"] = images
            if odd:  # a model's own line; its valid use (with an image of that line) is in tests/config
                keys["vllmRelease"] = pick("0.11", "0.32", "0.33", 11)
            keys["hfEndpoint"] = urls
            if odd:
                keys["nim"] = optional(authSecret=dns_label)
            # Weights from object storage or a claim that already holds them (config/sources.py).
            choice = draw(st.integers(0, 5))
            if choice == 0:
                raw["source"] = draw(st.fixed_dictionaries(
                    {"type": st.just("s3"), "bucket": maybe(pick("weights", "models.example"), "Bad_Bucket", ""),
                     # Copied by the puller, or served straight from the store (config/streaming.py).
                     "load": maybe(pick("copy", "stream"), "mount")},
                    optional={"prefix": pick("llama/", "qwen/0.5b/"),
                              "endpoint": maybe(pick("http://minio.storage.svc:9000", "https://s3.example.com"),
                                                "http://localhost:9000", "ftp://x"),
                              "provider": maybe(pick("Minio", "AWS", "Ceph"), "Azure"),
                              "credentials": st.fixed_dictionaries({"secret": dns_label}),
                              "serviceAccountName": dns_label,
                              "versionAt": maybe(pick("2026-11-30T18:00:00Z", "2025-01-02T03:04:05.5+02:00"),
                                                 "2026-11-30", "2999-01-01T00:00:00Z", "yesterday"),
                              "streamMemoryLimit": memory}))
            elif choice == 1:
                raw["source"] = draw(st.fixed_dictionaries(
                    {"type": st.just("pvc"), "claimName": maybe(dns_label, "Bad_Claim")},
                    optional={"subPath": maybe(pick("llama", "models/qwen"), "../x", "/abs"),
                              "expectFiles": st.lists(pick("config.json", "tokenizer.json"), max_size=2)}))
            # Across nodes on a LeaderWorkerSet (config/multinode.py): shared or per-pod weights, no
            # autoscaling.
            if draw(st.integers(0, 5)) == 0:
                keys["multiNode"] = st.fixed_dictionaries(
                    {"nodes": maybe(st.just(2), 1, 65)},
                    optional={"mode": maybe(pick("ray", "dataParallel"), "mpi"),
                              "expertParallel": st.booleans(),
                              "weights": maybe(pick("shared", "perPod"), "local")})
                keys.pop("autoscaling", None)
            # A next revision beside the serving one (config/revisions.py): new weights, image or
            # args, a share of the traffic at the gateway.
            elif draw(st.integers(0, 4)) == 0:
                keys["next"] = st.fixed_dictionaries({"weight": whole(0, 100, 101)}, optional={
                    "source": st.fixed_dictionaries({"repo": repos}, optional={"revision": revisions}),
                    "image": images, "replicas": whole(1, 4),
                    "args": st.lists(maybe(pick("--enforce-eager", "--max-num-seqs=8"), "--port=9000"), max_size=2)})
        else:
            raw["image"] = draw(maybe(pick(*NIM_IMAGES), *([None] if odd else [])))
            if raw["image"] is None:
                del raw["image"]
            source = draw(pick("ngc", "hf")) if operator else None
            nim: dict[str, st.SearchStrategy] = {}
            if operator:
                nim = {"authSecret": dns_label, "cacheSource": maybe(st.just(source), "s3"),
                       "modelPuller": pick(*NIM_IMAGES),
                       "cacheResources": optional(cpu=cpu, memory=memory)}
                if source == "hf":
                    nim["pullSecret"] = dns_label
                    keys["hfEndpoint"] = urls
                else:
                    nim["profiles"] = st.lists(pick("all", "abc123", "tensorrt_llm-h100-fp8-tp1"), max_size=1)
                    nim["pullSecret"] = dns_label
                    keys["tensorParallelSize"] = st.just(1)
                raw["nim"] = draw(st.fixed_dictionaries({"authSecret": dns_label}, optional={
                    k: v for k, v in nim.items() if k != "authSecret"}))
                if source == "hf" and "pullSecret" not in raw["nim"]:
                    raw["nim"]["pullSecret"] = "ngc"
                if source == "hf":
                    raw["nim"]["cacheSource"] = draw(nim["cacheSource"])
                keys.pop("hfTokenSecret")
                # The NIMService's own multiNode (config/multinode.py): Ray or MPI, no autoscaling.
                if draw(st.integers(0, 5)) == 0:
                    keys["multiNode"] = st.fixed_dictionaries(
                        {"nodes": maybe(st.just(2), 1)}, optional={"mode": maybe(pick("ray", "mpi"), "dataParallel")})
                    keys.pop("autoscaling", None)
            else:
                keys["hfEndpoint"] = urls
                keys["nim"] = optional(authSecret=dns_label)
            if odd:
                keys["lora"] = optional(enabled=st.booleans())
                keys["tensorParallelSize"] = whole(1, 4)
        raw.update(draw(st.fixed_dictionaries({}, optional=keys)))
        if not odd and "next" in raw:  # single-pod models without adapters that do not sleep (config/revisions.py)
            raw.pop("lora", None)
            if raw.get("autoscaling", {}).get("minReplicas") == 0:
                raw["autoscaling"]["minReplicas"] = 1
                raw["autoscaling"].pop("idleSeconds", None)
            raw["next"].setdefault("image", "docker.io/vllm/vllm-openai:v0.11.1")
            if raw["next"]["image"] == raw.get("image"):
                raw["next"]["image"] = "docker.io/vllm/vllm-openai:v0.11.2"
            replicas = raw["next"].get("replicas")
            if isinstance(replicas, int) and replicas > 1:  # the revision's pods share its weights too
                raw["weights"] = {**raw.get("weights", {}), "accessMode": "ReadWriteMany"}
        replicas = raw.get("replicas")
        if not odd and isinstance(replicas, int) and replicas > 1:  # several pods share the weights
            raw["weights"] = {**raw.get("weights", {}), "accessMode": "ReadWriteMany"}
        source = raw.get("source")
        if not odd and isinstance(source, dict) and source.get("type") == "s3":
            if source.get("load") == "stream":  # no volume, one pod per replica, no LoRA (config/streaming.py)
                for key in ("weights", "lora", "multiNode"):
                    raw.pop(key, None)
                source.pop("streamMemoryLimit", None)  # 4Gi, half of the memory below
                source.pop("versionAt", None)  # the stream reads the latest objects
                raw["resources"] = {**raw.get("resources", {}), "memory": "16Gi"}
            else:
                source.pop("streamMemoryLimit", None)
        if not odd and "multiNode" in raw:  # every pod of a group mounts the weights; one pod's LoRA cache
            if raw["multiNode"].get("weights") == "perPod":  # a volume per pod: any mode, pulled in the pod
                source = raw.get("source") if isinstance(raw.get("source"), dict) else {}
                if source.get("type") == "pvc":  # an existing claim is one volume
                    raw["multiNode"]["weights"] = "shared"
                source.pop("serviceAccountName", None)  # the pull runs as the server pods' account
            if raw["multiNode"].get("weights") != "perPod":
                raw["weights"] = {**raw.get("weights", {}), "accessMode": "ReadWriteMany"}
            raw.pop("lora", None)
            # tensor parallel within a node, one pipeline stage per node (config/multinode.py)
            raw["tensorParallelSize"] = raw.get("gpus", 1)  # gpus may be left out (its default is 1)
            if raw["multiNode"].get("mode") != "dataParallel":
                raw["multiNode"].pop("expertParallel", None)
            if raw.get("engine") == "nim":  # the operator's LeaderWorkerSet leaves NIMService args out
                raw.pop("args", None)
        return raw

    def platform_section() -> st.SearchStrategy:
        return optional(
            namespace=maybe(pick("llm-serving", "prod-llm"), "kube-system", "default", "Bad", "n" * 64),
            createNamespace=st.booleans(),
            vllmImage=images, pullerImage=images, busyboxImage=images,
            vllmRelease=maybe(pick("0.11", "0.32"), "0.33", "0.9", 0.32),
            vllmUid=maybe(st.just(2000), 1, INT32_MAX), vllmGid=maybe(st.just(0), INT32_MAX + 1),
            nimUid=maybe(st.just(1000), 0), nimGid=maybe(st.just(2000), -1),
            serviceAccountName=dns_label,
            sharedMemorySizeLimit=shm,
            pendingTimeoutSeconds=whole(1, INT32_MAX),
            restartThreshold=whole(1, 10),
            pullTimeoutSeconds=whole(1, INT32_MAX),
            startupTimeoutSeconds=whole(60, INT32_MAX, 59),
            storageClassName=storage_class,
            imagePullSecrets=st.lists(dns_label, max_size=2),
            gpuNodeSelector=labels,
            gpuTolerations=st.lists(toleration, max_size=2),
            teardownIdentity=optional(enabled=st.booleans(),
                                      serviceAccountName=maybe(pick("teardown", "llm-serving-teardown"), "llm-serving-model")),
            networkPolicy=optional(enabled=st.booleans(), allowFrom=st.lists(st.one_of(
                st.fixed_dictionaries({"namespaceSelector": labels.filter(bool)}, optional={"podSelector": labels}),
                st.fixed_dictionaries({"podSelector": labels.filter(bool)}),
                maybe(st.just({"namespaceSelector": {"kubernetes.io/metadata.name": "monitoring"}}), {})), max_size=2)),
            metrics=optional(
                enabled=st.booleans(),
                interval=maybe(pick("30s", "1m", "15s", "1m30s"), 30, "30", "0s", "1x"),
                labels=labels,
                dashboard=optional(enabled=st.booleans(), labels=labels.filter(bool))),
            hfEndpoint=urls,
            pin=st.booleans(),
            preflight=optional(enabled=st.booleans(), onUnreachable=pick("fail", "warn"),
                               headroomPercent=whole(0, 100, 101)),
            disruption=disruption,
            autoscaling=optional(
                prometheusAddress=maybe(st.just("http://prometheus-operated.monitoring.svc:9090"),
                                        "http://localhost:9090"),
                requireModelMetrics=st.booleans(),
                pollingIntervalSeconds=whole(5, 3600, 4)),
        )

    def router_resources() -> st.SearchStrategy:
        small = st.fixed_dictionaries({"cpu": maybe(pick("100m", "250m"), "0"), "memory": pick("128Mi", "256Mi")})
        big = st.fixed_dictionaries({"cpu": maybe(pick("1", "2"), {"a": 1}), "memory": maybe(pick("1Gi", "2Gi"), "1")})
        return st.fixed_dictionaries({"requests": small, "limits": big})

    def router_section(model_names: list[str]) -> st.SearchStrategy:
        kind = pick("Deployment", "StatefulSet")
        return optional(
            name=maybe(pick("llm-router", "router", "gw"), "r" * 41, "Router", *(f"{n}-next" for n in model_names[:1])),
            replicas=whole(1, INT32_MAX),
            uid=whole(1, INT32_MAX), gid=whole(0, INT32_MAX),
            resources=router_resources(),
            serviceAccount=dns_label,
            workload=optional(kind=kind, **({"migrateFrom": pick("Deployment", "StatefulSet"),
                                             "podManagementPolicy": pick("OrderedReady", "Parallel")} if odd else {})),
            backendRouter=optional(enabled=maybe(st.just(True), "auto", "maybe", False),
                                   image=st.just(ROUTER_IMAGE), replicas=whole(1, INT32_MAX),
                                   resources=router_resources(), serviceAccount=dns_label),
            drainTimeoutMs=whole(1000, 600000, 999),
            metrics=optional(serviceMonitor=st.booleans()),
            tls=maybe(st.one_of(
                st.fixed_dictionaries({"enabled": st.just(True)}, optional={
                    "issuer": st.fixed_dictionaries({"name": dns_label}, optional={"kind": pick("Issuer", "ClusterIssuer")}),
                    "secretName": dns_label}),
                st.just({"enabled": True, "existingSecret": "router-tls"}),
                st.just({"enabled": False})),
                {"enabled": True, "dnsNames": ["bank.example.com"]}, {"existingSecret": "x"}),
            models=st.lists(maybe(pick(*(model_names or ["ghost"])), "ghost"), min_size=1, max_size=2, unique=True),
            args=st.lists(maybe(pick("--log-level=debug"), "--http-listen-addr=0.0.0.0:1"), max_size=1),
            env=env,
            release=maybe(pick("chart-0.16", "public-0.4"), "public-9"),
            loadBalancer=optional(
                default=maybe(pick("power-of-n", "round-robin", "pulsar"), "fastest"),
                models=st.dictionaries(maybe(pick(*(model_names or ["ghost"])), "ghost"),
                                       pick("power-of-n", "random", "pulsar"), max_size=1)),
            gateway=optional(
                enabled=st.booleans(), replicas=whole(1, 4), workerProcesses=whole(1, 8, 65),
                serviceType=maybe(pick("ClusterIP"), "NodePort", "Ingress"),  # NodePort needs apiKeys
                requestTimeoutSeconds=whole(1, 600),
                hold=optional(timeoutSeconds=whole(0, 120, 3601), maxPerModel=whole(1, 16, 64), maxTotal=whole(16, 32)),
                affinity=optional(enabled=st.booleans(), maxLeadingMessages=whole(1, 16),
                                  sessionHeader=maybe(pick("x-session-id"), "bad header")),
                models=st.lists(maybe(pick(*(model_names or ["ghost"])), "ghost"), min_size=1, max_size=2,
                                unique=True),
                tls=maybe(st.one_of(
                    st.fixed_dictionaries({"enabled": st.just(True)}, optional={
                        "issuer": st.fixed_dictionaries({"name": dns_label},
                                                        optional={"kind": pick("Issuer", "ClusterIssuer")}),
                        "secretName": dns_label}),
                    st.just({"enabled": True, "existingSecret": "gateway-tls"}),
                    st.just({"enabled": False})),
                    {"enabled": True, "dnsNames": ["llm.example.com"]}, {"enabled": True, "allowedDomains": ["x.io"]},
                    {"existingSecret": "x"})),
        )

    @st.composite
    def router_with_pylon(draw: st.DrawFn, model_names: list[str]) -> dict:
        router = {"image": draw(maybe(pick(ROUTER_IMAGE, OLD_ROUTER_IMAGE), "stargate:1"))}
        router.update(draw(router_section(model_names)))
        if draw(st.booleans()):
            router["pylon"] = draw(st.fixed_dictionaries({"image": maybe(st.just(PYLON_IMAGE), "pylon:1")}, optional={
                "resources": optional(cpu=pick("250m", "500m"), memory=pick("256Mi", "512Mi"),
                                      cpuLimit=maybe(pick("1", "2"), "100m"), memoryLimit=maybe(pick("1Gi"), "1Mi")),
                "initialInputTps": maybe(st.floats(0.1, 1e4), 0, -1, float("inf"), "fast"),
                "upstreamBackend": pick("passthrough", "dynamo"),
                "args": st.lists(maybe(pick("--log-level=debug"), "--model-name=x"), max_size=1),
            }))
            old = router["image"] == OLD_ROUTER_IMAGE
            router["workerAuth"] = draw(st.one_of(
                st.just({"mode": "open"}),
                *([] if old else [st.fixed_dictionaries({"mode": st.just("token"), "secretName": dns_label},
                                                        optional={"tokenKey": secret_key, "authFileKey": secret_key,
                                                                  "clusterId": dns_label})])))
        elif odd and draw(st.integers(0, 4)) == 0:
            router["workerAuth"] = {"mode": "open"}
        return router

    @st.composite
    def stacks(draw: st.DrawFn) -> dict:
        """The `llm-serving:*` sections of one stack file."""
        count = draw(st.integers(1, 3))
        names = draw(st.lists(maybe(pick("chat", "code", "embed", "m1", "llama-8b", "qwen"),
                                    "Chat", "1chat", "chat-", "x" * 46, "a.b", "", "llm-router"),
                              min_size=count, max_size=count, unique=not odd))
        models = [draw(model_section(name)) for name in names]
        raw: dict = {"models": models}
        if draw(st.booleans()):
            raw["platform"] = draw(platform_section())
            release = raw["platform"].get("vllmRelease")
            if not odd and release and "vllmImage" in raw["platform"]:
                # A valid platform's image is of its line (another tag is refused: config/vllm_release.py).
                raw["platform"]["vllmImage"] = f"docker.io/vllm/vllm-openai:v{release}.0"
        running = raw.get("platform", {}).get("vllmImage") or "docker.io/vllm/vllm-openai:v0.11.0"
        for section in models if not odd else ():
            # A revision of the image the model already runs changes nothing (config/revisions.py).
            if "next" in section and "image" not in section and section["next"].get("image") == running:
                section["next"]["image"] = "docker.io/vllm/vllm-openai:v0.11.2"
        if draw(st.integers(0, 2)) == 0:
            raw["router"] = draw(router_with_pylon(names))
        if draw(st.booleans()):
            raw["hfToken"] = draw(maybe(st.just(SECURE), CREDENTIALS[0]))
        if any(m.get("engine") == "nim" for m in models) or draw(st.integers(0, 3)) == 0:
            raw["ngcApiKey"] = SECURE
        if odd and draw(st.integers(0, 20)) == 0:  # a section of the wrong shape
            raw[draw(pick("models", "platform", "router"))] = draw(pick("x", 3, [], {"a": 1}, None))
        return raw

    return stacks()


# What a mutation may put in place of a value, by the value's type: the mistakes of each shape.
_ODD_BY_TYPE: dict[type, tuple] = {
    bool: ("yes", 1, "true", None, {"a": 1}),
    # int32's edge first: the one mistake a type check cannot see.
    int: (INT32_MAX + 1, INT32_MAX + 1, INT32_MAX + 1, 2**63, -1, 0, True, "2", 1.5, {"n": 1}, [1], "1e3"),
    float: (float("inf"), -1.0, 0.0, "fast", True),
    str: ("a b", "-x", "x" * 64, "Example.com/x", "x/y", "", "v" * 300, 30, 1.5, True, {"a": "b"}, ["x"],
          *CREDENTIALS),
    list: ("x", {"a": 1}, [3], [None], [{"a": 1}]),
}
# The keys whose values are label maps (selectors and labels to set), and mistakes for them.
LABEL_MAPS = ("nodeSelector", "gpuNodeSelector", "namespaceSelector", "podSelector", "labels")
_ODD_LABELS = (("bad key", "x"), ("x" * 64, "x"), ("Example.com/a", "x"), ("a/b/c", "x"), ("example.com/", "x"),
               ("tier", "a b"), ("tier", "v" * 64), ("tier", "-x"), ("tier", "x/y"))
_ODD_LABEL_KEYS = ("bad key", "x" * 64, "Example.com/a", "a/b/c", "-x", "example.com/", CREDENTIALS[0])


def _leaves(node: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every value in a raw stack, containers included."""
    found: list[tuple[Any, Any]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found.append((node, key))
        found.extend(_leaves(value))
    return found


@st.composite
def _mutated(draw: st.DrawFn) -> dict:
    """A valid stack with one or two values replaced by a mistake of their own shape (a number
    beyond int32, a label key outside the rules, a mapping for text, a credential, ...): the
    mistake is the only one, so one the config model lets through reaches the render checks."""
    raw = copy.deepcopy(draw(VALID_STACKS))
    at_the_edge = [(c, k) for c, k in _leaves(raw) if c[k] == INT32_MAX and type(c[k]) is int]
    if at_the_edge and draw(st.integers(0, 2)) == 0:
        # One past the largest number Kubernetes takes, wherever the stack is at the edge.
        for container, key in at_the_edge:
            container[key] = INT32_MAX + 1
        return raw
    label_maps = [c[k] for c, k in _leaves(raw) if k in LABEL_MAPS and isinstance(c[k], dict)]
    if label_maps and draw(st.integers(0, 2)) == 0:
        # One label key or value outside Kubernetes' rules, in every label map and selector.
        key, value = draw(st.sampled_from(_ODD_LABELS))
        for labels in label_maps:
            labels[key] = value
        return raw
    texts = {id(c[k]) for c, k in _leaves(raw) if k in ("env", "args", *LABEL_MAPS)}
    free_text = [(c, k) for c, k in _leaves(raw) if isinstance(c[k], str) and id(c) in texts]
    if free_text and draw(st.integers(0, 3)) == 0:
        # A credential pasted into a field that takes any text (env, args, label values).
        container, key = draw(st.sampled_from(free_text))
        container[key] = draw(st.sampled_from(CREDENTIALS))
        return raw
    for _ in range(draw(st.integers(1, 2))):
        # First the shape, then a value of it: integers and label maps are few among the strings.
        shape = draw(st.sampled_from((int, str, dict, list, bool, object)))
        leaves = [(c, k) for c, k in _leaves(raw) if shape is object or type(c[k]) is shape] or _leaves(raw)
        container, key = draw(st.sampled_from(leaves))
        value = container[key]
        if isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()) \
                and draw(st.booleans()):
            value[draw(st.sampled_from(_ODD_LABEL_KEYS))] = draw(st.sampled_from(("x", "a b", CREDENTIALS[2])))
            continue
        pool = _ODD_BY_TYPE.get(type(value), ("x", 3, [], None))
        # A copy: the pool's lists and mappings are shared by every example, and a second
        # replacement could change one in place or put it inside itself (seen: a RecursionError
        # and hypothesis's FlakyStrategyDefinition once the shared ["x"] held itself).
        container[key] = copy.deepcopy(draw(st.sampled_from(pool)))
    return raw


@st.composite
def _named_stacks(draw: st.DrawFn) -> dict:
    """Stacks whose names may meet (issue 38): models with next revisions (`<model>-next`) and
    LoRA adapters, a router and its gateway, named from a small pool weighted towards the names
    already taken (every model's, every revision's), and revisions of one to three pods on either
    access mode. Accepted ones must render one object per name and one workload per served name."""
    count = draw(st.integers(1, 3))
    names = ["chat", "code", "embed"][:count]
    revised = draw(st.lists(st.sampled_from(names), min_size=1, max_size=count, unique=True))
    taken = [*(f"{n}-next" for n in revised), *(f"{n}-next" for n in revised), *names]
    # One kind of name meets the taken ones per stack, so a meeting is not hidden behind another
    # that is refused.
    meets = draw(st.sampled_from(("nothing", "adapter", "router", "gateway")))
    models = []
    for name in names:
        section: dict = {"name": name, "source": {"repo": "acme/tiny-llm"}, "resources": {"memory": "16Gi"},
                         "weights": {"accessMode": draw(st.sampled_from(("ReadWriteOnce", "ReadWriteMany")))}}
        if name in revised:
            section["next"] = {"weight": draw(st.integers(0, 100)), "replicas": draw(st.integers(1, 3)),
                               **draw(st.sampled_from(({"source": {"repo": "acme/tiny-llm-v2"}},
                                                       {"image": "docker.io/vllm/vllm-openai:v0.11.1"})))}
            if "source" not in section["next"]:  # both revisions mount the model's one volume
                section["weights"]["accessMode"] = "ReadWriteMany"
        elif meets == "adapter" or draw(st.booleans()):
            adapters = ["sql-lora", *taken] if meets == "adapter" else ["sql-lora", f"{name}-sql"]
            section["lora"] = {"enabled": True, "adapters": [
                {"name": adapter, "repo": "acme/sql-lora"}
                for adapter in draw(st.lists(st.sampled_from(adapters), min_size=1, max_size=2, unique=True))]}
        models.append(section)
    router: dict = {"image": ROUTER_IMAGE, "pylon": {"image": PYLON_IMAGE}, "workerAuth": {"mode": "open"},
                    "name": draw(st.sampled_from(["llm-router", *taken])) if meets == "router" else "llm-router"}
    if meets == "gateway":
        router["gateway"] = {"name": draw(st.sampled_from(["llm-gateway", *taken]))}
    return {"models": models, "router": router}


NAMED_STACKS = _named_stacks()
VALID_STACKS = build(odd=False)
ODD_STACKS = build(odd=True)
MUTATED_STACKS = _mutated()
STACKS = st.one_of(VALID_STACKS, MUTATED_STACKS, MUTATED_STACKS, ODD_STACKS)
