#!/usr/bin/env bash
# Build the real node's pieces once, into a cache dir of their own (REAL_NODE_DIR in
# scripts/toolchain/versions.sh); scripts/cluster/cluster.sh start --real-node runs them.
#
#   scripts/node/build.sh             install/build what is missing (idempotent; warm: a second)
#   scripts/node/build.sh --env-path  print the env file to source (fails if not built)
#
# - Debian packages (apt-get): containerd, runc, the CNI plugins, iptables, ipset, conntrack,
#   nftables (`nft`: a stop deletes the iptables tables a start created), busybox-static (the
#   check image), gcc + libc6-dev (the pause program);
# - bin/kubelet, bin/kube-proxy: built in a wrapper module that copies the toolchain's Kubernetes
#   wrapper (scripts/toolchain/bootstrap.sh: the same k8s.io/kubernetes pin and staging
#   replaces), with the same version stamps, so they match the control plane;
# - bin/coredns (github.com/coredns/coredns@$COREDNS_VERSION) and bin/kube-router
#   (github.com/cloudnativelabs/kube-router/v2@$KUBE_ROUTER_VERSION, the test cluster's
#   NetworkPolicy enforcer only), each from its own module;
# - images/pause.tar: scripts/node/pause.c built static, the pod sandbox image;
# - images/node-check.tar: busybox-static (httpd, nc, nslookup), what `cluster.sh verify` runs.
#
# Needs the toolchain (scripts/toolchain/bootstrap.sh) built first, and shares its Go caches.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../toolchain/versions.sh
source "$HERE/../toolchain/versions.sh"

log() { echo "[real-node build] $*"; }
die() { echo "[real-node build] ERROR: $*" >&2; exit 1; }

BIN="$REAL_NODE_DIR/bin"
IMAGES="$REAL_NODE_DIR/images"
SRC="$REAL_NODE_DIR/src"
LOGS="$REAL_NODE_DIR/logs"
ENV_FILE="$REAL_NODE_DIR/env.sh"
TIMINGS="$REAL_NODE_DIR/timings.log"
PAUSE_IMAGE="llm-serving.local/pause:1"
CHECK_IMAGE="llm-serving.local/node-check:1"

case "${1:-}" in
  --env-path)
    [[ -f "$ENV_FILE" ]] || die "real node not built yet: run scripts/node/build.sh"
    echo "$ENV_FILE"; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (use --env-path)" ;;
esac

PACKAGES=(containerd runc containernetworking-plugins iptables ipset conntrack nftables busybox-static gcc libc6-dev)
have_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    [[ $(dpkg-query -W -f '${Status}' "$p" 2>/dev/null) == "install ok installed" ]] || return 1
  done
}
have_kube()   { [[ -x "$BIN/kubelet" && -x "$BIN/kube-proxy" ]]; }
have_coredns() { [[ -x "$BIN/coredns" ]]; }
have_router() { [[ -x "$BIN/kube-router" ]]; }
have_pause()  { [[ -f "$IMAGES/pause.tar" && "$IMAGES/pause.tar" -nt "$HERE/pause.c" ]]; }
have_check()  { [[ -f "$IMAGES/node-check.tar" && "$IMAGES/node-check.tar" -nt "$HERE/oci_archive.py" ]]; }
have_env()    { [[ -f "$ENV_FILE" && "$ENV_FILE" -nt "$HERE/build.sh" ]]; }

T_START=$(date +%s)
if have_packages && have_kube && have_coredns && have_router && have_pause && have_check && have_env; then
  echo "$(date -u +%FT%TZ) warm-run total $(($(date +%s) - T_START))s" >>"$TIMINGS"
  exit 0
fi

mkdir -p "$BIN" "$IMAGES" "$SRC" "$LOGS"
# One build at a time (scripts/test.sh starts one early in the background; the real-node group's
# `cluster.sh start` then waits here and finds everything built).
exec 6>"$REAL_NODE_DIR/build.lock"
flock 6
export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOMODCACHE="${LLM_SERVING_GOMODCACHE:-$TOOLCHAIN_ROOT/go/mod}"
export GOCACHE="${LLM_SERVING_GOCACHE:-$TOOLCHAIN_ROOT/go/cache}"

