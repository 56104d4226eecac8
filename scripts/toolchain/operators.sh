#!/usr/bin/env bash
# Operators for the simulated cluster, from the Go module proxy, into a cache dir of their own
# (its key is OPERATORS_VERSION_KEY in versions.sh; the toolchain's pieces are not touched):
#
#   - bin/lws-manager: the LeaderWorkerSet controller manager (sigs.k8s.io/lws cmd/ at
#     $LWS_VERSION), run by scripts/cluster/cluster.sh against the KWOK API server;
#   - bin/keda-operator: KEDA's operator (github.com/kedacore/keda/v2 cmd/operator at
#     $KEDA_VERSION, built in its own module so its replace directives hold), run by the
#     scale-to-zero tests against the KWOK API server;
#   - crds/<operator>/*.yaml: the operators' own generated CRDs, from the same modules
#     (LWS config/crd/bases, KEDA config/crd/bases, prometheus-operator
#     example/prometheus-operator-crd, cert-manager deploy/crds), installed by cluster.sh (LWS)
#     or by the test modules that need them (the others).
#
#   scripts/toolchain/operators.sh             build/extract what is missing (idempotent)
#   scripts/toolchain/operators.sh --env-path  print the env file to source (fails if not built)
#   scripts/toolchain/operators.sh --crds-only extract the CRDs only (no build)
#
# Runs after scripts/toolchain/bootstrap.sh and shares its Go module and build caches.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

log() { echo "[operators] $*"; }
die() { echo "[operators] ERROR: $*" >&2; exit 1; }

case "${1:-}" in
  --env-path)
    [[ -f "$OPERATORS_ENV" ]] || die "operators not built yet: run scripts/toolchain/operators.sh"
    echo "$OPERATORS_ENV"; exit 0 ;;
  ""|--crds-only) ;;
  *) die "unknown argument: $1 (use --env-path or --crds-only)" ;;
esac

BIN="$OPERATORS_DIR/bin"
CRDS="$OPERATORS_DIR/crds"
SRC="$OPERATORS_DIR/src"
TIMINGS="$OPERATORS_DIR/timings.log"
LOGS="$OPERATORS_DIR/logs"

# module path @ version | CRD directory inside the module | destination under crds/
CRD_SOURCES=(
  "sigs.k8s.io/lws@$LWS_VERSION|config/crd/bases|lws"
  "github.com/kedacore/keda/v2@$KEDA_VERSION|config/crd/bases|keda"
  "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION|example/prometheus-operator-crd|prometheus-operator"
  "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION|deploy/crds|cert-manager"
)

have_manager() { [[ -x "$BIN/lws-manager" ]]; }
have_crds() {
  local entry
  for entry in "${CRD_SOURCES[@]}"; do
    [[ -f "$CRDS/${entry##*|}/.ready" ]] || return 1
  done
}
have_keda() { [[ -x "$BIN/keda-operator" ]]; }
have_env() { [[ -f "$OPERATORS_ENV" && "$OPERATORS_ENV" -nt "$HERE/operators.sh" ]]; }

T_START=$(date +%s)
if have_manager && have_keda && have_crds && have_env; then
  echo "$(date -u +%FT%TZ) warm-run total $(($(date +%s) - T_START))s" >> "$TIMINGS"
  exit 0
fi

command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26)"
export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -modcacherw"
export CGO_ENABLED=0
export GOMODCACHE="${LLM_SERVING_GOMODCACHE:-$TOOLCHAIN_ROOT/go/mod}"
export GOCACHE="${LLM_SERVING_GOCACHE:-$TOOLCHAIN_ROOT/go/cache}"
mkdir -p "$BIN" "$CRDS" "$SRC" "$LOGS"

PIECE_LOG=/dev/null
q() {
  if ! "$@" >>"$PIECE_LOG" 2>&1; then
    tail -n 40 "$PIECE_LOG" >&2
    die "failed: $* (full log: $PIECE_LOG)"
  fi
}
timed() { # timed <name> <fn>: run, log the cold time
  local t0; t0=$(date +%s)
  PIECE_LOG="$LOGS/$1.log"; : >"$PIECE_LOG"
  log "building $1... (log: $PIECE_LOG)"
  "$2"
  log "built $1 in $(($(date +%s) - t0))s"
  echo "$(date -u +%FT%TZ) cold-piece $1 $(($(date +%s) - t0))s" >> "$TIMINGS"
}

