#!/usr/bin/env bash
# Simulated GPU Kubernetes cluster (KWOK, binary runtime: no containers, no Docker).
#
#   scripts/cluster/cluster.sh start       create/start cluster "llm-serving" + GPU nodes, storage (idempotent)
#   scripts/cluster/cluster.sh stop        tear it down (deletes the cluster and its state)
#   scripts/cluster/cluster.sh status      report cluster/nodes/PVs (exit 1 if not running)
#   scripts/cluster/cluster.sh kubeconfig  print the kubeconfig path (export KUBECONFIG=$(... kubeconfig))
#   scripts/cluster/cluster.sh verify      smoke test: pod Ready on a GPU node, Job Complete,
#                                          EndpointSlice ready endpoints, PVC Bound
#   scripts/cluster/cluster.sh reclaim     make Released local-weights / local-node / real-node PVs Available again
#   scripts/cluster/cluster.sh start --real-node   also a real node (or LLM_SERVING_REAL_NODE=1)
#   scripts/cluster/cluster.sh stop-real-node      stop only the real node (the cluster stays)
#   scripts/cluster/cluster.sh start-hub DIR ENDPOINT REPO...  the Hub stand-in up-local pulls from,
#                                          in the background on the real node's bridge (stopped by stop)
#
# The real node (scripts/node/): a kubelet, kube-proxy, containerd, CNI, CoreDNS and a
# NetworkPolicy enforcer on this machine, beside the fake nodes, for pods that tolerate its taint
# llm-serving.dev/real-node. One per machine, so one cluster at a time owns it: opt-in per
# cluster, on for the cluster scripts/up-local.sh starts; `verify` then also proves a real pod
# and `stop` removes everything it put on the host. See docs/01-local-cluster.md.
#
# Needs the toolchain from scripts/toolchain/bootstrap.sh (built into the cache dir) and the
# operators from scripts/toolchain/operators.sh: `start` also installs the real LeaderWorkerSet
# CRD and runs the real LWS controller manager (webhooks served on loopback, see start_lws).
# Knobs: LLM_SERVING_GPU_NODES (2), LLM_SERVING_CPU_NODES (1), LLM_SERVING_PVS (20).
#
# LLM_SERVING_CLUSTER=<name> (default llm-serving) names the cluster every command acts on: each
# name is a cluster of its own (kwokctl picks its own ports for etcd and the control plane), with
# its own kubeconfig, start/stop lock, LWS controller and LWS webhook/health ports, so several run
# side by side (the test command gives the cluster-wide test modules clusters of their own,
# scripts/test.sh). The default cluster keeps the paths and ports it always had.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../toolchain/versions.sh
source "$HERE/../toolchain/versions.sh"

DEFAULT_CLUSTER=llm-serving
CLUSTER_NAME=${LLM_SERVING_CLUSTER:-$DEFAULT_CLUSTER}
[[ $CLUSTER_NAME =~ ^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$ ]] \
  || { echo "[cluster] ERROR: LLM_SERVING_CLUSTER=$CLUSTER_NAME: use lowercase letters, digits and '-'" >&2; exit 2; }
# Per cluster: the default's file names stay as they were (a running cluster keeps working).
if [[ $CLUSTER_NAME == "$DEFAULT_CLUSTER" ]]; then CLUSTER_SUFFIX=""; else CLUSTER_SUFFIX="-$CLUSTER_NAME"; fi
export KUBECONFIG_PATH="${LLM_SERVING_KUBECONFIG:-$TOOLCHAIN_ROOT/kubeconfig$CLUSTER_SUFFIX}"
GPU_NODES=${LLM_SERVING_GPU_NODES:-2}
CPU_NODES=${LLM_SERVING_CPU_NODES:-1}
NUM_PVS=${LLM_SERVING_PVS:-20}
REAL_NODE=${LLM_SERVING_REAL_NODE:-0}
[[ $REAL_NODE == 0 || $REAL_NODE == 1 ]] \
  || { echo "[cluster] ERROR: LLM_SERVING_REAL_NODE=$REAL_NODE: use 1 (a real node beside the fake ones) or 0" >&2; exit 2; }
REAL_NODE_SH="$HERE/../node/real-node.sh"

log() { echo "[cluster] $*"; }
die() { echo "[cluster] ERROR: $*" >&2; exit 1; }