PIECES_LOG_DIR="$LOGS"
# shellcheck source=../pieces.sh
source "$HERE/../pieces.sh"

install_packages() {
  export DEBIAN_FRONTEND=noninteractive
  # The package lists may be missing or old on a fresh machine: update once, then install.
  q apt-get update -qq
  q apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"
}

build_kube() {
  local kube_src="$TOOLCHAIN_DIR/src/kube"
  [[ -f $kube_src/go.mod && -f $kube_src/go.sum ]] \
    || die "the toolchain's Kubernetes wrapper ($kube_src) is missing: run scripts/toolchain/bootstrap.sh first"
  command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26)"
  local dir="$SRC/kube"
  rm -rf "$dir"; mkdir -p "$dir/out"
  # Same go.mod (the k8s.io/kubernetes pin, its staging replaces): same versions of every module
  # the control plane was built from; tidy only adds what the node binaries need on top.
  cp "$kube_src/go.mod" "$kube_src/go.sum" "$dir/"
  cat >"$dir/tools.go" <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
  cd "$dir"
  GOFLAGS="-mod=mod -modcacherw" q go mod tidy
  local minor ld="-s -w" p
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  GOFLAGS="-mod=mod -modcacherw" q go build -trimpath -ldflags "$ld" -o out/ \
    k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  mv out/kubelet out/kube-proxy "$BIN/"
}

go_install() { # go_install <package@version> <binary name>
  command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26)"
  mkdir -p "$SRC/gobin"
  # `go install pkg@version` builds the module as its own main module, with its own go.sum and
  # replaces; -mod=mod does not apply there.
  GOFLAGS="-modcacherw" GOBIN="$SRC/gobin" q go install -trimpath -ldflags "-s -w" "$1"
  mv "$SRC/gobin/$2" "$BIN/$2"
}
build_coredns() { go_install "github.com/coredns/coredns@$COREDNS_VERSION" coredns; }
build_router() { go_install "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION" kube-router; }

build_pause() {
  local root="$SRC/pause-root"
  rm -rf "$root"; mkdir -p "$root"
  q gcc -static -Os -Wall -Wextra -Werror -o "$root/pause" "$HERE/pause.c"
  q python3 "$HERE/oci_archive.py" --root "$root" --name "$PAUSE_IMAGE" --out "$IMAGES/pause.tar" \
    --entrypoint '["/pause"]' --user 65535:65535
}

build_check() {
  local root="$SRC/check-root" tool
  rm -rf "$root"; mkdir -p "$root/bin" "$root/www"
  cp /bin/busybox "$root/bin/busybox"
  for tool in sh httpd nc nslookup cat echo sleep id ls stat printf; do ln -s busybox "$root/bin/$tool"; done
  echo "llm-serving real node" >"$root/www/index.html"
  q python3 "$HERE/oci_archive.py" --root "$root" --name "$CHECK_IMAGE" --out "$IMAGES/node-check.tar" \
    --entrypoint '["/bin/busybox"]' --cmd '["sh"]'
}

write_env() {
  cat >"$ENV_FILE.tmp" <<EOF
# Generated by scripts/node/build.sh ($REAL_NODE_VERSION_KEY).
export LLM_SERVING_REAL_NODE_BIN="$BIN"
export LLM_SERVING_REAL_NODE_IMAGES="$IMAGES"
export LLM_SERVING_PAUSE_IMAGE="$PAUSE_IMAGE"
export LLM_SERVING_NODE_CHECK_IMAGE="$CHECK_IMAGE"
EOF
  mv "$ENV_FILE.tmp" "$ENV_FILE"
}

piece debian-packages have_packages install_packages
piece kubelet+kube-proxy have_kube build_kube
piece coredns have_coredns build_coredns
piece kube-router have_router build_router
piece pause-image have_pause build_pause
piece node-check-image have_check build_check
write_env
echo "$(date -u +%FT%TZ) run total $(($(date +%s) - T_START))s" >>"$TIMINGS"
log "done in $(($(date +%s) - T_START))s"
