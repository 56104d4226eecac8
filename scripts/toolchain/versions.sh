# shellcheck shell=bash
# Pinned versions of the local toolchain (sourced by bootstrap.sh and scripts/cluster/cluster.sh).
# Everything is built from the Go module proxy; see docs/toolchain.md for why each pin was chosen.

# Pulumi engine/CLI. The Python program pins pulumi==3.272.0 (newest on PyPI), but the Go module
# proxy does not serve github.com/pulumi/pulumi/pkg/v3@v3.272.0 (403); v3.274.0 is the nearest
# served release. A newer CLI runs an older Python SDK fine.
PULUMI_VERSION=3.274.0

# pulumi-kubernetes provider. Only this pseudo-version of .../provider/v4 is served (commit
# f47bc2d6f199, 2026-01-15, between sdk/v4.24.0 and sdk/v4.25.0 tags; the 4.25.0 tag commit itself
# is refused). It is stamped 4.25.0 to pair with the Python SDK pulumi-kubernetes==4.25.0.
PULUMI_K8S_PROVIDER_MODULE_VERSION=v4.0.0-20260115033456-f47bc2d6f199
PULUMI_K8S_VERSION=4.25.0
PULUMI_K8S_GO_SDK_VERSION=v4.25.0 # replaces the provider's `sdk/v4 => ../sdk`

# Simulated cluster: control plane + KWOK (v0.8.0 is built against Kubernetes 1.36).
K8S_VERSION=v1.36.3
K8S_STAGING_VERSION=v0.36.3
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0

# Bump when the build recipe changes in a way that invalidates already-built binaries.
TOOLCHAIN_RECIPE=1

TOOLCHAIN_VERSION_KEY="pulumi${PULUMI_VERSION}-k8sprov${PULUMI_K8S_VERSION}-k8s${K8S_VERSION#v}-etcd${ETCD_VERSION#v}-kwok${KWOK_VERSION#v}-r${TOOLCHAIN_RECIPE}"
TOOLCHAIN_ROOT="${LLM_SERVING_TOOLCHAIN_DIR:-$HOME/.cache/llm-serving-toolchain}"
TOOLCHAIN_DIR="$TOOLCHAIN_ROOT/$TOOLCHAIN_VERSION_KEY"
TOOLCHAIN_BIN="$TOOLCHAIN_DIR/bin"
TOOLCHAIN_ENV="$TOOLCHAIN_DIR/env.sh"

# Operators on the simulated cluster (scripts/toolchain/operators.sh): the LeaderWorkerSet
# manager built from its module, and the real CRDs of the operators the program targets, taken
# from the same modules. A separate cache key: changing these never rebuilds the pieces above.
LWS_VERSION=v0.8.0
KEDA_VERSION=v2.16.1            # the KEDA release the autoscaling code follows
# prometheus-operator: the code follows v0.84.1, which the module proxy refuses (403); v0.85.0 is
# the nearest served release (ServiceMonitor is monitoring.coreos.com/v1 in both).
PROMETHEUS_OPERATOR_VERSION=v0.85.0
CERT_MANAGER_VERSION=v1.19.1    # router TLS issues cert-manager Certificates
OPERATORS_RECIPE=1
OPERATORS_VERSION_KEY="lws${LWS_VERSION#v}-keda${KEDA_VERSION#v}-promop${PROMETHEUS_OPERATOR_VERSION#v}-certmanager${CERT_MANAGER_VERSION#v}-r${OPERATORS_RECIPE}"
OPERATORS_DIR="$TOOLCHAIN_ROOT/operators/$OPERATORS_VERSION_KEY"
OPERATORS_ENV="$OPERATORS_DIR/env.sh"

# The real node (scripts/node/build.sh, started by scripts/cluster/cluster.sh with --real-node):
# kubelet and kube-proxy from the control plane's Kubernetes pins above; CoreDNS and the test
# cluster's NetworkPolicy enforcer (kube-router's policy controller: only v2.1.0 is served, and
# security flaws are reported against it, so it only ever runs on the local test cluster, never
# in what the program deploys) from their own modules; the pause image from scripts/node/pause.c;
# containerd, runc, the CNI plugins, iptables, ipset and conntrack from Debian's packages.
# A separate cache key: changing these never rebuilds the toolchain.
COREDNS_VERSION=v1.15.0
KUBE_ROUTER_VERSION=v2.1.0
REAL_NODE_RECIPE=1
REAL_NODE_VERSION_KEY="k8s${K8S_VERSION#v}-coredns${COREDNS_VERSION#v}-kuberouter${KUBE_ROUTER_VERSION#v}-r${REAL_NODE_RECIPE}"
REAL_NODE_DIR="$TOOLCHAIN_ROOT/real-node/$REAL_NODE_VERSION_KEY"