need_toolchain() {
  local b
  for b in kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    [[ -x "$TOOLCHAIN_BIN/$b" ]] || die "$TOOLCHAIN_BIN/$b missing: run scripts/toolchain/bootstrap.sh first"
  done
  export PATH="$TOOLCHAIN_BIN:$PATH"
  # kwokctl --runtime binary: use the locally built binaries, never download anything.
  export KWOK_WORKDIR="$TOOLCHAIN_ROOT/kwok"
  STAMP="$KWOK_WORKDIR/$CLUSTER_NAME.toolchain"
  export KWOK_RUNTIME=binary
  export KWOK_KUBE_VERSION="$K8S_VERSION"
  export KWOK_ETCD_VERSION="${ETCD_VERSION#v}"
  export KWOK_KUBE_APISERVER_BINARY="$TOOLCHAIN_BIN/kube-apiserver"
  export KWOK_KUBE_CONTROLLER_MANAGER_BINARY="$TOOLCHAIN_BIN/kube-controller-manager"
  export KWOK_KUBE_SCHEDULER_BINARY="$TOOLCHAIN_BIN/kube-scheduler"
  export KWOK_KUBECTL_BINARY="$TOOLCHAIN_BIN/kubectl"
  export KWOK_ETCD_BINARY="$TOOLCHAIN_BIN/etcd"
  export KWOK_CONTROLLER_BINARY="$TOOLCHAIN_BIN/kwok"
}

kc() { kubectl --kubeconfig "$KUBECONFIG_PATH" "$@"; }

cluster_exists() { kwokctl get clusters 2>/dev/null | grep -qx "$CLUSTER_NAME"; }
api_ready() { [[ -f "$KUBECONFIG_PATH" ]] && kc get --raw=/readyz >/dev/null 2>&1; }

wait_until() { # wait_until <seconds> <command...>: 0 once the command succeeds, 1 on timeout
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 1
  done
}
wait_for() { # wait_for <seconds> <description> <command...>: like wait_until, but fatal
  local secs=$1 what=$2; shift 2
  wait_until "$secs" "$@" || die "timed out after ${secs}s waiting for $what"
}

# node_yaml <name> <instance type> <zone> <pod CIDR> <capacity> <extra labels> <extra spec>:
# one fake node (KWOK plays its kubelet); GPU and CPU nodes differ only in the arguments.
node_yaml() {
  local name=$1 instance=$2 zone=$3 cidr=$4 capacity=$5 labels=$6 spec=$7
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: $name
    beta.kubernetes.io/os: linux
    beta.kubernetes.io/arch: amd64
    node.kubernetes.io/instance-type: $instance
    topology.kubernetes.io/region: sim-region-1
    topology.kubernetes.io/zone: $zone
$labels
spec:
  podCIDR: $cidr
  podCIDRs: [$cidr]
${spec:+$spec
}status:
  capacity: $capacity
  allocatable: $capacity
  nodeInfo:
    architecture: amd64
    operatingSystem: linux
    kubeletVersion: $K8S_VERSION
    kubeProxyVersion: $K8S_VERSION
    containerRuntimeVersion: containerd://2.0.0
    osImage: Ubuntu 22.04.4 LTS
    kernelVersion: 5.15.0-kwok
EOF
}

GPU_NODE_LABELS='    node-role.kubernetes.io/gpu-worker: ""
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB
    nvidia.com/gpu.count: "8"
    nvidia.com/gpu.memory: "81920"
    nvidia.com/gpu.family: ampere
    nvidia.com/gpu.machine: a2-ultragpu-8g
    nvidia.com/cuda.driver.major: "550"
    nvidia.com/cuda.runtime.major: "12"
    nvidia.com/mig.capable: "true"'
# Tainted like a real GPU pool: only pods that tolerate it (the model servers) land there.
GPU_NODE_TAINTS='  taints:
  - key: nvidia.com/gpu
    value: present
    effect: NoSchedule'

gpu_nodes_yaml() {
  local i zone
  for ((i = 0; i < GPU_NODES; i++)); do
    if ((i % 2 == 0)); then zone=sim-region-1-a; else zone=sim-region-1-b; fi
    node_yaml "gpu-node-$i" a2-ultragpu-8g "$zone" "10.244.$((i + 1)).0/24" \
      '{cpu: "64", memory: 512Gi, nvidia.com/gpu: "8", pods: "110", ephemeral-storage: 2Ti}' \
      "$GPU_NODE_LABELS" "$GPU_NODE_TAINTS"
  done
  for ((i = 0; i < CPU_NODES; i++)); do
    node_yaml "cpu-node-$i" n2-standard-16 sim-region-1-a "10.244.$((100 + i)).0/24" \
      '{cpu: "16", memory: 64Gi, pods: "110", ephemeral-storage: 500Gi}' \
      '    node-role.kubernetes.io/cpu-worker: ""' ""
  done
}

