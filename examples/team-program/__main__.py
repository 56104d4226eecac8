"""A team's own program: its namespace and provider, two models and a router from llm-serving.

Everything here is this program's: the `kubernetes.Provider` (the ambient kubeconfig, or
`kubernetes:kubeconfig`), the Namespace, and what it exports. llm-serving adds the model servers,
their weights and status, the router and its OpenAI gateway, all on that provider.
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
namespace = k8s.core.v1.Namespace(
    "team-namespace",
    metadata={"name": namespace_name, "labels": {"team": "a"}},
    opts=pulumi.ResourceOptions(provider=cluster),
)

small = llm.Resources(cpu="1", memory="4Gi")
serving = llm.ModelServing(
    "team-a",
    llm.ModelServingArgs(
        namespace=namespace_name,
        models=[
            llm.ModelArgs("chat", llm.HubSource("acme/tiny-llm", revision=REVISION), gpus=1, resources=small,
                          weights_size="1Gi"),
            llm.ModelArgs("summarize", llm.HubSource("acme/tiny-llm-summarize", revision=REVISION), gpus=1,
                          resources=small, weights_size="1Gi"),
        ],
        # The router reaches the models through the pylon sidecar in their pods (without one it
        # would route to nothing, so the library refuses that); workerAuth open: a demo cluster.
        router=llm.RouterArgs(image=config.get("routerImage") or "registry.example.com/llm/request-router:0.16.2",
                              settings={"pylon": {"image": config.get("pylonImage")
                                                  or "registry.example.com/llm/stargate-client:0.16.2"},
                                        "workerAuth": {"mode": "open"}}),
        kubeconfig_content=kubeconfig,
        platform={"sharedMemorySizeLimit": "1Gi",
                  **({"storageClassName": config.get("storageClassName")} if config.get("storageClassName") else {})},
    ),
    opts=pulumi.ResourceOptions(providers=[cluster], depends_on=[namespace]),
)

pulumi.export("endpoints", serving.endpoints)
pulumi.export("states", serving.states)
pulumi.export("router", serving.router)
pulumi.export("llm_serving_version", llm.__version__)
