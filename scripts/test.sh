#!/usr/bin/env bash
# Command 2: every test, tier by tier, cheapest first (tests/tiers.py says which test is in which):
#
#   bash scripts/test.sh              ruff, import contracts, config reference; then the tiers
#                                     unit -> servers -> cluster -> engine, cluster and engine only
#                                     after unit and servers passed, each built for just before it
#                                     runs (servers beside unit, its output after unit's, stopped
#                                     when unit fails; cluster and engine side by side after them;
#                                     LLM_SERVING_ENGINE_BESIDE_CLUSTER=0: one after the other)
#   bash scripts/test.sh --fast       the checks and the unit tier only: needs the venv and the
#                                     operators' CRD files (downloaded, not built): no toolchain,
#                                     no cluster, no server; about 3 min here
#   bash scripts/test.sh --tier T     the checks, then tier T alone (with what T needs set up)
#   bash scripts/test.sh ARGS...      everything set up, then `pytest ARGS` as given
#                                     (e.g. `bash scripts/test.sh tests/config -q`)
#
# Every tier prints its slowest tests and its time per test folder (also written to
# .test-durations/<tier>.txt). The toolchain and the test tools are built when missing, never
# skipped; the downloads (the PyPI venvs, the vLLM engine kits) and the Stargate build start first,
# in the background, so on a cold machine they overlap the Go builds.
source "$(dirname "$0")/lib.sh"

mode=all tier=""
case "${1:-}" in
  --fast) mode=fast; shift ;;
  --tier) mode=tier; tier="${2:?--tier needs one of unit, servers, cluster, engine}"; shift 2 ;;
esac
if [ "$mode" != all ] && [ $# -gt 0 ]; then
  log "--fast and --tier take no pytest arguments (got: $*); run \`bash scripts/test.sh ARGS\` for those"
  exit 2
fi
if [ "$mode" = all ] && [ $# -gt 0 ]; then mode=args; fi

# Durations on every run: the slowest tests, then the per-folder table (tests/durations.py).
DURATIONS=(--durations=25 --durations-min=1.0)
# The cluster tier runs its modules side by side: they wait on the cluster, not the CPU. The
# scheduler keeps each module on one worker and the modules that touch cluster-wide objects on one
# worker together (tests/support/xdist_groups.py).
CLUSTER_WORKERS=(-p tests.support.xdist_groups -n "${LLM_SERVING_CLUSTER_WORKERS:-3}")
# The unit tier is CPU-bound: two workers on two cores (each collects the tier once, ~20 s of
# CPU); more would only queue. The servers tier waits on its servers' subprocesses: three workers
# (LLM_SERVING_SERVERS_WORKERS), each test file on one worker (--dist loadfile: a module's servers
# start once); proven by whole fresh-clone runs on 2026-12-03 (docs/10-benchmarks.md). `0` in
# either variable runs the tier in one process.
UNIT_WORKERS=(-n "${LLM_SERVING_UNIT_WORKERS:-2}")
SERVERS_WORKERS=(-n "${LLM_SERVING_SERVERS_WORKERS:-3}" --dist loadfile)

checks() {
  cd "$REPO"
  "$VENV/bin/python" scripts/gen_config_reference.py --check
  # The library's typed arguments are generated from the same model (llm_serving/sections.py).
  "$VENV/bin/python" scripts/gen_library_types.py --check
  # The linter (config: ruff.toml) before any test: a finding fails the run like a failed test.
  "$VENV/bin/ruff" check .
  # The layers (config: .importlinter): providers and the contract never import the app, config
  # sections never import the aggregate. A broken contract fails the run like a failed test.
  "$VENV/bin/lint-imports" --no-cache
}

# One tier (a marker expression): pytest -m <tier>. Its own exit status; 5 (nothing collected) is a failure: every tier
# has tests, so an empty one means the markers broke.
run_tier() {
  local name="$1"; shift
  local status=0
  log "tier $name"
  (cd "$REPO" && "$VENV/bin/python" -m pytest -m "$name" "${DURATIONS[@]}" "$@") || status=$?
  if [ "$status" != 0 ]; then
    log "tier $name failed (pytest exit $status): later tiers not run"
  fi
  return "$status"
}

# The unit tier collects the whole suite: in a whole run it writes which files hold each tier's
# tests (tests/tiers.py write_tier_files), and the later tiers collect only those. Only a file
# this run wrote is read (removed first), so a test added since an earlier run is never left out.
TIER_FILES="$REPO/.test-durations/tier-files.json"
tier_paths() {  # the tier's files, one word each; nothing (the whole suite) unless this run wrote them
  if [ "${LLM_SERVING_TIER_PATHS:-0}" = 1 ]; then
    (cd "$REPO" && "$VENV/bin/python" -m tests.tiers files "$1" "$TIER_FILES")
  fi
}

kill_tree() {  # a background job and everything it started (its servers, pytest's workers)
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

ensure_nginx() { bash "$REPO/scripts/gateway/ensure-nginx-shipped.sh" >/dev/null; }

setup_for() {  # what a tier needs beyond the venv
  case "$1" in
    # nginx + njs fetched before the workers start (each would fetch it into the same cache).
    # In a whole run, the real node's pieces (scripts/node/build.sh, needs the toolchain) build in
    # the background from here: the real-node group's cluster waits for them (build.sh's lock).
    servers) setup_toolchain
             if [ "$mode" = all ]; then start_real_node_build; fi
             setup_testtools; wait_stargate; wait_client_venvs; ensure_nginx ;;
    # The default cluster never takes the real node here; one that scripts/up-local.sh left on it
    # is stopped, for the real-node group's cluster (the default cluster is the test command's
    # own; up-local starts the node again).
    cluster) setup_toolchain; setup_testtools; wait_stargate; wait_client_venvs
             LLM_SERVING_REAL_NODE=0 start_cluster
             bash "$REPO/scripts/cluster/cluster.sh" stop-real-node
             pulumi_env ;;
    # The whole-path tests put the real router, pylon and gateway in front of vLLM.
    engine) setup_testtools; wait_engine_kits; wait_stargate ;;
  esac
}