# StorageClass local-weights (default, static PVs, Immediate binding: the PV controller binds a
# PVC as soon as it is created, so Pulumi's PVC await sees Bound without a consuming pod) and
# NUM_PVS hostPath PVs of 200Gi. Every 4th PV is ReadWriteMany (+ReadOnlyMany), the rest RWO.
storage_yaml() {
  cat <<EOF
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-weights
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
reclaimPolicy: Retain
allowVolumeExpansion: false
EOF
  local i modes
  for ((i = 0; i < NUM_PVS; i++)); do
    if ((i % 4 == 3)); then modes="[ReadWriteMany, ReadOnlyMany]"; else modes="[ReadWriteOnce]"; fi
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: local-weights-pv-$(printf %02d "$i")
  labels:
    llm-serving/volume-pool: local-weights
spec:
  storageClassName: local-weights
  capacity: {storage: 200Gi}
  accessModes: $modes
  persistentVolumeReclaimPolicy: Retain
  volumeMode: Filesystem
  hostPath:
    path: /var/lib/llm-serving/weights/pv-$(printf %02d "$i")
    type: DirectoryOrCreate
EOF
  done
}

# StorageClass local-node: node-local volumes as on a real GPU cluster (local NVMe, or a zonal
# disk), WaitForFirstConsumer binding: a claim binds only when its first pod is scheduled, to a
# PV on that pod's node. LOCAL_PVS_PER_NODE pre-created `local` PVs with required node affinity
# on every node, CPU nodes included: a weights puller scheduled on a CPU node would bind its
# volume there, where no server can follow (tests/integration/test_placement_on_cluster.py).
# Not the default class; the local-weights class and PVs above stay as they are.
LOCAL_PVS_PER_NODE=${LLM_SERVING_LOCAL_PVS_PER_NODE:-2}
local_node_storage_yaml() {
  cat <<EOF
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-node
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
allowVolumeExpansion: false
EOF
  local node i
  for node in $(all_node_names); do
    for ((i = 0; i < LOCAL_PVS_PER_NODE; i++)); do
      cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: local-node-$node-$i
  labels:
    llm-serving/volume-pool: local-node
spec:
  storageClassName: local-node
  capacity: {storage: 200Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  volumeMode: Filesystem
  local:
    path: /var/lib/llm-serving/local/pv-$i
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$node]}
EOF
    done
  done
}

all_node_names() {
  local i
  for ((i = 0; i < GPU_NODES; i++)); do echo "gpu-node-$i"; done
  for ((i = 0; i < CPU_NODES; i++)); do echo "cpu-node-$i"; done
}

apply_manifests() {
  log "applying nodes ($GPU_NODES GPU + $CPU_NODES CPU), storage classes, $NUM_PVS + $LOCAL_PVS_PER_NODE/node PVs, stages"
  wait_for 60 "Stage CRD" kc wait --for=condition=Established crd/stages.kwok.x-k8s.io --timeout=1s
  kc apply -f "$HERE/stages/" >/dev/null
  { gpu_nodes_yaml; storage_yaml; local_node_storage_yaml; } | kc apply -f - >/dev/null
  wait_for 60 "nodes Ready" kc wait --for=condition=Ready node --all --timeout=1s
}

reclaim_pvs() {
  local pv path
  for pv in $(kc get pv -l 'llm-serving/volume-pool in (local-weights,local-node,real-node)' \
      -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}'); do
    # A real-node volume is a directory on this machine: emptied before it is offered again, as a
    # local volume provisioner's cleanup does. A new claim must not find the last one's data (a
    # puller skips files already there: a test saw no download). The fake nodes' hold nothing.
    path=$(kc get pv "$pv" -o jsonpath='{.spec.local.path}')
    if [[ $path == "$TOOLCHAIN_ROOT/real-node/run/volumes/"* && -d $path ]]; then
      find "$path" -xdev -mindepth 1 -delete
    fi
    kc patch pv "$pv" --type json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null && log "reclaimed $pv"
  done
}

create_cluster() {
  log "creating cluster $CLUSTER_NAME (kwokctl --runtime binary, Kubernetes $K8S_VERSION)"
  # One create at a time across clusters (fd 8, a lock every cluster shares): kwokctl picks each
  # cluster's ports when it creates it, and two creates at once picked the same API server port
  # (seen: the second cluster's kubectl reached the first's API server, "x509: certificate signed
  # by unknown authority"). A create that waits finds the first cluster's ports bound.
  # 8>&- 9>&-: the control-plane processes outlive this script; they must not inherit (and hold
  # forever) either lock, or every later create or start would wait on it.
  local status=0 config="$HERE/kwokctl-config.yaml"
  if [[ $REAL_NODE == 1 ]]; then
    config="$KWOK_WORKDIR/$CLUSTER_NAME.kwokctl-config.yaml"
    real_node_kwokctl_config >"$config"
  fi
  {
    flock 8
    kwokctl create cluster --name "$CLUSTER_NAME" --runtime binary 8>&- 9>&- \
      --kubeconfig "$KUBECONFIG_PATH" --wait 60s --quiet-pull \
      --config "$config" >"$KWOK_WORKDIR/create$CLUSTER_SUFFIX.log" 2>&1 || status=$?
  } 8>"$KWOK_WORKDIR/create.lock"
  if [ "$status" != 0 ]; then
    tail -n 30 "$KWOK_WORKDIR/create$CLUSTER_SUFFIX.log" >&2
    die "kwokctl create cluster failed (log: $KWOK_WORKDIR/create$CLUSTER_SUFFIX.log)"
  fi
  if [[ $REAL_NODE == 1 ]]; then echo "$TOOLCHAIN_VERSION_KEY $REAL_NODE_STAMP" >"$STAMP"; else echo "$TOOLCHAIN_VERSION_KEY" >"$STAMP"; fi
}

