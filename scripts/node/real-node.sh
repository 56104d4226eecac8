#!/usr/bin/env bash
# The real node: a kubelet, kube-proxy, containerd + runc, a CNI bridge, CoreDNS and a
# NetworkPolicy enforcer on this machine, joined to one simulated cluster beside KWOK's fake nodes.
# Run by scripts/cluster/cluster.sh (start --real-node, stop, verify, status); not meant to be
# called alone, but it can be:
#
#   real-node.sh start <cluster> <kubeconfig> <kwok cluster dir>   start it for that cluster
#   real-node.sh stop <cluster> [<kubeconfig> [--forget-volumes]]
#                                                stop it if that cluster owns it, clean everything
#                                                (and delete its volumes' data: the cluster goes)
#   real-node.sh owner                           print the cluster that owns it (exit 1: none)
#   real-node.sh status                          one line per piece (exit 1 unless all run)
#   real-node.sh verify <kubeconfig>             prove a real pod (see cmd_verify)
#   real-node.sh leftovers                       list what a stop should have removed (exit 1 if any)
#
# One real node per machine: it needs the host's iptables, one containerd, one bridge and the
# kubelet's ports, so it belongs to one cluster at a time (the `owner` file under a lock); a
# second cluster asking for it is refused with the owner's name. The pieces are built by
# scripts/node/build.sh. What differs from a production node: docs/01-local-cluster.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../toolchain/versions.sh
source "$HERE/../toolchain/versions.sh"

log() { echo "[real-node] $*"; }
die() { echo "[real-node] ERROR: $*" >&2; exit 1; }

NODE_ROOT="$TOOLCHAIN_ROOT/real-node"
RUN="$NODE_ROOT/run"                 # per start: kubelet, CNI, volumes, logs, pid files
LOCK="$NODE_ROOT/node.lock"
OWNER="$NODE_ROOT/owner"
CONTAINERD_ROOT="$NODE_ROOT/containerd"   # kept across stops: the imported images
# containerd's state (task bundles, the rootfs mounts) and its socket: a short fixed path (a unix
# socket path is limited to 108 bytes), like /run/containerd on a production node.
STATE=/run/llm-serving-node
SOCK="$STATE/containerd.sock"
BRIDGE=llmsrv0
POD_SUBNET=10.88.0.0/24
NODE_IP=10.88.0.1
# Addresses KWOK makes up for its fake pods (the fake nodes' podCIDRs, 10.244.<n>.0/24) and fake
# nodes (10.240.0.<n>, stages/10-node-initialize.yaml). kube-proxy programs every Service's
# endpoints, fake ones too: a connection to such a Service must end here, not leave the machine.
FAKE_RANGES=(10.244.0.0/16 10.240.0.0/16)
GUARD_FWD=LLM-SERVING-NODE-FWD
GUARD_OUT=LLM-SERVING-NODE-OUT
NODE_LABEL=llm-serving.dev/real-node
LOCAL_PVS=${LLM_SERVING_REAL_NODE_PVS:-2}
KUBELET_PORT=10250
COREDNS_READY="$NODE_IP:8181"
KUBE_ROUTER_HEALTH_PORT=20244
PIECES=(containerd kubelet kube-proxy coredns kube-router)

# The node is named after the machine, as a kubelet names it by default: the API server reaches a
# node's kubelet (logs, exec) at its Hostname address first, and KWOK's fake nodes already rely
# on the machine's name resolving here (stages/10-node-initialize.yaml).
node_name() {
  local name addr
  name=$(hostname | tr '[:upper:]' '[:lower:]')
  [[ $name =~ ^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$ ]] \
    || die "host name '$name' is not a valid node name (lowercase letters, digits, '-', '.')"
  addr=$(getent ahostsv4 "$name" | awk 'NR==1 {print $1}')
  [[ -n $addr ]] || die "host name '$name' does not resolve (add it to /etc/hosts): the API server reaches the kubelet by it"
  echo "$name $addr"
}