# The cluster tier side by side, on clusters of their own: the isolated modules on the default
# cluster (CLUSTER_WORKERS at a time), and each group of cluster-wide modules (tests/tiers.py
# CLUSTER_WIDE_GROUPS: CRDs installed, GPUs counted) in a pytest of its own on its own cluster,
# <default>-<group> (scripts/cluster/cluster.sh; started here, beside the isolated pass), its
# modules one after the other. LLM_SERVING_CLUSTER names the default cluster (llm-serving), so a
# run can keep off a cluster another run uses. The default since 2026-12-03 (whole runs passed
# side by side; kwokctl creates are serialized by cluster.sh so two clusters never pick one port);
# LLM_SERVING_CLUSTER_GROUPS=0: the tier on the default cluster alone, the cluster-wide modules
# after the others, one after the other. Each group's output is shown whole when it ends; the
# tier fails if any pass failed.
CLUSTER_BASE="${LLM_SERVING_CLUSTER:-llm-serving}"
# The real node (scripts/node/) is one per machine: only the group named here gets it, on its own
# cluster (tests/tiers.py CLUSTER_WIDE_GROUPS); the default cluster and the other groups run
# without it, as before (setup_for cluster).
REAL_NODE_GROUP=realnode
run_cluster_tier() {
  local logs group files status=0 pid
  if [ "${LLM_SERVING_CLUSTER_GROUPS:-1}" = 0 ]; then
    # One cluster only: the isolated modules side by side, then the cluster-wide ones alone (the
    # real-node module starts a cluster of its own, <default>-realnode, and stops it).
    # shellcheck disable=SC2046 # one word per file
    run_tier "cluster and not cluster_wide" "${CLUSTER_WORKERS[@]}" $(tier_paths cluster)
    # shellcheck disable=SC2046 # one word per file
    run_tier "cluster and cluster_wide" $(tier_paths cluster)
    return
  fi
  local -a groups=() pids=()
  logs="$(mktemp -d)"
  while read -r group files; do
    groups+=("$group")
    # shellcheck disable=SC2086 # $files: the group's test files, one word each
    (
      export LLM_SERVING_CLUSTER="$CLUSTER_BASE-$group"
      # The default cluster's own overrides (a kubeconfig path, LWS ports) are not this one's.
      unset LLM_SERVING_KUBECONFIG LLM_SERVING_LWS_WEBHOOK_PORT LLM_SERVING_LWS_HEALTH_PORT
      if [ "$group" = "$REAL_NODE_GROUP" ]; then export LLM_SERVING_REAL_NODE=1; else export LLM_SERVING_REAL_NODE=0; fi
      bash "$REPO/scripts/cluster/cluster.sh" start
      KUBECONFIG="$(bash "$REPO/scripts/cluster/cluster.sh" kubeconfig)"
      export KUBECONFIG LLM_SERVING_DURATIONS_NAME="cluster_wide_$group"
      run_tier "cluster and cluster_wide" $files
    ) >"$logs/$group.log" 2>&1 &
    pids+=($!)
  done < <(cd "$REPO" && "$VENV/bin/python" -m tests.tiers cluster-groups)
  # shellcheck disable=SC2046 # one word per file
  run_tier "cluster and not cluster_wide" "${CLUSTER_WORKERS[@]}" $(tier_paths cluster) || status=$?
  for i in "${!groups[@]}"; do
    pid="${pids[$i]}"
    if wait "$pid"; then
      log "cluster-wide group ${groups[$i]} (cluster $CLUSTER_BASE-${groups[$i]}) passed:"
    else
      status=1
      log "cluster-wide group ${groups[$i]} (cluster $CLUSTER_BASE-${groups[$i]}) failed:"
    fi
    cat "$logs/${groups[$i]}.log"
  done
  rm -rf "$logs"
  if [ "$status" != 0 ]; then log "tier cluster failed: later tiers not run"; fi
  return "$status"
}