moddir_download() { # <module@version>: its directory in the module cache (downloads it)
  go mod download -json "$1" | python3 -c '
import json, sys
d = json.load(sys.stdin)
sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])'
}

extract_crds() {
  local entry mod sub dest dir
  for entry in "${CRD_SOURCES[@]}"; do
    IFS='|' read -r mod sub dest <<<"$entry"
    [[ -f "$CRDS/$dest/.ready" ]] && continue
    dir=$(moddir_download "$mod") || die "cannot download $mod"
    [[ -d "$dir/$sub" ]] || die "$mod has no $sub"
    rm -rf "$CRDS/$dest"; mkdir -p "$CRDS/$dest"
    cp "$dir/$sub"/*.yaml "$CRDS/$dest/"
    chmod u+w "$CRDS/$dest"/*.yaml
    echo "$mod $sub" > "$CRDS/$dest/.source"
    touch "$CRDS/$dest/.ready"
  done
}

build_manager() {
  local dir="$SRC/lws" mod=sigs.k8s.io/lws
  mkdir -p "$dir"; cd "$dir"
  rm -f go.mod go.sum
  go mod init local/lws >/dev/null 2>&1
  cat > tools.go <<'EOF'
//go:build tools

package tools

import _ "sigs.k8s.io/lws/cmd"
EOF
  go mod edit -require "$mod@$LWS_VERSION"
  q go mod tidy
  q go build -trimpath -ldflags "-s -w -X $mod/pkg/version.GitVersion=$LWS_VERSION -X $mod/pkg/version.BuildDate=1970-01-01T00:00:00Z" \
    -o "$BIN/.lws-manager.tmp" "$mod/cmd"
  mv "$BIN/.lws-manager.tmp" "$BIN/lws-manager"
}

build_keda() {
  # In KEDA's own module (its go.mod pins k8s.io and others with replace directives, which a
  # dependent module would ignore); not vendored: the module zip has vendor/modules.txt only.
  local dir="$SRC/keda" mod
  mod=$(moddir_download "github.com/kedacore/keda/v2@$KEDA_VERSION") || die "cannot download KEDA $KEDA_VERSION"
  rm -rf "$dir"; cp -r "$mod" "$dir"; chmod -R u+w "$dir"; cd "$dir"
  q go build -trimpath -ldflags "-s -w -X github.com/kedacore/keda/v2/version.Version=$KEDA_VERSION" \
    -o "$BIN/.keda-operator.tmp" ./cmd/operator
  mv "$BIN/.keda-operator.tmp" "$BIN/keda-operator"
  rm -rf "$dir"
}

write_env() {
  cat > "$OPERATORS_ENV.tmp" <<EOF
# Generated by scripts/toolchain/operators.sh ($OPERATORS_VERSION_KEY). Source it.
export LLM_SERVING_OPERATORS_DIR="$OPERATORS_DIR"
export LLM_SERVING_LWS_MANAGER="$BIN/lws-manager"
export LLM_SERVING_LWS_VERSION="$LWS_VERSION"
export LLM_SERVING_KEDA_OPERATOR="$BIN/keda-operator"
export LLM_SERVING_KEDA_VERSION="$KEDA_VERSION"
export LLM_SERVING_CRDS_DIR="$CRDS"
EOF
  mv "$OPERATORS_ENV.tmp" "$OPERATORS_ENV"
}

have_crds || timed crds extract_crds
[[ ${1:-} == --crds-only ]] && exit 0
have_manager || timed lws-manager build_manager
have_keda || timed keda-operator build_keda
write_env
echo "$(date -u +%FT%TZ) run total $(($(date +%s) - T_START))s" >> "$TIMINGS"
log "done in $(($(date +%s) - T_START))s. Use: source \"$OPERATORS_ENV\""
