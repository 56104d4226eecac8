#!/usr/bin/env bash
# Prove the real node runs real pods (scripts/cluster/cluster.sh verify, on a cluster that owns it):
#
#   1. a hardened pod (non-root uid/gid, read-only root, drop ALL, no privilege escalation, seccomp
#      RuntimeDefault, fsGroup) on a `local` PV of the node becomes Ready by its own HTTP probe,
#      runs as its uid with the fsGroup the kubelet applied to the volume;
#   2. it answers on its pod IP (from the host and from another pod);
#   3. a ClusterIP Service reaches it (kube-proxy), by a DNS name (CoreDNS);
#   4. a NetworkPolicy that admits only `role: allowed` refuses one client and admits another
#      (kube-router's policy controller).
#
# Needs KUBECONFIG_PATH and the node's env (real-node.sh verify sets both). Traffic: only to pod
# IPs on the node's bridge and the cluster's Service addresses that lead to them.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck disable=SC1090
source "$(bash "$HERE/build.sh" --env-path)"

NS=llm-serving-node-check
LABEL=llm-serving.dev/real-node
BODY="llm-serving real node"
log() { echo "[real-node verify] $*"; }
die() { echo "[real-node verify] ERROR: $*" >&2; exit 1; }
kc() { kubectl --kubeconfig "$KUBECONFIG_PATH" "$@"; }
wait_until() {
  local end=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do ((SECONDS < end)) || return 1; sleep 0.5; done
}

# http_from <pod> <host> <port>: the answer to GET /index.html from inside a pod (busybox nc: its
# wget segfaults in a static build's name lookups), 3 s at most, then nc's exit status: a line
# `nc-exit=N` says the pod ran the request, whatever came back.
http_from() {
  kc -n "$NS" exec "$1" -- sh -c "printf 'GET /index.html HTTP/1.0\r\nHost: x\r\n\r\n' | nc -w 3 $2 $3; echo nc-exit=\$?" 2>/dev/null
}
answers() { http_from "$@" | grep -q "$BODY"; }
refused() { local out; out=$(http_from "$@") && [[ $out == *nc-exit=* && $out != *"$BODY"* ]]; }

t0=$SECONDS
kc delete namespace "$NS" --ignore-not-found --wait=true --timeout=90s >/dev/null
# The claim of an earlier run left its PV Released: make the node's PVs Available again.
for pv in $(kc get pv -l "$LABEL=true" -o jsonpath='{range .items[?(@.status.phase=="Released")]}{.metadata.name}{"\n"}{end}'); do
  kc patch pv "$pv" --type json -p '[{"op":"remove","path":"/spec/claimRef"}]' >/dev/null
done
kc create namespace "$NS" >/dev/null
wait_until 30 kc -n "$NS" get serviceaccount default || die "no default service account in $NS"

pod_spec() { # pod_spec <name> <labels> <command>
  cat <<EOF
---
apiVersion: v1
kind: Pod
metadata: {name: $1, labels: $2}
spec:
  nodeSelector: {$LABEL: "true"}
  tolerations: [{key: $LABEL, operator: Exists, effect: NoSchedule}]
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 2
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    runAsGroup: 1000
    fsGroup: 2000
    seccompProfile: {type: RuntimeDefault}
  containers:
  - name: main
    image: $LLM_SERVING_NODE_CHECK_IMAGE
    imagePullPolicy: Never
    command: ["/bin/busybox", "sh", "-c", "$3"]
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
    resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {cpu: 200m, memory: 64Mi}}
EOF
}

{
  cat <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  storageClassName: local-node
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
EOF
  pod_spec web "{app: web}" "echo written > /data/by-web && exec httpd -f -p 8080 -h /www"
  cat <<EOF
    ports: [{name: http, containerPort: 8080}]
    readinessProbe:
      httpGet: {path: /index.html, port: 8080}
      periodSeconds: 1
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
EOF
  pod_spec client-allowed "{role: allowed}" "exec sleep 600"
  pod_spec client-denied "{role: denied}" "exec sleep 600"
} | kc -n "$NS" apply -f - >/dev/null

kc -n "$NS" wait --for=condition=Ready pod/web pod/client-allowed pod/client-denied --timeout=90s >/dev/null \
  || { kc -n "$NS" get pods -o wide >&2; kc -n "$NS" describe pod web | tail -20 >&2; die "pods not Ready within 90s"; }