pidfile() { echo "$RUN/pids/$1.pid"; }
alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ -n $st && $st != Z* ]]; }
piece_pid() { local pid; pid=$(cat "$(pidfile "$1")" 2>/dev/null) && alive "$pid" && echo "$pid"; }

wait_until() { # wait_until <seconds> <command...>
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.5
  done
}
wait_for() { local secs=$1 what=$2; shift 2; wait_until "$secs" "$@" || die "timed out after ${secs}s waiting for $what"; }

kc() { kubectl --kubeconfig "$KUBECONFIG_PATH" "$@"; }
ctr_() { ctr --address "$SOCK" -n k8s.io "$@"; }

# launch <piece> <command...>: a host process of its own session (it outlives this script), its
# log in $RUN/logs, its pid in $RUN/pids. 7>&- 9>&-: it must not hold the node's or the cluster's lock.
launch() {
  local piece=$1; shift
  setsid "$@" >>"$RUN/logs/$piece.log" 2>&1 </dev/null 7>&- 9>&- &
  echo $! >"$(pidfile "$piece")"
}

stop_pid() { # stop_pid <pid> <seconds>: SIGTERM, then SIGKILL after the grace
  local pid=$1
  alive "$pid" || return 0
  kill "$pid" 2>/dev/null || true
  wait_until "$2" bash -c "st=\$(ps -o stat= -p $pid 2>/dev/null); [[ -z \$st || \$st == Z* ]]" \
    || kill -9 "$pid" 2>/dev/null || true
  wait_until 10 bash -c "st=\$(ps -o stat= -p $pid 2>/dev/null); [[ -z \$st || \$st == Z* ]]" || true
}
stop_piece() { local pid; if pid=$(piece_pid "$1"); then stop_pid "$pid" "${2:-15}"; fi; rm -f "$(pidfile "$1")"; }

# --- host networking ---------------------------------------------------------------------------
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables)
# iptables here is iptables-nft: the first rule in a table creates that nftables table, and
# removing the rules leaves it (empty, every chain ACCEPT). A start records the tables there were;
# a stop deletes the ones it made once they hold no rule.
record_tables() {
  local ipt
  for ipt in iptables ip6tables; do
    [[ -f $RUN/$ipt.tables ]] || "$ipt-save" 2>/dev/null | awk '/^\*/ {print substr($1, 2)}' >"$RUN/$ipt.tables"
  done
}
remove_new_tables() {
  local ipt family table
  for ipt in iptables ip6tables; do
    [[ -f $RUN/$ipt.tables ]] || continue
    if [[ $ipt == iptables ]]; then family=ip; else family=ip6; fi
    for table in $("$ipt-save" 2>/dev/null | awk '/^\*/ {print substr($1, 2)}'); do
      grep -qx "$table" "$RUN/$ipt.tables" && continue
      # Only a table with nothing in it: no rule, no chain of its own.
      [[ -z $("$ipt" -t "$table" -S | grep -v '^-P ') ]] || continue
      nft delete table "$family" "$table" 2>/dev/null || true
    done
  done
}

set_sysctls() {
  local key saved="$RUN/sysctl.saved"
  [[ -f $saved ]] || for key in "${SYSCTLS[@]}"; do echo "$key=$(sysctl -n "$key")"; done >"$saved"
  # ip_forward: pods reach each other and Service backends through the host; bridge-nf: kube-proxy's
  # DNAT must see traffic between two pods on the same bridge.
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
}
restore_sysctls() {
  local saved="$RUN/sysctl.saved" line
  [[ -f $saved ]] || return 0
  while read -r line; do sysctl -qw "$line" || true; done <"$saved"
  rm -f "$saved"
}

make_bridge() {
  # Made here, not by the CNI plugin on the first pod: the kubelet needs the node's address at
  # start (it refuses a loopback one), and the bridge's gateway address is ours alone.
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr replace "$NODE_IP/${POD_SUBNET#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
}

