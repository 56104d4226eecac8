# shellcheck shell=bash
# Shared by scripts/up-local.sh, scripts/test.sh and scripts/env.sh: Python env, toolchain,
# offline Pulumi env.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
# A fixed passphrase for the local file backend only: the local and test stacks hold no real
# secret. Real stacks set PULUMI_CONFIG_PASSPHRASE (or a cloud secrets provider) themselves.
export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE-llm-serving-local}"
export LLM_SERVING_STATE_DIR="${LLM_SERVING_STATE_DIR:-$REPO/.pulumi-state}"

log() { printf '[llm-serving] %s\n' "$*" >&2; }

setup_python() {
  local stamp="$VENV/.requirements.sha256" want
  want="$(cat "$REPO/requirements.txt" "$REPO/requirements-dev.txt" "$REPO/policies/requirements.txt" 2>/dev/null | sha256sum | cut -d' ' -f1)"
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating virtualenv $VENV"
    python3 -m venv "$VENV"
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing Python dependencies (pinned)"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REPO/requirements-dev.txt"
    echo "$want" > "$stamp"
  fi
}

# The built toolchain (pulumi, kubectl, kwokctl, ...) on PATH with its PULUMI_HOME; returns 1
# when it is not built yet (scripts/toolchain/bootstrap.sh builds it).
toolchain_env() {
  # shellcheck source=toolchain/versions.sh
  source "$REPO/scripts/toolchain/versions.sh"
  [ -f "$TOOLCHAIN_ENV" ] || return 1
  # shellcheck disable=SC1090
  source "$TOOLCHAIN_ENV"
  # The LWS controller and the operators' CRDs (scripts/toolchain/operators.sh), when built.
  # shellcheck disable=SC1090
  if [ -f "$OPERATORS_ENV" ]; then source "$OPERATORS_ENV"; fi
}

setup_toolchain() {
  bash "$REPO/scripts/toolchain/bootstrap.sh"
  # The LWS controller and the operators' CRDs: a cache of their own, after the toolchain.
  bash "$REPO/scripts/toolchain/operators.sh"
  toolchain_env
}

# The tests' two PyPI virtualenvs (the Hub client of the vLLM image's line, the Run:ai streamer
# with torch: ~4 GB on a cold machine) wait on the network, the toolchain and test-tool builds on
# the CPU: started first, in the background, they overlap on a cold machine (warm: both instant).
# Each logs to its own file; wait_client_venvs fails the run, showing the log, if either failed.
# A background job any later subshell can wait for: bash's `wait` knows only the shell's own
# children, and the servers tier's set-up runs in a subshell beside the unit tier (test.sh). The
# job writes its exit status next to its log (<log>.status); bg_wait polls for it, and shows the
# log once per run (<log>.shown), whichever shell waits first.
bg_start() {  # bg_start LOG COMMAND...: the command's output to LOG
  local log_file="$1"; shift
  ( set +e; "$@" >"$log_file" 2>&1; echo "$?" >"$log_file.status.tmp"; mv "$log_file.status.tmp" "$log_file.status" ) &
}

bg_wait() {  # bg_wait LOG: the job's exit status, after showing its log (once)
  local log_file="$1"
  while [ ! -f "$log_file.status" ]; do sleep 1; done
  if [ ! -f "$log_file.shown" ]; then
    : >"$log_file.shown"
    cat "$log_file" >&2
  fi
  return "$(cat "$log_file.status")"
}

start_client_venvs() {
  CLIENT_VENV_LOGS="$(mktemp -d)"
  bg_start "$CLIENT_VENV_LOGS/hub-client.log" bash "$REPO/scripts/testtools/hub-client.sh"
  bg_start "$CLIENT_VENV_LOGS/streamer.log" bash "$REPO/scripts/testtools/streamer.sh"
}

