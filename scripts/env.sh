# shellcheck shell=bash
# Put the project's tools into this (bash) shell, from any directory:
#
#   source scripts/env.sh
#
# - the toolchain's bin on PATH: pulumi, kubectl, kwokctl (and its PULUMI_HOME with the
#   pulumi-kubernetes plugin);
# - the project's .venv/bin first on PATH: python, pytest, ruff;
# - the offline Pulumi settings scripts/up-local.sh uses: the file backend in .pulumi-state,
#   the local stacks' passphrase, no update checks or plugin downloads;
# - KUBECONFIG of the simulated cluster (for another cluster, export your own afterwards).
#
# It builds nothing and starts nothing: `bash scripts/up-local.sh` does both, once.
if [ -z "${BASH_VERSION:-}" ]; then
  echo "scripts/env.sh: needs bash (run \`bash\`, then \`source scripts/env.sh\`)" >&2
  return 2 2>/dev/null || exit 2
fi
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  echo "scripts/env.sh: source it, do not run it: source ${BASH_SOURCE[0]}" >&2
  exit 2
fi

# lib.sh turns on errexit/nounset/pipefail for the scripts; an interactive shell keeps its own.
__llm_serving_opts="$(set +o)"
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
eval "$__llm_serving_opts"
unset __llm_serving_opts

if [ ! -x "$VENV/bin/python" ]; then
  log "no $VENV yet: run \`bash scripts/up-local.sh\` once (it creates it and builds the toolchain)"
fi
if ! toolchain_env; then
  log "toolchain not built yet ($TOOLCHAIN_DIR): run \`bash scripts/up-local.sh\` once"
fi
pulumi_env
cluster_kubeconfig

if command -v kubectl >/dev/null && [ -f "$KUBECONFIG" ] \
    && kubectl --request-timeout=3s get --raw=/readyz >/dev/null 2>&1; then
  log "simulated cluster running; KUBECONFIG=$KUBECONFIG"
else
  log "simulated cluster not running: \`bash scripts/cluster/cluster.sh start\` (KUBECONFIG=$KUBECONFIG)"
fi
log "pulumi: $(command -v pulumi || echo missing), python: $(command -v python), state: $LLM_SERVING_STATE_DIR"
log "run pulumi from $REPO (e.g. \`pulumi up -s local\`)"
