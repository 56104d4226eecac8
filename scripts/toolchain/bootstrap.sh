#!/usr/bin/env bash
# Build the local toolchain (Pulumi engine + Python host + pulumi-kubernetes provider + a KWOK
# simulated Kubernetes control plane) from the Go module proxy into a cache dir outside the repo.
#
#   scripts/toolchain/bootstrap.sh             build what is missing (idempotent; warm run = seconds)
#   scripts/toolchain/bootstrap.sh --env-path  print the env file to source (fails if not built)
#   scripts/toolchain/bootstrap.sh --print-dir print the toolchain dir
#
# Output: ${LLM_SERVING_TOOLCHAIN_DIR:-$HOME/.cache/llm-serving-toolchain}/<version-key>/{bin,env.sh}
# Then: source "$(scripts/toolchain/bootstrap.sh --env-path)"
# Go caches: $LLM_SERVING_GOMODCACHE / $LLM_SERVING_GOCACHE, default <toolchain root>/go/{mod,cache}.
# See docs/toolchain.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

MIN_FREE_GB=${LLM_SERVING_MIN_FREE_GB:-15}
PIECES_TOTAL=7

log() { echo "[bootstrap] $*"; }
die() { echo "[bootstrap] ERROR: $*" >&2; exit 1; }

case "${1:-}" in
  --env-path)
    [[ -f "$TOOLCHAIN_ENV" ]] || die "toolchain not built yet: run scripts/toolchain/bootstrap.sh"
    echo "$TOOLCHAIN_ENV"; exit 0 ;;
  --print-dir) echo "$TOOLCHAIN_DIR"; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (use --env-path or --print-dir)" ;;
esac

BIN="$TOOLCHAIN_BIN"
SRC="$TOOLCHAIN_DIR/src"
PULUMI_HOME_DIR="$TOOLCHAIN_DIR/pulumi-home"
K8S_PLUGIN_BIN="$TOOLCHAIN_DIR/plugins/pulumi-resource-kubernetes"
K8S_PLUGIN_INSTALLED="$PULUMI_HOME_DIR/plugins/resource-kubernetes-v$PULUMI_K8S_VERSION/pulumi-resource-kubernetes"
LANGHOST_SRC="$HERE/pulumi-language-python/main.go"
TIMINGS="$TOOLCHAIN_DIR/timings.log"

# --- what is missing? ------------------------------------------------------------------------
have_pulumi()    { [[ -x "$BIN/pulumi" ]]; }
have_langhost()  { [[ -x "$BIN/pulumi-language-python" && -x "$BIN/pulumi-language-python-exec" \
                     && -x "$BIN/pulumi-resource-pulumi-python" && -f "$SRC/pulumi/langhost/main.go" ]] \
                     && cmp -s "$LANGHOST_SRC" "$SRC/pulumi/langhost/main.go"; }
have_k8sprov()   { [[ -x "$K8S_PLUGIN_BIN" ]]; }
have_etcd()      { [[ -x "$BIN/etcd" ]]; }
have_kube()      { [[ -x "$BIN/kube-apiserver" && -x "$BIN/kube-controller-manager" \
                     && -x "$BIN/kube-scheduler" && -x "$BIN/kubectl" ]]; }
have_kwok()      { [[ -x "$BIN/kwok" && -x "$BIN/kwokctl" ]]; }
have_installed() { [[ -x "$K8S_PLUGIN_INSTALLED" && -f "$TOOLCHAIN_ENV" \
                     && "$TOOLCHAIN_ENV" -nt "$HERE/bootstrap.sh" ]]; }

all_present() {
  have_pulumi && have_langhost && have_k8sprov && have_etcd && have_kube && have_kwok && have_installed
}

T_START=$(date +%s)
MODE=warm
all_present || MODE=cold

