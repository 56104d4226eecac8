#!/usr/bin/env bash
# The Hub client the puller tests and the bench run: the `hf` CLI of the huggingface_hub line in
# the pinned vLLM image (docker.io/vllm/vllm-openai:v0.11.0), with the hf_transfer and hf_xet
# packages that image installs, in a virtualenv of its own (the program's own venv keeps the
# huggingface_hub of requirements.txt for preflight). Cached outside the repo, keyed by the pins.
#
#   scripts/testtools/hub-client.sh              create it when missing (warm run = instant)
#   scripts/testtools/hub-client.sh --print-dir  print the dir holding bin/hf
#
# Why these pins (docs/weight-sources.md, `hf` section): vLLM v0.11.0 requires
# `huggingface-hub[hf_xet] >= 0.33.0` and `transformers >= 4.56.0, < 5` (so huggingface_hub < 1.0);
# its image was built when 0.35.3 was the newest 0.x release. The image's openai stage installs
# `hf_transfer` unpinned: 0.1.9 is its newest release. hf_xet: the newest 1.1.x of that time.
set -euo pipefail

HF_HUB_VERSION=0.35.3
HF_TRANSFER_VERSION=0.1.9
HF_XET_VERSION=1.1.10
# Bump when the recipe below changes in a way that invalidates a venv already built.
HUB_CLIENT_RECIPE=1

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ROOT="${LLM_SERVING_TESTTOOLS_DIR:-$HOME/.cache/llm-serving-testtools}"
DIR="$ROOT/hub-client-hfhub-${HF_HUB_VERSION}-hftransfer-${HF_TRANSFER_VERSION}-hfxet-${HF_XET_VERSION}-r${HUB_CLIENT_RECIPE}"

log() { echo "[testtools] $*" >&2; }

case "${1:-}" in
  --print-dir) echo "$DIR"; exit 0 ;;
  "") ;;
  *) echo "[testtools] ERROR: unknown argument: $1 (use --print-dir)" >&2; exit 2 ;;
esac

[[ -x "$DIR/bin/hf" && -f "$DIR/.complete" ]] && exit 0

PYTHON="${LLM_SERVING_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON="$(command -v python3)"
log "creating the Hub client venv (huggingface_hub $HF_HUB_VERSION + hf_transfer $HF_TRANSFER_VERSION)..."
t0=$(date +%s)
# A venv's scripts name its interpreter by absolute path, so it is built in place; the marker,
# written last, tells a finished venv from one an interrupted run left (rebuilt from scratch).
rm -rf "$DIR"
mkdir -p "$ROOT"
"$PYTHON" -m venv "$DIR"
"$DIR/bin/pip" install -q --disable-pip-version-check \
  "huggingface_hub==$HF_HUB_VERSION" "hf_transfer==$HF_TRANSFER_VERSION" "hf_xet==$HF_XET_VERSION"
"$DIR/bin/python" -c "import hf_transfer, hf_xet, huggingface_hub as h; assert h.__version__ == '$HF_HUB_VERSION', h.__version__"
touch "$DIR/.complete"
t1=$(date +%s)
log "created the Hub client venv in $((t1 - t0))s"
echo "$(date -u +%FT%TZ) cold-piece $(basename "$DIR") $((t1 - t0))s" >> "$ROOT/timings.log"