setup_python
case "$mode" in
  fast)
    # The compile tests check renders against the operators' real CRD schemas (LWS, KEDA,
    # prometheus-operator, cert-manager): --crds-only takes them from the Go module cache, or
    # downloads the four modules (3 s here; no build, no toolchain).
    bash "$REPO/scripts/toolchain/operators.sh" --crds-only
    checks
    run_tier unit "${UNIT_WORKERS[@]}"
    ;;
  tier)
    case "$tier" in unit|servers|cluster|engine) ;; *) log "--tier: one of unit, servers, cluster, engine"; exit 2 ;; esac
    case "$tier" in
      servers|cluster) start_client_venvs; start_stargate ;;
      engine) start_engine_kits; start_stargate ;;
      unit) bash "$REPO/scripts/toolchain/operators.sh" --crds-only ;;
    esac
    checks
    setup_for "$tier"
    case "$tier" in
      cluster) run_cluster_tier ;;
      unit) run_tier unit "${UNIT_WORKERS[@]}" ;;
      servers) run_tier servers "${SERVERS_WORKERS[@]}" ;;
      *) run_tier "$tier" ;;
    esac
    ;;
  args)
    start_client_venvs; start_engine_kits; start_stargate
    setup_for cluster
    wait_engine_kits
    checks
    set +e
    (cd "$REPO" && "$VENV/bin/python" -m pytest "$@")
    status=$?
    set -e
    # pytest exits 5 when it collected nothing: that is a failure here, not a pass.
    exit "$status"
    ;;
  all)
    start_client_venvs; start_engine_kits; start_stargate
    # The unit tier runs before the toolchain is built (it needs none of it), but its compile
    # tests read the operators' CRD schemas: on a cold machine they come first (seen: 7
    # collection errors on an empty cache; warm, this is a no-op).
    bash "$REPO/scripts/toolchain/operators.sh" --crds-only
    checks
    mkdir -p "$REPO/.test-durations"
    rm -f "$TIER_FILES"
    # The unit tier (CPU) and, beside it, the servers tier's set-up and then the servers tier
    # (which mostly waits on its servers), once the unit tier's collection has written the tier
    # files. The unit tier's output comes as it runs; the servers tier's is held and shown after
    # it. A failed unit tier stops the servers tier and the run at once, as before; neither tier
    # is reported passed before the other has ended.
    LLM_SERVING_TIER_FILES="$TIER_FILES" run_tier unit "${UNIT_WORKERS[@]}" &
    unit_pid=$!
    export LLM_SERVING_TIER_PATHS=1  # written by this run's unit tier: the later tiers read it
    servers_log="$(mktemp)"
    (
      setup_for servers
      while [ ! -f "$TIER_FILES" ] && kill -0 "$unit_pid" 2>/dev/null; do sleep 1; done
      # shellcheck disable=SC2046 # one word per file
      run_tier servers "${SERVERS_WORKERS[@]}" $(tier_paths servers)
    ) >"$servers_log" 2>&1 &
    servers_pid=$!
    unit_status=0
    wait "$unit_pid" || unit_status=$?
    if [ "$unit_status" != 0 ]; then
      kill_tree "$servers_pid"
      wait "$servers_pid" 2>/dev/null || true
      rm -f "$servers_log"
      exit 1
    fi
    servers_status=0
    wait "$servers_pid" || servers_status=$?
    cat "$servers_log"
    rm -f "$servers_log"
    if [ "$servers_status" != 0 ]; then exit 1; fi
    setup_for cluster
    setup_for engine
    if [ "${LLM_SERVING_ENGINE_BESIDE_CLUSTER:-1}" = 1 ]; then
      # The engine tier beside the cluster tier (both only after servers passed): the cluster
      # tests mostly wait on the simulated cluster. Its output is shown whole when it ends.
      engine_log="$(mktemp)"
      # shellcheck disable=SC2046 # one word per file
      run_tier engine $(tier_paths engine) >"$engine_log" 2>&1 &
      engine_pid=$!
      status=0
      run_cluster_tier || status=$?
      engine_status=0
      wait "$engine_pid" || engine_status=$?
      cat "$engine_log"
      rm -f "$engine_log"
      if [ "$engine_status" != 0 ]; then log "tier engine failed (exit $engine_status)"; fi
      if [ "$status" != 0 ] || [ "$engine_status" != 0 ]; then exit 1; fi
    else
      run_cluster_tier
      # shellcheck disable=SC2046 # one word per file
      run_tier engine $(tier_paths engine)
    fi
    ;;
esac