# A cluster that can take the real node differs from the others in two settings, made when it is
# created: KWOK plays only the nodes annotated kwok.x-k8s.io/node=fake (every node this script
# makes; by default it plays every node, the real one too: its pods "ran" with made-up IPs), and
# the API server presents the cluster's admin certificate to kubelets (the real kubelet accepts
# only clients of the cluster's CA; KWOK's fake kubelet asks for none).
REAL_NODE_STAMP=real-node-1
real_node_kwokctl_config() {
  local pki="$KWOK_WORKDIR/clusters/$CLUSTER_NAME/pki"
  cat "$HERE/kwokctl-config.yaml"
  cat <<EOF
componentsPatches:
- name: kwok-controller
  extraArgs:
  - {key: manage-all-nodes, value: "false", override: true}
  - {key: manage-nodes-with-annotation-selector, value: kwok.x-k8s.io/node=fake}
- name: kube-apiserver
  extraArgs:
  - {key: kubelet-client-certificate, value: $pki/admin.crt}
  - {key: kubelet-client-key, value: $pki/admin.key}
EOF
}
stamp_ok() { # the cluster was made by this toolchain (and, for a real node, with its settings)
  local stamp; stamp="$(cat "$STAMP" 2>/dev/null)" || return 1
  [[ ${stamp%% *} == "$TOOLCHAIN_VERSION_KEY" ]] || return 1
  [[ $REAL_NODE == 0 || $stamp == *" $REAL_NODE_STAMP" ]]
}

delete_cluster() {
  kwokctl delete cluster --name "$CLUSTER_NAME" --kubeconfig "$KUBECONFIG_PATH" >"$KWOK_WORKDIR/delete$CLUSTER_SUFFIX.log" 2>&1 \
    || { tail -n 30 "$KWOK_WORKDIR/delete$CLUSTER_SUFFIX.log" >&2; die "kwokctl delete cluster failed"; }
  rm -f "$STAMP"
}

alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ -n $st && $st != Z* ]]; }

