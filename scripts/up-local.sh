#!/usr/bin/env bash
# Command 1: set everything up and run the main job — `pulumi up` of the `local` stack on the
# simulated GPU cluster — then print the stack outputs. Idempotent: run it again at will.
source "$(dirname "$0")/lib.sh"

setup_python
setup_toolchain
# The cluster of the main job has the real node (scripts/node/; docs/01-local-cluster.md) beside
# the fake GPU nodes; LLM_SERVING_REAL_NODE=0 leaves it out.
LLM_SERVING_REAL_NODE="${LLM_SERVING_REAL_NODE:-1}" start_cluster
pulumi_env
cd "$REPO"
log "validating the local stack"
"$VENV/bin/python" -m components validate --stack local
pulumi stack select --create local --non-interactive >/dev/null
log "pulumi up -s local"
pulumi up --yes --skip-preview --non-interactive -s local
pulumi stack output -s local --json
log "what the router forwards to (python -m components targets --stack local)"
"$VENV/bin/python" -m components targets --stack local
log "next, in your shell: \`source scripts/env.sh\` (pulumi, kubectl, python and this cluster's KUBECONFIG), then see README.md"