if [[ $MODE == cold ]]; then
  # --- preconditions (only when something must be built) ------------------------------------
  command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26)"
  GOV=$(go env GOVERSION | sed 's/^go//')
  [[ "$(printf '%s\n' 1.26 "$GOV" | sort -V | head -1)" == 1.26 ]] || die "Go $GOV is too old (need >= 1.26)"
  command -v python3 >/dev/null || die "python3 not found (needed to prepare the provider schema)"
  mkdir -p "$TOOLCHAIN_ROOT" || die "cannot create $TOOLCHAIN_ROOT"
  FREE_KB=$(df -Pk "$TOOLCHAIN_ROOT" | awk 'NR==2 {print $4}')
  FREE_GB=$((FREE_KB / 1024 / 1024))
  if (( FREE_GB < MIN_FREE_GB )); then
    die "only ${FREE_GB} GB free on the filesystem of $TOOLCHAIN_ROOT; need >= ${MIN_FREE_GB} GB to build (Go module + build caches reach ~14 GB). Free space or set LLM_SERVING_TOOLCHAIN_DIR to a bigger disk."
  fi
  log "toolchain dir: $TOOLCHAIN_DIR (${FREE_GB} GB free)"
fi

export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -modcacherw"
export CGO_ENABLED=0
export GOMODCACHE="${LLM_SERVING_GOMODCACHE:-$TOOLCHAIN_ROOT/go/mod}"
export GOCACHE="${LLM_SERVING_GOCACHE:-$TOOLCHAIN_ROOT/go/cache}"
mkdir -p "$BIN" "$SRC" "$TOOLCHAIN_DIR/plugins" "$PULUMI_HOME_DIR"

PIECES_LOG_DIR="$TOOLCHAIN_DIR/logs"
mkdir -p "$PIECES_LOG_DIR"
# shellcheck source=../pieces.sh
source "$HERE/../pieces.sh"

# Module directory of a dependency, as resolved inside the current wrapper module.
moddir() { go list -m -f '{{.Dir}}' "$1"; }

# Copy every non-local replace directive of an upstream go.mod into the current wrapper module
# (upstream replaces are ignored for dependencies; local `=> ../x` ones are handled per piece).
copy_remote_replaces() {
  local gomod=$1
  go mod edit -json "$gomod" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    new = r["New"]
    if new.get("Version"):
        old = r["Old"]["Path"] + ("@" + r["Old"]["Version"] if r["Old"].get("Version") else "")
        print("-replace=%s=%s@%s" % (old, new["Path"], new["Version"]))
' | while read -r arg; do go mod edit "$arg"; done
}

new_wrapper() { # new_wrapper <dir> <module-name>; cd into it, fresh go.mod
  mkdir -p "$1"; cd "$1"
  rm -f go.mod go.sum
  go mod init "$2" >/dev/null 2>&1
}