restart_cluster() {
  local log="$KWOK_WORKDIR/start$CLUSTER_SUFFIX.log" piddir="$KWOK_WORKDIR/clusters/$CLUSTER_NAME/pids" pidf pid
  # kwokctl skips components whose pid file names a live process; a just-killed process can
  # linger as a zombie, so drop pid files of dead/zombie processes first.
  for pidf in "$piddir"/*.pid; do
    [[ -f $pidf ]] || continue
    alive "$(cat "$pidf")" || rm -f "$pidf"
  done
  pidf="$piddir/kwok-controller.pid"
  # (kwokctl itself would wait 2 minutes for an apiserver that does not come up)
  local since; since=$(date +%s)
  timeout 40 kwokctl start cluster --name "$CLUSTER_NAME" >"$log" 2>&1 9>&- || true
  wait_until 20 api_ready || return 1
  # After an unclean stop the fake nodes' leases (kube-node-lease, 200s) are still held by the
  # dead kwok-controller; the new one does not retry taking them over, so pods would stay
  # Pending. Stop it, drop the leases, start it again (kwokctl only starts what is not running).
  if pid=$(cat "$pidf" 2>/dev/null) && kill "$pid" 2>/dev/null; then
    wait_until 15 bash -c "st=\$(ps -o stat= -p $pid); [[ -z \$st || \$st == Z* ]]" || kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidf"
  fi
  kc -n kube-node-lease delete lease --all >/dev/null 2>&1 || true
  timeout 40 kwokctl start cluster --name "$CLUSTER_NAME" >>"$log" 2>&1 9>&- || true
  wait_until 30 bash -c "[[ -n \$(kubectl --kubeconfig '$KUBECONFIG_PATH' -n kube-node-lease get lease -o name) ]]"
  # The controller-manager/scheduler leader leases of the dead instances must expire (~15s)
  # before the new ones act; wait for that so the cluster is usable when `start` returns.
  wait_until 45 lease_renewed_since kube-controller-manager "$since"
  wait_until 45 lease_renewed_since kube-scheduler "$since"
}

lease_renewed_since() { # <kube-system lease> <epoch seconds>
  local rt; rt=$(kc -n kube-system get lease "$1" -o jsonpath='{.spec.renewTime}') && [[ -n $rt ]] \
    && (( $(date -d "$rt" +%s) >= $2 ))
}

# --- the LeaderWorkerSet controller -------------------------------------------------------------
# The manager runs as a host process next to the control plane (like KWOK's binary runtime), with
# the kwokctl admin kubeconfig. Its webhooks are needed, not optional: the pod mutating webhook
# is what labels group pods (worker-index, group-index, group-key) and injects LWS_LEADER_ADDRESS,
# LWS_GROUP_SIZE and LWS_WORKER_INDEX; the LWS webhooks default and validate the spec. They are
# served on 127.0.0.1:$LWS_WEBHOOK_PORT with a self-signed certificate made here (the manager's
# own cert rotation needs an in-cluster Service and Secret, so it is off), and registered to the
# API server by URL with that CA. Leader election is off (one manager); metrics are off.
# Another cluster's manager gets two free ports, picked at its first start and kept in its LWS_DIR
# (the webhooks registered to its API server name the port).
LWS_WEBHOOK_PORT=${LLM_SERVING_LWS_WEBHOOK_PORT:-}
LWS_HEALTH_PORT=${LLM_SERVING_LWS_HEALTH_PORT:-}

lws_ports() {
  local saved="$LWS_DIR/ports"
  if [[ $CLUSTER_NAME == "$DEFAULT_CLUSTER" ]]; then
    LWS_WEBHOOK_PORT=${LWS_WEBHOOK_PORT:-19443} LWS_HEALTH_PORT=${LWS_HEALTH_PORT:-18081}
    return
  fi
  if [[ -z $LWS_WEBHOOK_PORT || -z $LWS_HEALTH_PORT ]]; then
    if [[ ! -s $saved ]]; then
      python3 -c 'import socket
ports = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s)
print(*(s.getsockname()[1] for s in ports))' >"$saved"
    fi
    read -r LWS_WEBHOOK_PORT LWS_HEALTH_PORT <"$saved"
  fi
}

need_operators() {
  local env_file
  env_file="$(bash "$HERE/../toolchain/operators.sh" --env-path)" \
    || die "operators missing: run scripts/toolchain/operators.sh"
  # shellcheck disable=SC1090
  source "$env_file"
  LWS_DIR="$KWOK_WORKDIR/clusters/$CLUSTER_NAME/lws"
  mkdir -p "$LWS_DIR"
  lws_ports
}
lws_pidfile() { echo "$KWOK_WORKDIR/lws-manager$CLUSTER_SUFFIX.pid"; }

lws_alive() { local pid; pid=$(cat "$(lws_pidfile)" 2>/dev/null) && alive "$pid"; }
lws_healthy() { curl -fsS "http://127.0.0.1:$LWS_HEALTH_PORT/readyz" >/dev/null 2>&1; }

lws_certs() {
  local d="$LWS_DIR/certs"
  [[ -f $d/tls.crt && -f $d/tls.key && -f $d/ca.crt ]] && return
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=llm-serving-lws-webhook-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$d/tls.key" -out "$d/tls.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$d/ext.cnf"
  openssl x509 -req -in "$d/tls.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 3650 \
    -extfile "$d/ext.cnf" -out "$d/tls.crt" >/dev/null 2>&1 || die "cannot make the LWS webhook certificate"
}

lws_webhooks_yaml() {
  local ca url="https://127.0.0.1:$LWS_WEBHOOK_PORT" sel
  ca=$(base64 -w0 <"$LWS_DIR/certs/ca.crt")
  # Pods: only LeaderWorkerSet pods go to the manager (as upstream's webhook patches select).
  sel='  objectSelector: {matchExpressions: [{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}]}'
  cat <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: llm-serving-lws-mutating}
webhooks:
- name: mleaderworkerset.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", caBundle: $ca}
  failurePolicy: Fail
  sideEffects: None
  rules: [{apiGroups: [leaderworkerset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [leaderworkersets]}]
- name: mpod.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/mutate--v1-pod", caBundle: $ca}
  failurePolicy: Fail
  sideEffects: None
$sel
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: llm-serving-lws-validating}
webhooks:
- name: vleaderworkerset.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", caBundle: $ca}
  failurePolicy: Fail
  sideEffects: None
  rules: [{apiGroups: [leaderworkerset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [leaderworkersets]}]
- name: vpod.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$url/validate--v1-pod", caBundle: $ca}
  failurePolicy: Fail
  sideEffects: None
$sel
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}]
EOF
}

start_lws() {
  need_operators
  mkdir -p "$LWS_DIR"
  # The CRD is ~1.3 MB: too big for client-side apply's last-applied annotation.
  kc apply --server-side --force-conflicts -f "$LLM_SERVING_CRDS_DIR/lws/" >/dev/null
  wait_for 60 "LeaderWorkerSet CRD" kc wait --for=condition=Established crd/leaderworkersets.leaderworkerset.x-k8s.io --timeout=1s
  lws_certs
  if lws_alive && lws_healthy; then
    log "LWS controller $LLM_SERVING_LWS_VERSION already running (pid $(cat "$(lws_pidfile)"))"
  else
    if lws_alive; then kill "$(cat "$(lws_pidfile)")" 2>/dev/null || true; sleep 1; fi
    cat >"$LWS_DIR/config.yaml" <<EOF
apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
webhook: {host: 127.0.0.1, port: $LWS_WEBHOOK_PORT, certDir: $LWS_DIR/certs}
metrics: {bindAddress: "0"}
health: {healthProbeBindAddress: "127.0.0.1:$LWS_HEALTH_PORT"}
EOF
    # setsid + 9>&-: the manager outlives this script and must not hold the start/stop lock.
    KUBECONFIG="$KUBECONFIG_PATH" setsid "$LLM_SERVING_LWS_MANAGER" --config "$LWS_DIR/config.yaml" \
      --zap-log-level=info >>"$LWS_DIR/lws-manager.log" 2>&1 9>&- </dev/null &
    echo $! >"$(lws_pidfile)"
    wait_for 60 "the LWS controller's health endpoint (log: $LWS_DIR/lws-manager.log)" lws_healthy
    log "LWS controller $LLM_SERVING_LWS_VERSION started (pid $(cat "$(lws_pidfile)"), log $LWS_DIR/lws-manager.log)"
  fi
  lws_webhooks_yaml | kc apply -f - >/dev/null
  # The webhooks answer once the manager's TLS server is up: a server-side dry run of a
  # LeaderWorkerSet goes through both LWS webhooks.
  wait_for 60 "the LWS webhooks to answer (log: $LWS_DIR/lws-manager.log)" lws_webhooks_answer
}

lws_webhooks_answer() {
  kc -n default create --dry-run=server -f - <<'EOF'
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: llm-serving-webhook-probe}
spec:
  leaderWorkerTemplate:
    size: 2
    workerTemplate:
      spec:
        containers: [{name: c, image: registry.k8s.io/pause:3.10}]
EOF
}

# stop_process PIDFILE WHAT: SIGTERM to the process the file names, SIGKILL if it has not gone in
# 15 s (a zombie counts as gone), and the file removed.
stop_process() {
  local pid
  if pid=$(cat "$1" 2>/dev/null) && alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    wait_until 15 bash -c "st=\$(ps -o stat= -p $pid); [[ -z \$st || \$st == Z* ]]" || kill -9 "$pid" 2>/dev/null || true
    log "$2 stopped"
  fi
  rm -f "$1"
}

stop_lws() { stop_process "$(lws_pidfile)" "LWS controller"; }

# The Hub stand-in of scripts/up-local.sh (scripts/localmodel/hub.py): the local stack's puller
# pulls its model from it, on the real node's bridge address. Started by `start-hub` (up-local),
# stopped with the real node or the cluster: nothing of it outlives `stop`.
hub_pidfile() { echo "$KWOK_WORKDIR/local-hub$CLUSTER_SUFFIX.pid"; }
hub_alive() { local pid; pid=$(cat "$(hub_pidfile)" 2>/dev/null) && alive "$pid"; }

cmd_start_hub() { # start-hub FILES_DIR ENDPOINT REPO...
  local files=$1 endpoint=$2 repos=("${@:3}") want repo log_file="$KWOK_WORKDIR/clusters/$CLUSTER_NAME/local-hub.log"
  [[ "$(bash "$REAL_NODE_SH" owner 2>/dev/null)" == "$CLUSTER_NAME" ]] && bash "$REAL_NODE_SH" status >/dev/null \
    || die "start-hub: the real node does not run for cluster $CLUSTER_NAME, and the Hub stand-in listens on its bridge; start it: scripts/cluster/cluster.sh start --real-node"
  want="$(cd "$files" && pwd) $endpoint ${repos[*]}"
  if hub_alive && [[ "$(cat "$(hub_pidfile).args" 2>/dev/null)" == "$want" ]] \
      && curl -fsS -o /dev/null "$endpoint/api/models/${repos[0]}"; then
    log "Hub stand-in already serving ${repos[*]} at $endpoint (pid $(cat "$(hub_pidfile)"))"
    return
  fi
  stop_hub
  mkdir -p "$(dirname "$log_file")"
  local args=(--endpoint "$endpoint" --files "$files")
  for repo in "${repos[@]}"; do args+=(--repo "$repo"); done
  # setsid + 9>&-: it outlives this script and must not hold the start/stop lock.
  setsid python3 "$HERE/../localmodel/hub.py" "${args[@]}" >>"$log_file" 2>&1 9>&- </dev/null &
  echo $! >"$(hub_pidfile)"
  echo "$want" >"$(hub_pidfile).args"
  wait_for 30 "the Hub stand-in at $endpoint (log: $log_file)" curl -fsS -o /dev/null "$endpoint/api/models/${repos[0]}"
  log "Hub stand-in serving ${repos[*]} at $endpoint (pid $(cat "$(hub_pidfile)"), log $log_file)"
}

stop_hub() {
  stop_process "$(hub_pidfile)" "Hub stand-in"
  rm -f "$(hub_pidfile).args"
}

cmd_start() {
  need_toolchain
  local t0=$SECONDS
  mkdir -p "$KWOK_WORKDIR" "$(dirname "$KUBECONFIG_PATH")"
  if [[ $REAL_NODE == 1 ]]; then
    # Before anything changes: the node is one per machine, and its pieces are built once.
    local owner
    if owner=$(bash "$REAL_NODE_SH" owner) && [[ $owner != "$CLUSTER_NAME" ]] && bash "$REAL_NODE_SH" status >/dev/null; then
      die "the real node runs for cluster '$owner' (one per machine: one containerd, the host's iptables). Stop it first: LLM_SERVING_CLUSTER=$owner bash scripts/cluster/cluster.sh stop-real-node"
    fi
    bash "$HERE/../node/build.sh"
  fi
  if cluster_exists && ! stamp_ok; then
    if [[ $REAL_NODE == 1 && "$(cat "$STAMP" 2>/dev/null)" == "$TOOLCHAIN_VERSION_KEY" ]]; then
      log "cluster $CLUSTER_NAME was made without the real node's settings; recreating"
    else
      log "cluster $CLUSTER_NAME was made by another toolchain version; recreating"
    fi
    bash "$REAL_NODE_SH" stop "$CLUSTER_NAME" "$KUBECONFIG_PATH" --forget-volumes
    stop_lws
    delete_cluster
  fi
  if cluster_exists && api_ready; then
    log "cluster $CLUSTER_NAME already running"
  elif cluster_exists; then
    # e.g. after a reboot or when a CI run ended the processes: restart from the kept etcd data.
    log "restarting stopped cluster $CLUSTER_NAME"
    if ! restart_cluster; then
      log "restart failed (log: $KWOK_WORKDIR/start$CLUSTER_SUFFIX.log); recreating"
      delete_cluster
      create_cluster
    fi
  else
    create_cluster
  fi
  wait_for 60 "apiserver readiness" api_ready
  wait_for 60 "default service account" kc -n default get serviceaccount default
  apply_manifests
  reclaim_pvs
  start_lws
  if [[ $REAL_NODE == 1 ]]; then
    bash "$REAL_NODE_SH" start "$CLUSTER_NAME" "$KUBECONFIG_PATH" "$KWOK_WORKDIR/clusters/$CLUSTER_NAME"
  fi
  log "ready in $((SECONDS - t0))s; export KUBECONFIG=$KUBECONFIG_PATH"
}

cmd_stop() {
  need_toolchain
  stop_hub
  # First, while the API server still answers (the node's pods are deleted through it).
  bash "$REAL_NODE_SH" stop "$CLUSTER_NAME" "$KUBECONFIG_PATH" --forget-volumes
  stop_lws
  if cluster_exists; then
    delete_cluster
    log "cluster $CLUSTER_NAME deleted"
  else
    log "cluster $CLUSTER_NAME does not exist"
  fi
  rm -f "$KUBECONFIG_PATH"
}

cmd_status() {
  need_toolchain
  if ! cluster_exists; then log "cluster $CLUSTER_NAME: absent"; return 1; fi
  if ! api_ready; then log "cluster $CLUSTER_NAME: exists but apiserver not ready"; return 1; fi
  log "cluster $CLUSTER_NAME: running (kubeconfig $KUBECONFIG_PATH)"
  kc version 2>/dev/null | sed 's/^/  /'
  kc get nodes -L nvidia.com/gpu.product -L node.kubernetes.io/instance-type | sed 's/^/  /'
  echo "  PVs: $(kc get pv --no-headers 2>/dev/null | awk '{print $5}' | sort | uniq -c | tr -s ' ' | paste -sd, -)"
  if [[ "$(bash "$REAL_NODE_SH" owner 2>/dev/null)" == "$CLUSTER_NAME" ]]; then
    bash "$REAL_NODE_SH" status | sed 's/^/  /'
  fi
}

cmd_verify() {
  need_toolchain
  api_ready || die "cluster not running: scripts/cluster/cluster.sh start"
  local ns=llm-serving-smoke t0=$SECONDS
  kc delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
  kc create namespace "$ns" >/dev/null
  wait_for 30 "service account in $ns" kc -n "$ns" get serviceaccount default
  kc -n "$ns" apply -f - >/dev/null <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: gpu-server}
spec:
  replicas: 2
  selector: {matchLabels: {app: gpu-server}}
  template:
    metadata: {labels: {app: gpu-server}}
    spec:
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers:
      - name: server
        image: vllm/vllm-openai:latest
        ports: [{containerPort: 8000, name: http}]
        resources: {limits: {nvidia.com/gpu: "4"}, requests: {cpu: "8", memory: 64Gi}}
        volumeMounts: [{name: weights, mountPath: /models}]
      volumes: [{name: weights, persistentVolumeClaim: {claimName: weights}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: weights}
spec:
  accessModes: [ReadWriteMany]
  resources: {requests: {storage: 100Gi}}
---
apiVersion: v1
kind: Service
metadata: {name: gpu-server}
spec:
  selector: {app: gpu-server}
  ports: [{port: 80, targetPort: http, name: http}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: download-weights}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      containers: [{name: dl, image: busybox, command: ["true"]}]
EOF
  wait_for 60 "PVC Bound" bash -c "[[ \$(kubectl --kubeconfig '$KUBECONFIG_PATH' -n $ns get pvc weights -o jsonpath='{.status.phase}') == Bound ]]"
  log "ok: PVC weights Bound to $(kc -n "$ns" get pvc weights -o jsonpath='{.spec.volumeName}') (default class $(kc -n "$ns" get pvc weights -o jsonpath='{.spec.storageClassName}'))"
  kc -n "$ns" rollout status deployment/gpu-server --timeout=60s >/dev/null
  kc -n "$ns" get pods -l app=gpu-server -o wide --no-headers | awk '{print "[cluster] ok: pod "$1" "$3" ready="$2" ip="$6" node="$7}'
  local on_gpu; on_gpu=$(kc -n "$ns" get pods -l app=gpu-server -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c '^gpu-node-' || true)
  [[ $on_gpu == 2 ]] || die "expected both pods on gpu-node-*, got $on_gpu"
  kc -n "$ns" wait --for=condition=Complete job/download-weights --timeout=60s >/dev/null
  log "ok: Job download-weights Complete (pod phase $(kc -n "$ns" get pods -l job-name=download-weights -o jsonpath='{.items[0].status.phase}'))"
  wait_for 60 "EndpointSlice with 2 ready endpoints" bash -c "[[ \$(kubectl --kubeconfig '$KUBECONFIG_PATH' -n $ns get endpointslices -l kubernetes.io/service-name=gpu-server -o jsonpath='{range .items[*].endpoints[?(@.conditions.ready==true)]}x{end}') == xx ]]"
  log "ok: EndpointSlice for svc gpu-server has ready endpoints: $(kc -n "$ns" get endpointslices -l kubernetes.io/service-name=gpu-server -o jsonpath='{.items[*].endpoints[*].addresses[*]}')"
  kc delete namespace "$ns" --wait=false >/dev/null
  log "verify passed in $((SECONDS - t0))s"
  if [[ "$(bash "$REAL_NODE_SH" owner 2>/dev/null)" == "$CLUSTER_NAME" ]]; then
    bash "$REAL_NODE_SH" verify "$KUBECONFIG_PATH"
  fi
}

lock() { # serialize start/stop between concurrent callers (e.g. parallel test runs)
  mkdir -p "$TOOLCHAIN_ROOT"
  exec 9>"$TOOLCHAIN_ROOT/cluster$CLUSTER_SUFFIX.lock"
  flock -w 300 9 || die "another cluster.sh start/stop holds $TOOLCHAIN_ROOT/cluster$CLUSTER_SUFFIX.lock"
}

case "${1:-}" in
  start)
    case "${2:-}" in
      --real-node) REAL_NODE=1 ;;
      "") ;;
      *) echo "usage: $0 start [--real-node]" >&2; exit 2 ;;
    esac
    lock; cmd_start ;;
  stop) lock; cmd_stop ;;
  stop-real-node) lock; need_toolchain; stop_hub; bash "$REAL_NODE_SH" stop "$CLUSTER_NAME" "$KUBECONFIG_PATH" ;;
  start-hub)
    [[ $# -ge 4 ]] || { echo "usage: $0 start-hub FILES_DIR ENDPOINT REPO..." >&2; exit 2; }
    lock; need_toolchain; cmd_start_hub "${@:2}" ;;
  status) cmd_status ;;
  kubeconfig) echo "$KUBECONFIG_PATH" ;;
  verify) cmd_verify ;;
  reclaim) need_toolchain; reclaim_pvs ;;
  *) echo "usage: $0 start [--real-node]|stop|stop-real-node|status|kubeconfig|verify|reclaim|start-hub" >&2; exit 2 ;;
esac
