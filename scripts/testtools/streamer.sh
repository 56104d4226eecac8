#!/usr/bin/env bash
# A Python venv with the Run:ai model streamer (and its S3 package) at the version of vLLM
# v0.11.0's floor, for tests/streamer: the library vLLM's `--load-format runai_streamer` loads
# the weights with, run against the loopback S3 server with the environment we render.
#
#   scripts/testtools/streamer.sh              install what is missing (idempotent; warm run = instant)
#   scripts/testtools/streamer.sh --print-dir  print the venv's dir (bin/python)
#
# Packages come from PyPI through pip, pinned (versions.sh and the list below). Cold: ~4 GB of
# downloads (torch with its CUDA libraries), a few minutes; cached outside the repo like the
# toolchain.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"

log() { echo "[testtools] $*"; }
die() { echo "[testtools] ERROR: $*" >&2; exit 1; }

case "${1:-}" in
  --print-dir) echo "$STREAMER_DIR"; exit 0 ;;
  "") ;;
  *) die "unknown argument: $1 (use --print-dir)" ;;
esac

[[ -x "$STREAMER_DIR/bin/python" && -f "$STREAMER_DIR/.complete" ]] && exit 0

PYTHON="${LLM_SERVING_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON="$(command -v python3)" || die "no python3 found"
mkdir -p "$TESTTOOLS_ROOT/logs"
LOG="$TESTTOOLS_ROOT/logs/streamer-$RUNAI_STREAMER_VERSION.log"
TMP_DIR="$STREAMER_DIR.tmp"
rm -rf "$TMP_DIR"
log "runai-model-streamer $RUNAI_STREAMER_VERSION + torch $STREAMER_TORCH_VERSION into $STREAMER_DIR (cold: ~4 GB from PyPI)"
start=$(date +%s)
"$PYTHON" -m venv "$TMP_DIR" >>"$LOG" 2>&1 || die "venv failed (log: $LOG)"
if ! nice -n 10 "$TMP_DIR/bin/python" -m pip install --disable-pip-version-check --no-input \
    "runai-model-streamer==$RUNAI_STREAMER_VERSION" "runai-model-streamer-s3==$RUNAI_STREAMER_VERSION" \
    "torch==$STREAMER_TORCH_VERSION" "boto3==$STREAMER_BOTO3_VERSION" >>"$LOG" 2>&1; then
  tail -n 30 "$LOG" >&2
  die "pip install failed (log: $LOG)"
fi
"$TMP_DIR/bin/python" -m pip freeze >"$TMP_DIR/freeze.txt"
touch "$TMP_DIR/.complete"
rm -rf "$STREAMER_DIR"
mv "$TMP_DIR" "$STREAMER_DIR"
# A venv records its own path in bin/ scripts; `python -m pip` and bin/python do not depend on it.
echo "$(date -u +%FT%TZ) streamer-$RUNAI_STREAMER_VERSION-torch-$STREAMER_TORCH_VERSION $(( $(date +%s) - start ))s" \
  >>"$TESTTOOLS_ROOT/timings.log"
log "streamer venv ready in $(( $(date +%s) - start ))s"