guard_rules() {
  # Pods reach only the bridge (other pods, the host's address on it), nothing from elsewhere is
  # forwarded to them, and no connection to KWOK's made-up addresses leaves the machine. In the
  # mangle table, which the node's other pieces leave alone: kube-router ACCEPTs policy-compliant
  # pod traffic in filter FORWARD ahead of any rule of ours there. FORWARD sees a pod's packets
  # after kube-proxy's DNAT; POSTROUTING sees the host's own (mangle OUTPUT comes before DNAT).
  local r
  iptables -t mangle -N "$GUARD_FWD" 2>/dev/null || iptables -t mangle -F "$GUARD_FWD"
  iptables -t mangle -A "$GUARD_FWD" -i "$BRIDGE" ! -o "$BRIDGE" -j DROP -m comment --comment "llm-serving real node: pods talk only on their bridge"
  iptables -t mangle -A "$GUARD_FWD" ! -i "$BRIDGE" -o "$BRIDGE" -j DROP -m comment --comment "llm-serving real node: nothing forwarded to pods from elsewhere"
  iptables -t mangle -N "$GUARD_OUT" 2>/dev/null || iptables -t mangle -F "$GUARD_OUT"
  for r in "${FAKE_RANGES[@]}"; do
    iptables -t mangle -A "$GUARD_OUT" -d "$r" -j DROP -m comment --comment "llm-serving real node: KWOK's made-up addresses stay here"
  done
  iptables -t mangle -C FORWARD -j "$GUARD_FWD" 2>/dev/null || iptables -t mangle -I FORWARD 1 -j "$GUARD_FWD"
  iptables -t mangle -C POSTROUTING -j "$GUARD_OUT" 2>/dev/null || iptables -t mangle -I POSTROUTING 1 -j "$GUARD_OUT"
}

# Chains the node's pieces make: kubelet and kube-proxy (KUBE-*), the CNI plugins (CNI-*),
# kube-router (KUBE-ROUTER-*, KUBE-NWPLCY-*, KUBE-POD-FW-*: all KUBE-), and our guard.
OUR_CHAINS='^(KUBE-|CNI-|LLM-SERVING-NODE-)'
remove_chains() { # remove_chains <iptables|ip6tables>
  local ipt=$1 table chain rule
  command -v "$ipt" >/dev/null || return 0
  for table in filter nat mangle raw; do
    $ipt -t "$table" -S >/dev/null 2>&1 || continue
    # First every rule that jumps to one of the chains (from the built-in chains and each other)...
    while read -r rule; do
      eval "$ipt -t $table ${rule/-A /-D }" 2>/dev/null || true
    done < <($ipt -t "$table" -S | grep -E -- "^-A .* -j (KUBE-|CNI-|LLM-SERVING-NODE-)" | grep -vE -- "^-A (KUBE-|CNI-|LLM-SERVING-NODE-)" || true)
    # ...then the chains themselves (flushed first, as they may jump to each other).
    for chain in $($ipt -t "$table" -S | awk '$1 == "-N" {print $2}' | grep -E "$OUR_CHAINS" || true); do
      $ipt -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $($ipt -t "$table" -S | awk '$1 == "-N" {print $2}' | grep -E "$OUR_CHAINS" || true); do
      $ipt -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}
# kube-router's ipsets: KUBE-SRC-*, KUBE-DST-*, kube-router-* (and their inet6: twins).
OUR_IPSETS='^(inet6:)?(KUBE-|kube-router-)'
remove_ipsets() {
  local set
  command -v ipset >/dev/null || return 0
  for set in $(ipset list -n 2>/dev/null | grep -E "$OUR_IPSETS" || true); do ipset destroy "$set" 2>/dev/null || true; done
}

# --- containerd ---------------------------------------------------------------------------------
containerd_config() {
  cat <<EOF
# llm-serving real node (scripts/node/real-node.sh): containerd's CRI for one kubelet.
version = 2
root = "$CONTAINERD_ROOT"
state = "$STATE/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$SOCK"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$CONTAINERD_ROOT/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$LLM_SERVING_PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj below its own, and would fail every
  # container ("can't get final child's PID from pipe"); this keeps the requested score at least ours.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$STATE/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni/net.d"
EOF
}