gomod_file() { go mod download -json "$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["GoMod"])'; }

# --- 1. pulumi CLI ------------------------------------------------------------------------------
pulumi_wrapper() {
  local dir="$SRC/pulumi"
  if [[ -f "$dir/.ready" ]] && cmp -s "$LANGHOST_SRC" "$dir/langhost/main.go"; then cd "$dir"; return; fi
  new_wrapper "$dir" local/pulumi-tools
  mkdir -p langhost
  cp "$LANGHOST_SRC" langhost/main.go
  cat > tools.go <<'EOF'
//go:build tools

package tools

import _ "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"
EOF
  go mod edit -require "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION" \
    -require "github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION"
  local gm; gm=$(gomod_file "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION")
  copy_remote_replaces "$gm"
  q go mod tidy
  touch .ready
}
build_pulumi() {
  pulumi_wrapper
  q go build -trimpath -tags osusergo,grpcnotrace \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
    -o "$BIN/.pulumi.tmp" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
  mv "$BIN/.pulumi.tmp" "$BIN/pulumi"
}

# --- 2. Python language host + exec script + dynamic provider plugin ----------------------------
build_langhost() {
  pulumi_wrapper
  q go build -trimpath -tags osusergo,grpcnotrace \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
    -o "$BIN/.pulumi-language-python.tmp" ./langhost
  mv "$BIN/.pulumi-language-python.tmp" "$BIN/pulumi-language-python"
  local sdk; sdk=$(moddir github.com/pulumi/pulumi/sdk/v3)
  # The module zip drops exec bits.
  install -m755 "$sdk/python/cmd/pulumi-language-python-exec" "$BIN/pulumi-language-python-exec"
  install -m755 "$sdk/python/dist/pulumi-resource-pulumi-python" "$BIN/pulumi-resource-pulumi-python"
}

# --- 3. pulumi-kubernetes provider ----------------------------------------------------------------
build_k8sprov() {
  local mod=github.com/pulumi/pulumi-kubernetes/provider/v4
  new_wrapper "$SRC/k8sprov" local/k8sprov
  go mod edit -require "$mod@$PULUMI_K8S_PROVIDER_MODULE_VERSION" \
    -replace "github.com/pulumi/pulumi-kubernetes/sdk/v4=github.com/pulumi/pulumi-kubernetes/sdk/v4@$PULUMI_K8S_GO_SDK_VERSION"
  local gm; gm=$(gomod_file "$mod@$PULUMI_K8S_PROVIDER_MODULE_VERSION")
  copy_remote_replaces "$gm"
  # Upstream cmd/pulumi-resource-kubernetes go:embeds generated files that are not in the module
  # zip; regenerate them here (same as its generate.go: schema with version set, minified JSON).
  local pdir; pdir=$(go mod download -json "$mod@$PULUMI_K8S_PROVIDER_MODULE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  pdir="$pdir/cmd/pulumi-resource-kubernetes"
  python3 - "$pdir" "$PULUMI_K8S_VERSION" <<'EOF'
import json, sys
src, version = sys.argv[1], sys.argv[2]
schema = json.load(open(src + "/schema.json"))
schema["version"] = version
json.dump(schema, open("schema-embed.json", "w"), separators=(",", ":"))
json.dump(json.load(open(src + "/terraform-mapping.json")), open("terraform-mapping-embed.json", "w"), separators=(",", ":"))
EOF
  cat > main.go <<'EOF'
package main

import (
	_ "embed"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema-embed.json
var pulumiSchema []byte

//go:embed terraform-mapping-embed.json
var terraformMapping []byte

func main() {
	provider.Serve("kubernetes", version.Version, pulumiSchema, terraformMapping)
}
EOF
  q go mod tidy
  q go build -trimpath -tags osusergo,grpcnotrace \
    -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_K8S_VERSION" \
    -o "$K8S_PLUGIN_BIN.tmp" .
  mv "$K8S_PLUGIN_BIN.tmp" "$K8S_PLUGIN_BIN"
}

# --- 4. etcd ------------------------------------------------------------------------------------------
build_etcd() {
  new_wrapper "$SRC/etcd" local/etcd
  cat > tools.go <<'EOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
EOF
  # etcd's own go.mod replaces its sibling modules with ../ paths: pin them to the same tag.
  go mod edit -require "go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
    -require "go.etcd.io/etcd/api/v3@$ETCD_VERSION" \
    -require "go.etcd.io/etcd/client/pkg/v3@$ETCD_VERSION" \
    -require "go.etcd.io/etcd/client/v3@$ETCD_VERSION" \
    -require "go.etcd.io/etcd/pkg/v3@$ETCD_VERSION"
  q go mod tidy
  q go build -trimpath -ldflags "-s -w" -o "$BIN/.etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/.etcd.tmp" "$BIN/etcd"
}

# --- 5. kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (one wrapper module) ------
build_kube() {
  new_wrapper "$SRC/kube" local/kube
  cat > tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
  local kgomod; kgomod=$(gomod_file "k8s.io/kubernetes@$K8S_VERSION")
  local -a args=(-require "k8s.io/kubernetes@$K8S_VERSION")
  # k8s.io/kubernetes replaces every staging module with ./staging/src/...: use the published tags.
  local m
  for m in $(go mod edit -json "$kgomod" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if r["New"]["Path"].startswith("./staging/"):
        print(r["Old"]["Path"])'); do
    args+=(-replace "$m=$m@$K8S_STAGING_VERSION")
  done
  go mod edit "${args[@]}"
  copy_remote_replaces "$kgomod"
  q go mod tidy
  local minor; minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$SRC/kube/out"
  q go build -trimpath -ldflags "$ld" -o "$SRC/kube/out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  mv "$SRC/kube/out/"* "$BIN/"
}

# --- 6. kwok + kwokctl --------------------------------------------------------------------------------
build_kwok() {
  new_wrapper "$SRC/kwok" local/kwok
  cat > tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
EOF
  go mod edit -require "sigs.k8s.io/kwok@$KWOK_VERSION"
  local gm; gm=$(gomod_file "sigs.k8s.io/kwok@$KWOK_VERSION")
  copy_remote_replaces "$gm"
  q go mod tidy
  mkdir -p out
  # Default kube version of kwokctl = the control plane we build.
  q go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${K8S_VERSION#v}" \
    -o out/ sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
  mv out/* "$BIN/"
}

# --- 7. install the provider plugin into PULUMI_HOME + env file -----------------------------------
write_env() {
  cat > "$TOOLCHAIN_ENV.tmp" <<EOF
# Generated by scripts/toolchain/bootstrap.sh ($TOOLCHAIN_VERSION_KEY). Source it:
#   source "$TOOLCHAIN_ENV"
export LLM_SERVING_TOOLCHAIN_DIR_RESOLVED="$TOOLCHAIN_DIR"
export LLM_SERVING_TOOLCHAIN_BIN="$BIN"
case ":\$PATH:" in *":$BIN:"*) ;; *) export PATH="$BIN:\$PATH" ;; esac
# pulumi-resource-kubernetes v$PULUMI_K8S_VERSION is installed in this PULUMI_HOME. To use another
# PULUMI_HOME: pulumi plugin install resource kubernetes $PULUMI_K8S_VERSION --file "$K8S_PLUGIN_BIN"
export PULUMI_HOME="\${LLM_SERVING_PULUMI_HOME:-$PULUMI_HOME_DIR}"
export LLM_SERVING_K8S_PLUGIN_BINARY="$K8S_PLUGIN_BIN"
export LLM_SERVING_PULUMI_VERSION="$PULUMI_VERSION"
export LLM_SERVING_PULUMI_K8S_VERSION="$PULUMI_K8S_VERSION"
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
EOF
  mv "$TOOLCHAIN_ENV.tmp" "$TOOLCHAIN_ENV"
  cp "$TOOLCHAIN_ENV" "$TOOLCHAIN_ROOT/env.sh"
}
build_installed() {
  if [[ ! -x "$K8S_PLUGIN_INSTALLED" ]]; then
    PULUMI_HOME="$PULUMI_HOME_DIR" PULUMI_SKIP_UPDATE_CHECK=true \
      q "$BIN/pulumi" plugin install resource kubernetes "$PULUMI_K8S_VERSION" --file "$K8S_PLUGIN_BIN"
  fi
  write_env
}

piece pulumi have_pulumi build_pulumi
piece pulumi-language-python have_langhost build_langhost
piece pulumi-resource-kubernetes have_k8sprov build_k8sprov
piece etcd have_etcd build_etcd
piece kube-control-plane have_kube build_kube
piece kwok have_kwok build_kwok
piece plugin-install+env have_installed build_installed

T_END=$(date +%s)
if ((${#PIECES_BUILT[@]})); then
  log "built: ${PIECES_BUILT[*]}"
  echo "$(date -u +%FT%TZ) run total $((T_END - T_START))s (built: ${PIECES_BUILT[*]})" >> "$TIMINGS"
else
  echo "$(date -u +%FT%TZ) warm-run total $((T_END - T_START))s" >> "$TIMINGS"
fi
log "done in $((T_END - T_START))s. Use: source \"$TOOLCHAIN_ENV\""
