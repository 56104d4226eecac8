#!/usr/bin/env bash
# Build the binaries the servers-tier tests run — rclone (the object-store puller), versitygw
# (a real S3-compatible server), MinIO (the one for object versions: versions.sh says why) and
# actionlint (the CI workflow example's linter, tests/ci) — from the Go module proxy into a cache
# dir outside the repo.
#
#   scripts/testtools/build.sh              build what is missing (idempotent; warm run = instant)
#   scripts/testtools/build.sh --print-dir  print the dir holding bin/rclone, bin/versitygw, bin/minio,
#                                           bin/actionlint
#   scripts/testtools/build.sh actionlint   build that one only (a test that needs only it)
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

ONLY=""
case "${1:-}" in
  --print-dir) echo "$TESTTOOLS_DIR"; exit 0 ;;
  "") ;;
  actionlint) ONLY=$1 ;;
  *) die "unknown argument: $1 (use --print-dir or actionlint)" ;;
esac

BIN="$TESTTOOLS_DIR/bin"
TIMINGS="$TESTTOOLS_ROOT/timings.log"
have_rclone()    { [[ -x "$RCLONE_DIR/rclone" ]]; }
have_versitygw() { [[ -x "$VERSITYGW_DIR/versitygw" ]]; }
have_minio()     { [[ -x "$MINIO_DIR/minio" ]]; }
have_actionlint() { [[ -x "$ACTIONLINT_DIR/actionlint" ]]; }
link() {
  mkdir -p "$BIN"
  if [[ -n "$ONLY" ]]; then ln -sfn "$ACTIONLINT_DIR/actionlint" "$BIN/actionlint"; return; fi
  ln -sfn "$RCLONE_DIR/rclone" "$BIN/rclone"
  ln -sfn "$VERSITYGW_DIR/versitygw" "$BIN/versitygw"
  ln -sfn "$MINIO_DIR/minio" "$BIN/minio"
  ln -sfn "$ACTIONLINT_DIR/actionlint" "$BIN/actionlint"
}
warm() {
  if [[ "$ONLY" == actionlint ]]; then have_actionlint; else have_rclone && have_versitygw && have_minio && have_actionlint; fi
}
if warm; then link; exit 0; fi
# One build at a time: the servers tier's xdist workers each call this when a tool is missing
# (seen: three MinIO builds into the same .tmp); the others wait, then find it built.
mkdir -p "$TESTTOOLS_ROOT"
exec 8>"$TESTTOOLS_ROOT/.build.lock"
flock 8
if warm; then link; exit 0; fi

command -v go >/dev/null || die "go not found on PATH (need Go >= 1.26)"
export GOTOOLCHAIN=local
export GOFLAGS="-mod=mod -modcacherw"
export CGO_ENABLED=0
export GOMODCACHE="${LLM_SERVING_GOMODCACHE:-$TOOLCHAIN_ROOT/go/mod}"
export GOCACHE="${LLM_SERVING_GOCACHE:-$TOOLCHAIN_ROOT/go/cache}"
mkdir -p "$TESTTOOLS_ROOT/logs"

PIECE_LOG=/dev/null
q() {
  if ! "$@" >>"$PIECE_LOG" 2>&1; then
    tail -n 40 "$PIECE_LOG" >&2
    die "failed: $* (full log: $PIECE_LOG)"
  fi
}
piece() { # piece <name> <dir> <have-fn> <build-fn>
  local name=$1 dir=$2 have=$3 build=$4 t0 t1
  if $have; then return; fi
  PIECE_LOG="$TESTTOOLS_ROOT/logs/$(basename "$dir").log"
  : >"$PIECE_LOG"
  log "building $name (cold; log: $PIECE_LOG)..."
  t0=$(date +%s)
  mkdir -p "$dir/src"
  (cd "$dir/src" && OUT="$dir" $build)
  $have || die "$name: build finished but the binary is missing"
  t1=$(date +%s)
  log "built $name in $((t1 - t0))s"
  echo "$(date -u +%FT%TZ) cold-piece $(basename "$dir") $((t1 - t0))s" >> "$TIMINGS"
}

# rclone with only the backends and commands the puller and the tests use. Same release and the
# same flags for these commands as the image; the full build (every backend and command) is
# 2.75x slower to compile for nothing the tests run (docs/weight-sources.md has both times).
build_rclone() {
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
	_ "github.com/rclone/rclone/cmd/checksum"
	_ "github.com/rclone/rclone/cmd/copy"
	_ "github.com/rclone/rclone/cmd/copyto"
	_ "github.com/rclone/rclone/cmd/deletefile"
	_ "github.com/rclone/rclone/cmd/lsjson"
	_ "github.com/rclone/rclone/cmd/md5sum"
	_ "github.com/rclone/rclone/cmd/mkdir"
	_ "github.com/rclone/rclone/cmd/version"
)

func main() { cmd.Main() }
GO
  q go mod edit -require "github.com/rclone/rclone@$RCLONE_VERSION"
  q go mod tidy
  q go build -trimpath -ldflags "-s -w -X github.com/rclone/rclone/fs.Version=$RCLONE_VERSION" -o "$OUT/.rclone.tmp" .
  mv "$OUT/.rclone.tmp" "$OUT/rclone"
}

build_versitygw() {
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
    -o "$OUT/.versitygw.tmp" github.com/versity/versitygw/cmd/versitygw
  mv "$OUT/.versitygw.tmp" "$OUT/versitygw"
}

build_minio() {
  rm -f go.mod go.sum
  q go mod init local/minio
  cat > tools.go <<'GO'
//go:build tools

package tools

import _ "github.com/minio/minio"
GO
  q go mod edit -require "github.com/minio/minio@$MINIO_VERSION"
  q go mod tidy
  q go build -trimpath -ldflags "-s -w" -o "$OUT/.minio.tmp" github.com/minio/minio
  mv "$OUT/.minio.tmp" "$OUT/minio"
}

# actionlint as its README installs it (`go install .../cmd/actionlint@<version>`), into its dir.
build_actionlint() {
  q env GOBIN="$OUT" go install -trimpath -ldflags "-s -w" "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
}

if [[ -z "$ONLY" ]]; then
  piece rclone "$RCLONE_DIR" have_rclone build_rclone
  piece versitygw "$VERSITYGW_DIR" have_versitygw build_versitygw
  piece minio "$MINIO_DIR" have_minio build_minio
fi
piece actionlint "$ACTIONLINT_DIR" have_actionlint build_actionlint
link
