"""A team's own program: its namespace, provider and S3 keys, three models and a router from
llm-serving.

Everything here is this program's: the `kubernetes.Provider` (the ambient kubeconfig, or
`kubernetes:kubeconfig`), the Namespace, the Secret with the S3 keys, and what it exports.
llm-serving adds the model servers, their weights and status, the router and its OpenAI gateway,
all on that provider. The namespace and the Secret are passed as their Outputs: every object
llm-serving declares in them waits for them, with no `depends_on` to keep in step.

The arguments are the stack config's sections, typed (docs/library.md; every field's docstring is
its config-reference entry): `llm.Model`, `llm.HubSource`, `llm.S3Source`, `llm.Router`, ...
"""

import pulumi
import pulumi_kubernetes as k8s

import llm_serving as llm

config = pulumi.Config()
namespace_name = config.get("namespace") or "team-a"
# A commit, not a branch: the library runs no Hub preflight that would pin it.
REVISION = "8f1a8a7c2a9b6c4d5e3f201918171615141312aa"

# The cluster's kubeconfig as content (a secret: `pulumi config set --secret kubeconfig < file`, or
# a cluster resource's output); unset: the ambient kubeconfig. llm-serving's status and gate read
# the cluster with the same content, so no kubeconfig file is needed where `up` or `destroy` runs.
kubeconfig = config.get_secret("kubeconfig")
cluster = k8s.Provider("team-cluster", kubeconfig=kubeconfig)
on_cluster = pulumi.ResourceOptions(provider=cluster)
namespace = k8s.core.v1.Namespace(
    "team-namespace", metadata={"name": namespace_name, "labels": {"team": "a"}}, opts=on_cluster)
# The object store's keys, from this program's secret config, as the Secret the streamed model
# reads (the AWS names, whatever the store).
s3_keys = k8s.core.v1.Secret(
    "team-s3-keys", metadata={"name": "team-s3-keys", "namespace": namespace.metadata.name},
    string_data={"AWS_ACCESS_KEY_ID": config.require_secret("s3AccessKeyId"),
                 "AWS_SECRET_ACCESS_KEY": config.require_secret("s3SecretAccessKey")},
    opts=on_cluster)

small = llm.Resources(cpu="1", memory="4Gi")
one_gib = llm.WeightsStorage(size="1Gi")
serving = llm.ModelServing(
    "team-a",
    llm.ModelServingArgs(
        namespace=namespace.metadata.name,
        models=[
            llm.Model("chat", llm.HubSource("acme/tiny-llm", revision=REVISION), gpus=1, resources=small,
                      weights=one_gib),
            llm.Model("summarize", llm.HubSource("acme/tiny-llm-summarize", revision=REVISION), gpus=1,
                      resources=small, weights=one_gib),
            # Streamed from the store by vLLM's loader: no weights volume, no puller Job.
            llm.Model("stream", llm.S3Source(
                config.get("s3Bucket") or "models", prefix="tiny-llm/",
                endpoint=config.get("s3Endpoint") or "http://minio.storage.svc:9000", load="stream",
                stream_memory_limit="1Gi", credentials=llm.S3Credentials(secret=s3_keys.metadata.name)),
                gpus=1, resources=small),
        ],
        # The router reaches the models through the pylon sidecar in their pods (without one it
        # would route to nothing, so the library refuses that); workerAuth open: a demo cluster.
        router=llm.Router(
            image=config.get("routerImage") or "registry.example.com/llm/request-router:0.16.2",
            pylon=llm.PylonConfig(image=config.get("pylonImage") or "registry.example.com/llm/stargate-client:0.16.2"),
            worker_auth=llm.WorkerAuth(mode="open")),
        kubeconfig_content=kubeconfig,
        platform=llm.Platform(shared_memory_size_limit="1Gi",
                              storage_class_name=config.get("storageClassName") or None),
    ),
    opts=pulumi.ResourceOptions(providers=[cluster]),
)

pulumi.export("endpoints", serving.endpoints)
pulumi.export("states", serving.states)
pulumi.export("router", serving.router)
pulumi.export("llm_serving_version", llm.__version__)
