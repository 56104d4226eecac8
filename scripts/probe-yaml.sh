#!/usr/bin/env bash
# Measure llm-serving from a Pulumi YAML program (issue 33, item 4; docs/library.md "Other
# languages, measured"): examples/yaml-program declares `llm-serving:index:TeamServing`, served by
# the Python component provider in examples/yaml-program/provider (the llm-serving wheel in its
# virtualenv). On the simulated cluster: `pulumi up` once as a YAML user would run it (it fails
# where the dynamic resources need Python), then with PULUMI_RUNTIME_VIRTUALENV naming the
# provider's virtualenv (it deploys), refresh and destroy. Not part of the test command: it builds
# the YAML language host (pulumi-language-yaml, from the Go module proxy, once).
source "$(dirname "$0")/lib.sh"

YAML_VERSION="v1.25.0"  # github.com/pulumi/pulumi-yaml, as served by the Go module proxy on 2026-12-03

setup_python
setup_toolchain
start_cluster
pulumi_env
yaml_bin="$(dirname "$TOOLCHAIN_ENV")/yaml-$YAML_VERSION"
if [ ! -x "$yaml_bin/pulumi-language-yaml" ]; then
  log "building pulumi-language-yaml $YAML_VERSION (once; ~2 min with the toolchain's module cache)"
  # The toolchain's Go caches (scripts/toolchain/bootstrap.sh): most modules are there already.
  GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -modcacherw" GOMODCACHE="${LLM_SERVING_GOMODCACHE:-$TOOLCHAIN_ROOT/go/mod}" \
    GOCACHE="${LLM_SERVING_GOCACHE:-$TOOLCHAIN_ROOT/go/cache}" GOBIN="$yaml_bin" \
    go install "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml@$YAML_VERSION"
fi
export PATH="$yaml_bin:$PATH"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp -r "$REPO/examples/yaml-program" "$work/program"
(cd "$REPO" && "$VENV/bin/python" -c "
from pathlib import Path
from tests.support.wheel import build_wheel, venv_with
venv_with(build_wheel(Path('$work/wheel')), Path('$work/program/provider/venv'))")
export PULUMI_BACKEND_URL="file://$work/state" PULUMI_CONFIG_PASSPHRASE=probe
mkdir -p "$work/state"
cd "$work/program"
stack="probe$RANDOM"
pulumi stack init "$stack" --non-interactive >/dev/null
pulumi config set namespace "yaml-$stack" -s "$stack"

log "1. pulumi up, as a YAML program runs it"
if pulumi up --yes --skip-preview --non-interactive -s "$stack" >"$work/plain.log" 2>&1; then
  log "   deployed (the dynamic resources found Python on their own)"
else
  log "   failed, where:"; grep -m3 -E "No module named|could not read plugin" "$work/plain.log" >&2 || tail -20 "$work/plain.log" >&2
fi
log "2. pulumi up with PULUMI_RUNTIME_VIRTUALENV=<the provider's virtualenv>"
export PULUMI_RUNTIME_VIRTUALENV="$work/program/provider/venv"
start=$(date +%s)
pulumi up --yes --skip-preview --non-interactive -s "$stack" >"$work/up.log" 2>&1 || { tail -40 "$work/up.log" >&2; exit 1; }
log "   deployed in $(( $(date +%s) - start )) s; outputs:"
pulumi stack output --json -s "$stack" >&2
pulumi refresh --yes --non-interactive -s "$stack" >/dev/null && log "3. refresh: ok"
pulumi destroy --yes --non-interactive -s "$stack" >/dev/null && log "4. destroy: ok"
