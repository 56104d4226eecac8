#!/usr/bin/env bash
# Build the binaries the weight-source tests run — rclone (the object-store puller) and versitygw
# (a real S3-compatible server) — from the Go module proxy into a cache dir outside the repo.
#
#   scripts/testtools/build.sh              build what is missing (idempotent; warm run = instant)
#   scripts/testtools/build.sh --print-dir  print the dir holding bin/rclone and bin/versitygw
#
# Go caches are the toolchain's (scripts/toolchain/bootstrap.sh), so module downloads are shared.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"
# shellcheck source=../toolchain/versions.sh
source "$HERE/../toolchain/versions.sh"

log() { echo "[testtools] $*"; }
die() { echo "[testtools] ERROR: $*" >&2; exit 1; }

case "${1:-}" in
  --print-dir) echo "$TESTTOOLS_DIR"; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (use --print-dir)" ;;
esac

BIN="$TESTTOOLS_DIR/bin"
SRC="$TESTTOOLS_DIR/src"
TIMINGS="$TESTTOOLS_DIR/timings.log"
have_rclone()    { [[ -x "$BIN/rclone" ]]; }
have_versitygw() { [[ -x "$BIN/versitygw" ]]; }
if have_rclone && have_versitygw; then exit 0; fi

command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26)"
export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -modcacherw"
export CGO_ENABLED=0
export GOMODCACHE="${LLM_SERVING_GOMODCACHE:-$TOOLCHAIN_ROOT/go/mod}"
export GOCACHE="${LLM_SERVING_GOCACHE:-$TOOLCHAIN_ROOT/go/cache}"
mkdir -p "$BIN" "$SRC" "$TESTTOOLS_DIR/logs"

PIECE_LOG=/dev/null
q() {
  if ! "$@" >>"$PIECE_LOG" 2>&1; then
    tail -n 40 "$PIECE_LOG" >&2
    die "failed: $* (full log: $PIECE_LOG)"
  fi
}
piece() { # piece <name> <have-fn> <build-fn>
  local name=$1 have=$2 build=$3 t0 t1
  if $have; then return; fi
  PIECE_LOG="$TESTTOOLS_DIR/logs/$name.log"
  : >"$PIECE_LOG"
  log "building $name (cold; log: $PIECE_LOG)..."
  t0=$(date +%s)
  (cd "$SRC" && $build)
  $have || die "$name: build finished but the binary is missing"
  t1=$(date +%s)
  log "built $name in $((t1 - t0))s"
  echo "$(date -u +%FT%TZ) cold-piece $name $((t1 - t0))s" >> "$TIMINGS"
}

# rclone with only the backends and commands the puller and the tests use (local, s3, gcs;
# copy, lsjson, check, version). Same release and same flag set for these commands as the image;
# the full build (every backend) is several times slower for nothing the tests run.
build_rclone() {
  mkdir -p rclone && cd rclone
  rm -f go.mod go.sum
  q go mod init local/rclone-min
  cat > main.go <<'GO'
package main

import (
	_ "github.com/rclone/rclone/backend/googlecloudstorage"
	_ "github.com/rclone/rclone/backend/local"
	_ "github.com/rclone/rclone/backend/s3"
	"github.com/rclone/rclone/cmd"
	_ "github.com/rclone/rclone/cmd/check"
	_ "github.com/rclone/rclone/cmd/copy"
	_ "github.com/rclone/rclone/cmd/lsjson"
	_ "github.com/rclone/rclone/cmd/version"
)

func main() { cmd.Main() }
GO
  q go mod edit -require "github.com/rclone/rclone@$RCLONE_VERSION"
  q go mod tidy
  q go build -trimpath -ldflags "-s -w" -o "$BIN/.rclone.tmp" .
  mv "$BIN/.rclone.tmp" "$BIN/rclone"
}

build_versitygw() {
  mkdir -p versitygw && cd versitygw
  rm -f go.mod go.sum
  q go mod init local/versitygw
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
GO
  q go mod edit -require "github.com/versity/versitygw@$VERSITYGW_VERSION"
  q go mod tidy
  q go build -trimpath -ldflags "-s -w -X main.Version=$VERSITYGW_VERSION" \
    -o "$BIN/.versitygw.tmp" github.com/versity/versitygw/cmd/versitygw
  mv "$BIN/.versitygw.tmp" "$BIN/versitygw"
}

piece rclone have_rclone build_rclone
piece versitygw have_versitygw build_versitygw