# 1. Ready by the kubelet's probe of a real container, with the rendered identity.
cid=$(kc -n "$NS" get pod web -o jsonpath='{.status.containerStatuses[0].containerID}')
[[ $cid == containerd://* ]] || die "pod web has no containerd container ($cid): not run by the real kubelet"
ip=$(kc -n "$NS" get pod web -o jsonpath='{.status.podIP}')
[[ $ip == 10.88.0.* ]] || die "pod web's IP $ip is not on the node's bridge"
ident=$(kc -n "$NS" exec web -- id)
[[ $ident == *"uid=1000"*"gid=1000"*"2000"* ]] || die "pod web runs as '$ident', not uid 1000 gid 1000 with group 2000"
owner=$(kc -n "$NS" exec web -- stat -c '%u:%g' /data /data/by-web)
[[ $owner == $'0:2000\n1000:2000' ]] || die "the volume's ownership is '$owner', not the fsGroup 2000 the kubelet applies (0:2000, then 1000:2000)"
if kc -n "$NS" exec web -- sh -c 'echo x > /written-to-root' 2>/dev/null; then die "pod web wrote to its read-only root"; fi
caps=$(kc -n "$NS" exec web -- sh -c 'grep CapEff /proc/self/status')
[[ $caps == *0000000000000000 ]] || die "pod web keeps capabilities: $caps"
seccomp=$(kc -n "$NS" exec web -- sh -c 'grep Seccomp: /proc/self/status')
[[ $seccomp == *2 ]] || die "pod web runs without a seccomp filter: $seccomp"
log "ok: pod web Ready by its HTTP probe in a containerd container, uid 1000 gid 1000 + fsGroup 2000 on its local PV, read-only root, no capabilities, seccomp filter"

# 2. Its pod IP answers, from the host and from another pod.
curl -fsS --max-time 3 "http://$ip:8080/index.html" | grep -q "$BODY" || die "pod web does not answer on $ip:8080 from the host"
wait_until 15 answers client-denied "$ip" 8080 || die "pod web does not answer on $ip:8080 from another pod"
log "ok: pod web answers on its pod IP $ip (from the host and from a pod)"

# 3. The Service by its DNS name: CoreDNS resolves it (busybox's own resolver), kube-proxy
# forwards its ClusterIP (nc gets the address: static glibc's name lookups do not work here).
svc_ip=$(kc -n "$NS" get service web -o jsonpath='{.spec.clusterIP}')
resolved=$(kc -n "$NS" exec client-allowed -- nslookup "web.$NS.svc.cluster.local" 2>/dev/null || true)
[[ $resolved == *"$svc_ip"* ]] || die "web.$NS.svc.cluster.local does not resolve to $svc_ip from a pod: $resolved"
wait_until 15 answers client-allowed "$svc_ip" 80 || die "Service web ($svc_ip:80) does not answer from a pod"
log "ok: web.$NS.svc.cluster.local resolves to $svc_ip and the Service answers"

# 4. An enforced NetworkPolicy: only role=allowed may reach app=web.
kc -n "$NS" apply -f - >/dev/null <<EOF
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-allowed-only}
spec:
  podSelector: {matchLabels: {app: web}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {role: allowed}}}]
    ports: [{port: 8080, protocol: TCP}]
EOF
# kube-router programs a policy in steps (the pod's chain, then the ipsets of its peers): wait for
# both ends, then check the refusal again once the admission is in place.
wait_until 30 refused client-denied "$ip" 8080 || die "the NetworkPolicy does not refuse client-denied (pod IP $ip)"
wait_until 30 answers client-allowed "$svc_ip" 80 || die "the NetworkPolicy refuses client-allowed too"
refused client-denied "$svc_ip" 80 || die "the NetworkPolicy does not refuse client-denied through the Service"
refused client-denied "$ip" 8080 || die "the NetworkPolicy stopped refusing client-denied (pod IP $ip)"
log "ok: NetworkPolicy web-allowed-only refuses client-denied and admits client-allowed"

kc delete namespace "$NS" --wait=false >/dev/null
log "verify passed in $((SECONDS - t0))s"
