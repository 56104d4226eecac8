#!/usr/bin/env bash
# Command 1: set everything up and run the main job — `pulumi up` of the `local` stack: a CPU
# model in real pods on the cluster's real node (beside the simulated GPU nodes), behind the
# request router, its pylon and the gateway — then print a chat completion from the real vLLM
# engine, fetched through the gateway. Idempotent: run it again at will.
#
# LLM_SERVING_CLUSTER names the cluster (default llm-serving; scripts/cluster/cluster.sh), which
# gets the real node: one per machine, so another cluster's real node must be stopped first.
source "$(dirname "$0")/lib.sh"

NODE_SOCKET=/run/llm-serving-node/containerd.sock  # scripts/node/real-node.sh SOCK
VLLM_LINE=0.32                                     # the vLLM CPU image's line (scripts/images/build.py)
STACK_FILE="$REPO/stacks/Pulumi.local.yaml"

# A `pulumi` already on PATH runs the stack if it is at least the Python SDK's version (an older
# CLI may not speak its protocol); else the one the toolchain builds. Either way with the
# toolchain's PULUMI_HOME, which holds the kubernetes provider plugin the stack pins.
user_pulumi="$(command -v pulumi || true)"
setup_python
setup_toolchain
PULUMI=pulumi
sdk_version="$(sed -n 's/^pulumi==//p' "$REPO/requirements.txt")"
if [[ -n $user_pulumi && $user_pulumi != "$TOOLCHAIN_BIN/pulumi" ]]; then
  user_version="$("$user_pulumi" version 2>/dev/null | sed 's/^v//')" || user_version=""
  if [[ -n $user_version && "$(printf '%s\n%s\n' "$sdk_version" "$user_version" | sort -V | head -1)" == "$sdk_version" ]]; then
    PULUMI="$user_pulumi"
    log "using $user_pulumi ($user_version) for the stack"
  else
    log "not using $user_pulumi (${user_version:-its version unknown}, older than the SDK's $sdk_version): the toolchain's pulumi"
  fi
fi
# The stack's pods run on the real node (scripts/node/; docs/01-local-cluster.md).
LLM_SERVING_REAL_NODE=1 start_cluster
pulumi_env
cd "$REPO"
log "validating the local stack"
"$VENV/bin/python" -m components validate --stack local

# Images: built here from what the package registries serve (cached by content; cold: the vLLM
# image takes ~8-13 min), imported into the real node's containerd once (docs/images.md). The
# router and pylon images need the Stargate sources beside the repository (../shared): a clone
# without them deploys the stack without its router.
left_out=""
status=0
python3 scripts/images/build.py build router pylon >/dev/null || status=$?
case $status in
  0) images=(vllm-cpu hf nginx busybox router pylon) ;;
  3) images=(vllm-cpu hf nginx busybox)
     left_out="the router, its pylon and the gateway (llm-serving:router): no Stargate sources beside the repository (../shared/vendor/stargate) to build the router and pylon images from" ;;
  *) log "building the router and pylon images failed (exit $status)"; exit 1 ;;
esac
log "images: ${images[*]} (build and import into the real node; warm: nothing to do)"
# One copy on disk: the node keeps the unpacked snapshot, the build cache the layer.
python3 scripts/images/build.py import --address "$NODE_SOCKET" --skip-present --discard-layers "${images[@]}"

# Weights: the model made on this machine (scripts/localmodel/tiny_model.py, with the vLLM
# line's own transformers), served by the Hub stand-in on the node's bridge, where the stack's
# hfEndpoint points; the rendered puller pulls it as it would from huggingface.co.
config_file="$STACK_FILE"
if [[ -n $left_out ]]; then
  config_file="$LLM_SERVING_STATE_DIR/up-local/Pulumi.local.yaml"
  "$VENV/bin/python" scripts/localmodel/local_stack.py without-router "$STACK_FILE" "$config_file"
fi
read -r -a hub < <("$VENV/bin/python" scripts/localmodel/local_stack.py hub "$config_file")
if (( ${#hub[@]} )); then
  log "the local model (cold: vLLM $VLLM_LINE's kit, a ~6.5 GB install from PyPI, and ~5 min to make it; then cached)"
  model_dir="$(python3 scripts/localmodel/tiny_model.py "$VLLM_LINE")"
  bash scripts/cluster/cluster.sh start-hub "$model_dir/model" "${hub[@]}"
fi

"$PULUMI" stack select --create local --non-interactive >/dev/null
log "pulumi up -s local"
pulumi_args=(--yes --skip-preview --non-interactive -s local)
[[ -n $left_out ]] && pulumi_args+=(--config-file "$config_file")
"$PULUMI" up "${pulumi_args[@]}"
outputs="$LLM_SERVING_STATE_DIR/up-local/outputs.json"
mkdir -p "$(dirname "$outputs")"
"$PULUMI" stack output -s local --json | tee "$outputs"
if [[ -z $left_out ]]; then
  log "what the router forwards to (python -m components targets --stack local)"
  "$VENV/bin/python" -m components targets --stack local
fi
log "a chat completion from the real engine"
"$VENV/bin/python" scripts/localmodel/local_stack.py ask "$outputs" "$KUBECONFIG"
if [[ -n $left_out ]]; then
  log "left out: $left_out; the answer above came from the model's own Service instead." \
      "$STACK_FILE is unchanged: with the sources at hand, the next run deploys them."
fi
log "next, in your shell: \`source scripts/env.sh\` (pulumi, kubectl, python and this cluster's KUBECONFIG), then see README.md"