cni_conflist() {
  cat <<EOF
{
  "cniVersion": "1.0.0",
  "name": "llm-serving",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$RUN/cni/ipam"
      }
    }
  ]
}
EOF
}

start_containerd() {
  mkdir -p "$STATE" "$CONTAINERD_ROOT" "$RUN/cni/net.d" "$RUN/cni/ipam"
  containerd_config >"$RUN/containerd.toml"
  cni_conflist >"$RUN/cni/net.d/10-llm-serving.conflist"
  # Every registry connection goes to a closed loopback port: the node runs only the images
  # imported here and pulls from nowhere (a pod naming another image fails with ErrImagePull).
  launch containerd env HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 NO_PROXY= \
    containerd --config "$RUN/containerd.toml"
  wait_for 30 "containerd (log: $RUN/logs/containerd.log)" ctr --address "$SOCK" version
  local tar
  for tar in "$LLM_SERVING_REAL_NODE_IMAGES"/*.tar; do
    ctr_ images import "$tar" >>"$RUN/logs/images.log" 2>&1 \
      || die "importing $tar failed (log: $RUN/logs/images.log)"
  done
  import_app_images
}

# The images the local stack's pods run (scripts/images/build.py; docs/images.md), those built on
# this machine, imported under the names the rendered manifests use: the kubelet finds them and
# never pulls (imagePullPolicy IfNotPresent on pinned tags). Imported once: containerd's root is
# kept across stops, and an image it holds under all its names is skipped. One copy of each on
# disk where it can: the build cache keeps the compressed layer, the import streams it (no
# archive file), and containerd keeps only the unpacked snapshot (--discard-layers: the layer
# blob is removed once unpacked; the vLLM image's is 3.6 GB). LLM_SERVING_REAL_NODE_APP_IMAGES=0
# imports none.
import_app_images() {
  [[ ${LLM_SERVING_REAL_NODE_APP_IMAGES:-1} == 1 ]] || return 0
  local started=$SECONDS
  python3 "$HERE/../images/build.py" import --address "$SOCK" --built-only --skip-present --discard-layers \
    >>"$RUN/logs/images.log" 2>&1 || die "importing the built images failed (log: $RUN/logs/images.log)"
  log "images: $(ctr_ images ls -q | grep -c '^localhost/llm-serving/') built here present ($((SECONDS - started)) s)"
}

# --- kubelet, kube-proxy --------------------------------------------------------------------------
kubelet_config() {
  local dns_ip=$1 address=$2 ca=$3
  cat <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 and no systemd: the kubelet of 1.36 refuses v1 unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
address: $address
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $ca}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [$dns_ip]
resolvConf: $RUN/kubelet/resolv.conf
registerWithTaints:
- {key: $NODE_LABEL, value: "true", effect: NoSchedule}
failSwapOn: false
maxPods: 40
serializeImagePulls: false
# The images are imported, never pulled back: never garbage-collect them, and evict only when
# the machine is really short (it is shared with the builds and the other clusters).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 200Mi, nodefs.available: "2%", imagefs.available: "2%", nodefs.inodesFree: "2%"}
EOF
}

dns_ip() { # the 10th address of the Service range, as kubeadm picks it (the range's first is `kubernetes`)
  local first
  first=$(kc -n default get service kubernetes -o jsonpath='{.spec.clusterIP}') || return 1
  echo "${first%.*}.10"
}

start_kubelet() {
  local dns=$1 address=$2 kwok_dir=$3 name=$4
  mkdir -p "$RUN/kubelet/root" "$RUN/kubelet/pki"
  # No upstream resolver for pods: a name outside cluster.local resolves nowhere (the machine
  # reaches no DNS but its own).
  echo "# llm-serving real node: no upstream resolver" >"$RUN/kubelet/resolv.conf"
  kubelet_config "$dns" "$address" "$kwok_dir/pki/ca.crt" >"$RUN/kubelet/config.yaml"
  launch kubelet "$LLM_SERVING_REAL_NODE_BIN/kubelet" --config "$RUN/kubelet/config.yaml" \
    --kubeconfig "$KUBECONFIG_PATH" --hostname-override "$name" --node-ip "$NODE_IP" \
    --node-labels "$NODE_LABEL=true" \
    --root-dir "$RUN/kubelet/root" --cert-dir "$RUN/kubelet/pki" -v 1
  wait_for 90 "node $name Ready (log: $RUN/logs/kubelet.log)" \
    bash -c "[[ \$(kubectl --kubeconfig '$KUBECONFIG_PATH' get node '$name' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}') == True ]]"
}

start_kube_proxy() {
  local name=$1
  launch kube-proxy "$LLM_SERVING_REAL_NODE_BIN/kube-proxy" --kubeconfig "$KUBECONFIG_PATH" \
    --hostname-override "$name" --proxy-mode iptables --cluster-cidr "$POD_SUBNET" \
    --nodeport-addresses "$NODE_IP/32" --conntrack-max-per-core 0 \
    --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 -v 1
  wait_for 60 "kube-proxy healthz (log: $RUN/logs/kube-proxy.log)" curl -fsS http://127.0.0.1:10256/healthz
}

# --- cluster DNS ----------------------------------------------------------------------------------
# CoreDNS runs on the host, bound to the node's bridge address; the kube-dns Service (the address
# the kubelet writes into every pod's resolv.conf) points at it through a hand-made EndpointSlice.
start_coredns() {
  local dns=$1
  mkdir -p "$RUN/coredns"
  cat >"$RUN/coredns/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    ready $COREDNS_READY
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $KUBECONFIG_PATH
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
  kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS, $NODE_LABEL: "true"}
spec:
  clusterIP: $dns
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-real-node
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: llm-serving-real-node
addressType: IPv4
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
endpoints:
- addresses: [$NODE_IP]
  conditions: {ready: true}
EOF
  launch coredns "$LLM_SERVING_REAL_NODE_BIN/coredns" -conf "$RUN/coredns/Corefile"
  wait_for 60 "CoreDNS ready (log: $RUN/logs/coredns.log)" curl -fsS "http://$COREDNS_READY/ready"
}

# --- NetworkPolicy enforcement ----------------------------------------------------------------------
# kube-router's policy controller alone (no routing, no service proxy): iptables + ipset, which
# this kernel has (it lacks nftables' queue expression that nftables-based enforcers need). Only
# for this test cluster; see versions.sh.
start_kube_router() {
  local name=$1 service_range
  service_range="$(kc -n default get service kubernetes -o jsonpath='{.spec.clusterIP}')"
  service_range="${service_range%.*}.0/24"
  launch kube-router "$LLM_SERVING_REAL_NODE_BIN/kube-router" --kubeconfig "$KUBECONFIG_PATH" \
    --hostname-override "$name" --run-firewall=true --run-router=false --run-service-proxy=false \
    --service-cluster-ip-range "$service_range" --health-port "$KUBE_ROUTER_HEALTH_PORT" --metrics-port 0 -v 1
  wait_for 60 "kube-router healthz (log: $RUN/logs/kube-router.log)" curl -fsS "http://127.0.0.1:$KUBE_ROUTER_HEALTH_PORT/healthz"
}

# --- volumes --------------------------------------------------------------------------------------
# `local` PVs of the local-node class on the real node: real directories, bound when the first pod
# is scheduled there, and the kubelet applies a pod's fsGroup to them (it does not for hostPath).
local_pvs_yaml() {
  local name=$1 i
  for ((i = 0; i < LOCAL_PVS; i++)); do
    mkdir -p "$RUN/volumes/pv-$i"
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: local-node-real-$i
  labels: {llm-serving/volume-pool: real-node, $NODE_LABEL: "true"}
spec:
  storageClassName: local-node
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  volumeMode: Filesystem
  local: {path: $RUN/volumes/pv-$i}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - {key: kubernetes.io/hostname, operator: In, values: [$name]}
EOF
  done
}

# --- start / stop -----------------------------------------------------------------------------------
need_built() {
  local env_file
  env_file="$(bash "$HERE/build.sh" --env-path)" || die "the real node is not built: run scripts/node/build.sh"
  # shellcheck disable=SC1090
  source "$env_file"
}

all_running() { local p; for p in "${PIECES[@]}"; do piece_pid "$p" >/dev/null || return 1; done; }

take_lock() { mkdir -p "$NODE_ROOT"; exec 7>"$LOCK"; flock -w 300 7 || die "another start/stop of the real node holds $LOCK"; }

cmd_start() {
  local cluster=$1 kwok_dir=$3 name address dns t0=$SECONDS owner
  export KUBECONFIG_PATH=$2
  take_lock
  need_built
  read -r name address < <(node_name)
  owner=$(cat "$OWNER" 2>/dev/null || true)
  if [[ -n $owner && $owner != "$cluster" ]]; then
    if [[ -n $(piece_pid containerd || piece_pid kubelet || true) ]]; then
      die "the real node runs for cluster '$owner' (one per machine: one containerd, the host's iptables). Stop it first: LLM_SERVING_CLUSTER=$owner bash scripts/cluster/cluster.sh stop-real-node"
    fi
    log "cluster '$owner' owned a real node that is no longer running: cleaning up after it"
    KUBECONFIG_PATH="" cleanup
    forget_volumes
  fi
  if [[ $owner == "$cluster" ]] && all_running \
      && [[ $(kc get node "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]; then
    log "real node $name already running for cluster $cluster"
    return
  fi
  [[ $owner == "$cluster" ]] && { log "restarting the real node of cluster $cluster"; cleanup; }
  echo "$cluster" >"$OWNER"
  mkdir -p "$RUN/pids" "$RUN/logs"
  # A start that fails half-way leaves nothing running (its logs stay, for the reason).
  trap 'start_failed' EXIT
  log "starting the real node $name ($NODE_IP on bridge $BRIDGE) for cluster $cluster"
  dns=$(dns_ip) || die "cannot read the kubernetes Service of cluster $cluster"
  record_tables
  set_sysctls
  make_bridge
  guard_rules
  start_containerd
  start_kubelet "$dns" "$address" "$kwok_dir" "$name"
  start_kube_proxy "$name"
  start_coredns "$dns"
  start_kube_router "$name"
  local_pvs_yaml "$name" | kc apply -f - >/dev/null
  trap - EXIT
  log "real node $name Ready in $((SECONDS - t0))s (cluster DNS $dns; logs $RUN/logs)"
}
start_failed() {
  local status=$?
  log "start failed: stopping what had started (logs: $RUN/logs)"
  cleanup >>"$RUN/logs/stop.log" 2>&1 || true
  rm -f "$OWNER"
  exit "$status"
}

# Everything the node left on the host, in the order that frees it: containers before containerd,
# shims and their children before the mounts they hold, mounts and network namespaces before the
# bridge, the processes that write rules before the rules. Safe to run when nothing is there.
cleanup() {
  local pid ns mnt c name
  stop_piece kube-router 10
  if [[ -x ${LLM_SERVING_REAL_NODE_BIN:-}/kube-router ]]; then
    "$LLM_SERVING_REAL_NODE_BIN/kube-router" --cleanup-config >>"$RUN/logs/stop.log" 2>&1 || true
  fi
  stop_piece coredns 5
  stop_piece kubelet 15
  stop_piece kube-proxy 10
  if [[ -x ${LLM_SERVING_REAL_NODE_BIN:-}/kube-proxy ]]; then
    "$LLM_SERVING_REAL_NODE_BIN/kube-proxy" --cleanup >>"$RUN/logs/stop.log" 2>&1 || true
  fi
  if piece_pid containerd >/dev/null; then
    for c in $(ctr_ containers ls -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
      ctr_ tasks delete -f "$c" >/dev/null 2>&1 || true
      ctr_ containers delete "$c" >/dev/null 2>&1 || true
    done
  fi
  stop_piece containerd 15
  # Shims outlive containerd (and their children, the pause and container processes, outlive the
  # shims): ours are the ones started with our containerd's socket.
  for pid in $(our_shims); do
    for c in $(pgrep -P "$pid" 2>/dev/null || true); do kill -9 "$c" 2>/dev/null || true; done
    stop_pid "$pid" 5
  done
  for mnt in $(our_mounts | sort -r); do umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; done
  for ns in $(our_netns); do ip netns delete "$ns" 2>/dev/null || true; done
  ip link show "$BRIDGE" >/dev/null 2>&1 && ip link delete "$BRIDGE"
  remove_chains iptables
  remove_chains ip6tables
  remove_ipsets
  remove_new_tables
  remove_cgroups
  restore_sysctls
  # --one-file-system: never through a mount that outlived the unmounts above.
  rm -rf --one-file-system "$STATE" "$RUN/kubelet" "$RUN/cni" "$RUN/pids"
  # The shims' sockets live under containerd's fixed /run/containerd/s (not its state dir); the
  # shims remove them, the empty directories stay: no other containerd runs here.
  [[ -d /run/containerd ]] && find /run/containerd -depth -type d -empty -delete 2>/dev/null || true
  # The Node object goes (its pods were deleted before; a later start registers it again). Its
  # PVs and their directories stay while the cluster does: a claim bound to one finds its data
  # when the node is back (forget_volumes, when the cluster is deleted or another takes the node).
  if [[ -n ${KUBECONFIG_PATH:-} && -f $KUBECONFIG_PATH ]] && kc get --raw=/readyz >/dev/null 2>&1; then
    name=$(hostname | tr '[:upper:]' '[:lower:]')
    kc delete node "$name" --wait=false >/dev/null 2>&1 || true
  fi
}
forget_volumes() { rm -rf --one-file-system "$RUN/volumes"; }

our_shims() { # pids of containerd-shim processes serving our containerd
  local p
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == containerd-shim* ]] || continue
    tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "-address $SOCK" && echo "${p#/proc/}"
  done
}
our_mounts() { awk -v a="$STATE" -v b="$RUN" -v c="$CONTAINERD_ROOT" \
  'index($5, a"/") == 1 || index($5, b"/") == 1 || index($5, c"/") == 1 {print $5}' /proc/self/mountinfo; }
# CRI makes a pod's network namespace as /var/run/netns/cni-<uuid>; ours hold an address of the
# node's pod range (another CRI on the machine would make cni-* namespaces too).
our_netns() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^cni-/ {print $1}'); do
    ip netns exec "$ns" ip -4 -o addr show 2>/dev/null | grep -q " inet ${POD_SUBNET%.*}\." && echo "$ns"
  done
  return 0
}
remove_cgroups() { # the kubelet's pod cgroups (cgroupfs driver): /sys/fs/cgroup/<controller>/kubepods
  local d
  for d in /sys/fs/cgroup/*/kubepods; do
    [[ -d $d ]] || continue
    find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

drain_node() { # delete the node's pods and wait until its kubelet has stopped them
  local name=$1
  kc get --raw=/readyz >/dev/null 2>&1 || return 0
  kc cordon "$name" >/dev/null 2>&1 || return 0
  kc delete pods -A --field-selector "spec.nodeName=$name" --grace-period=5 --wait=false >/dev/null 2>&1 || true
  wait_until 60 bash -c "[[ -z \$(kubectl --kubeconfig '$KUBECONFIG_PATH' get pods -A --field-selector 'spec.nodeName=$name' -o name) ]]" \
    || log "pods still on $name after 60s: stopping their containers directly"
}

cmd_stop() {
  local cluster=$1 owner name forget=${3:-}
  export KUBECONFIG_PATH=${2:-}
  # Not this cluster's node: nothing to do, and no wait on the lock (another cluster may be
  # starting its node).
  [[ "$(cat "$OWNER" 2>/dev/null)" == "$cluster" ]] || return 0
  take_lock
  owner=$(cat "$OWNER" 2>/dev/null || true)
  [[ $owner == "$cluster" ]] || return 0
  local env_file; env_file="$(bash "$HERE/build.sh" --env-path 2>/dev/null)" && source "$env_file"
  mkdir -p "$RUN/logs"
  : >"$RUN/logs/stop.log"
  local t0=$SECONDS
  name=$(hostname | tr '[:upper:]' '[:lower:]')
  [[ -n $KUBECONFIG_PATH && -f $KUBECONFIG_PATH ]] && piece_pid kubelet >/dev/null && drain_node "$name"
  cleanup
  [[ $forget == --forget-volumes ]] && forget_volumes
  # The owner stays until nothing is left: a later stop tries again.
  if cmd_leftovers >"$RUN/logs/leftovers.log" 2>&1; then
    rm -f "$OWNER" "$RUN/iptables.tables" "$RUN/ip6tables.tables"
    log "real node stopped in $((SECONDS - t0))s; nothing left behind"
  else
    cat "$RUN/logs/leftovers.log" >&2
    die "the real node's stop left the above behind (stop again to retry; logs: $RUN/logs)"
  fi
}

# What a stop must have removed; one line each, exit 1 if anything is there.
cmd_leftovers() {
  local found=0 p comm line
  # The node's processes: its binaries, containerd with its config, the shims of its socket, and
  # whatever runs in a pod's cgroup (pause, the containers). Not another containerd of the machine.
  for p in /proc/[0-9]*; do
    comm=$(cat "$p/comm" 2>/dev/null) || continue
    case "$comm" in
      kubelet|kube-proxy|containerd|coredns|kube-router|containerd-shim*|pause) ;;
      *) grep -q /kubepods "$p/cgroup" 2>/dev/null || continue ;;
    esac
    if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -e "$NODE_ROOT/" -e "$STATE" \
        || grep -q /kubepods "$p/cgroup" 2>/dev/null; then
      echo "process ${p#/proc/} $comm"; found=1
    fi
  done
  while read -r line; do echo "mount $line"; found=1; done < <(our_mounts)
  while read -r line; do echo "netns $line"; found=1; done < <(our_netns)
  ip link show "$BRIDGE" >/dev/null 2>&1 && { echo "interface $BRIDGE"; found=1; }
  local ipt
  for ipt in iptables ip6tables; do
    command -v "$ipt-save" >/dev/null || continue
    while read -r line; do echo "$ipt chain $line"; found=1; done \
      < <("$ipt-save" 2>/dev/null | awk '/^:/ {print substr($1, 2)}' | grep -E "$OUR_CHAINS" || true)
  done
  while read -r line; do echo "ipset $line"; found=1; done < <(ipset list -n 2>/dev/null | grep -E "$OUR_IPSETS" || true)
  return $((found))
}