# One background install: its log either way, and a failure said after it.
wait_client_venv() {
  local name="$1"
  bg_wait "$CLIENT_VENV_LOGS/$name.log" || { log "scripts/testtools/$name.sh failed (its log above)"; return 1; }
}

wait_client_venvs() {
  # A tier that needs them waits; the next tier finds them done.
  local failed=0
  wait_client_venv hub-client || failed=1
  wait_client_venv streamer || failed=1
  return "$failed"
}

# The real Stargate binaries of the conformance suite (tests/conformance), built from
# ../shared/vendor/stargate when missing (cached under ~/.cache/llm-serving-stargate; ~7-15 min of
# 2 cores cold): cargo, started in the background beside the Go toolchain build so that the two
# overlap on a cold machine. A build failure stops the run at wait_stargate; without the sources
# the kit says so and the suite skips.
build_stargate() { cd "$REPO" && PYTHONPATH="$REPO" "$VENV/bin/python" testkit/stargate.py; }

start_stargate() {
  STARGATE_LOG="$(mktemp)"
  bg_start "$STARGATE_LOG" build_stargate
}

wait_stargate() {
  local status=0
  bg_wait "$STARGATE_LOG" || status=$?
  if [ "$status" != 0 ]; then log "building the Stargate binaries failed (exit $status)"; return 1; fi
}

# The real node's pieces (docs/01-local-cluster.md#the-real-node), built once; its only user
# waits for it through build.sh's lock, so nothing waits on this job.
start_real_node_build() {
  bg_start "$(mktemp)" bash "$REPO/scripts/node/build.sh"
}

setup_testtools() {
  # rclone and the S3-compatible servers for the weight-source tests (tests/puller), built from
  # the Go module proxy when missing (cached like the toolchain; warm run = instant).
  bash "$REPO/scripts/testtools/build.sh"
}

pulumi_env() {
  mkdir -p "$LLM_SERVING_STATE_DIR"
  export PULUMI_BACKEND_URL="file://$LLM_SERVING_STATE_DIR"
  export PULUMI_SKIP_UPDATE_CHECK=true
  export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=true
  export PULUMI_SKIP_CONFIRMATIONS=true
  export PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK=true
  export PATH="$VENV/bin:$PATH"
}

# The simulated cluster's kubeconfig (whether or not the cluster runs).
cluster_kubeconfig() {
  KUBECONFIG="$(bash "$REPO/scripts/cluster/cluster.sh" kubeconfig)"
  export KUBECONFIG
}

start_cluster() {
  bash "$REPO/scripts/cluster/cluster.sh" start
  cluster_kubeconfig
}

# --- The engine kit (tests/engine): the real vLLM for CPU, one venv per release line ---------------
# (scripts/testtools/vllm-kit.sh; cold ~8 GB for 0.11 + ~6.5 GB for 0.32 from PyPI, ~3.5 min each
# here; warm instant). Started in the background beside the client venvs, the lines one after the
# other (two pip installs at once would only share the same network and disk). wait_engine_kits
# fails the run when an install failed; when PyPI cannot be reached (the script's exit 3) it says
# so and lets the run go on: the engine tests then skip, saying why.
build_engine_kits() {
  local line
  for line in $(bash "$REPO/scripts/testtools/vllm-kit.sh" --lines); do
    bash "$REPO/scripts/testtools/vllm-kit.sh" "$line" || return $?
  done
}

start_engine_kits() {
  ENGINE_KIT_LOG="$(mktemp)"
  bg_start "$ENGINE_KIT_LOG" build_engine_kits
}

wait_engine_kits() {
  local status=0
  bg_wait "$ENGINE_KIT_LOG" || status=$?
  case "$status" in
    0) ;;
    3) log "engine kit: PyPI unreachable from this machine; the real-vLLM tests (tests/engine) will skip" ;;
    *) log "scripts/testtools/vllm-kit.sh failed (exit $status)"; return 1 ;;
  esac
}
