#!/usr/bin/env bash
# Command 2: every test, tier by tier, cheapest first (tests/tiers.py says which test is in which):
#
#   bash scripts/test.sh              ruff, import contracts, config reference; then the tiers
#                                     unit -> servers -> cluster -> engine, each only after the one
#                                     before passed, each built for just before it runs
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

checks() {
  cd "$REPO"
  "$VENV/bin/python" scripts/gen_config_reference.py --check
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

setup_for() {  # what a tier needs beyond the venv
  case "$1" in
    servers) setup_toolchain; setup_testtools; wait_stargate; wait_client_venvs ;;
    cluster) setup_toolchain; setup_testtools; wait_stargate; wait_client_venvs; start_cluster; pulumi_env ;;
    # The whole-path tests put the real router, pylon and gateway in front of vLLM.
    engine) setup_testtools; wait_engine_kits; wait_stargate ;;
  esac
}

# The cluster tier in two passes: the isolated modules side by side, then the cluster-wide ones
# (tests/tiers.py CLUSTER_WIDE_MODULES: CRDs installed, GPUs counted) one after the other.
run_cluster_tier() {
  run_tier "cluster and not cluster_wide" "${CLUSTER_WORKERS[@]}"
  run_tier "cluster and cluster_wide"
}

setup_python
case "$mode" in
  fast)
    # The compile tests check renders against the operators' real CRD schemas (LWS, KEDA,
    # prometheus-operator, cert-manager): --crds-only takes them from the Go module cache, or
    # downloads the four modules (3 s here; no build, no toolchain).
    bash "$REPO/scripts/toolchain/operators.sh" --crds-only
    checks
    run_tier unit
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
    if [ "$tier" = cluster ]; then run_cluster_tier; else run_tier "$tier"; fi
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
    checks
    run_tier unit
    setup_for servers
    run_tier servers
    setup_for cluster
    run_cluster_tier
    setup_for engine
    run_tier engine
    ;;
esac