cmd_status() {
  local owner p pid rc=0
  owner=$(cat "$OWNER" 2>/dev/null || true)
  [[ -n $owner ]] || { echo "real node: not running"; return 1; }
  echo "real node: owned by cluster $owner"
  for p in "${PIECES[@]}"; do
    if pid=$(piece_pid "$p"); then echo "  $p: running (pid $pid)"; else echo "  $p: NOT running"; rc=1; fi
  done
  return $rc
}

[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0  # sourced: the functions only
case "${1:-}" in
  start) [[ $# == 4 ]] || die "usage: $0 start <cluster> <kubeconfig> <kwok cluster dir>"; cmd_start "$2" "$3" "$4" ;;
  stop) [[ $# -ge 2 ]] || die "usage: $0 stop <cluster> [<kubeconfig> [--forget-volumes]]"; cmd_stop "$2" "${3:-}" "${4:-}" ;;
  owner) cat "$OWNER" 2>/dev/null || exit 1 ;;
  status) cmd_status ;;
  leftovers) cmd_leftovers ;;
  verify) [[ $# == 2 ]] || die "usage: $0 verify <kubeconfig>"; export KUBECONFIG_PATH=$2; bash "$HERE/verify.sh" ;;
  *) echo "usage: $0 start|stop|owner|status|verify|leftovers" >&2; exit 2 ;;
esac
