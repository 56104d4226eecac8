# shellcheck shell=bash
# Pinned versions of the binaries the weight-source tests run (sourced by build.sh and by the
# tests through `build.sh --print-dir`). Both are built from the Go module proxy.

# rclone: the object-store puller. The image the program renders is rclone's own public image at
# the same release (components/config/sources.py RCLONE_IMAGE); the tests run this very release.
RCLONE_VERSION=v1.76.0

# versitygw: the S3-compatible server the tests start on loopback (posix backend: a bucket is a
# directory). Chosen over MinIO: released semver tags on the module proxy (MinIO serves only
# pseudo-versions), a third of its requirements, 0.63x its cold compile; docs/weight-sources.md.
VERSITYGW_VERSION=v1.8.0

# MinIO: the second S3 server, for object versions only (source.versionAt). versitygw v1.8.0's
# posix backend keeps versions, but reports a noncurrent version's LastModified as the time it was
# superseded (it copies the file into its versioning dir and lists the copy's mtime), so "the
# bucket as it was at T" cannot be read from it; MinIO keeps each version's own time. The module
# proxy serves MinIO as pseudo-versions only (its last commit of the public repository).
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c

# actionlint: the linter the CI workflow example (docs/ci/) is checked by (tests/ci); its module
# is served by the proxy at its release tags; v1.7.12 is the newest served here (2026-12-02).
ACTIONLINT_VERSION=v1.7.12

# Bump one when its build recipe changes in a way that invalidates the binary already built.
RCLONE_RECIPE=2
VERSITYGW_RECIPE=1
MINIO_RECIPE=1
ACTIONLINT_RECIPE=1

TESTTOOLS_ROOT="${LLM_SERVING_TESTTOOLS_DIR:-$HOME/.cache/llm-serving-testtools}"
RCLONE_DIR="$TESTTOOLS_ROOT/rclone-${RCLONE_VERSION}-r${RCLONE_RECIPE}"
VERSITYGW_DIR="$TESTTOOLS_ROOT/versitygw-${VERSITYGW_VERSION}-r${VERSITYGW_RECIPE}"
MINIO_DIR="$TESTTOOLS_ROOT/minio-${MINIO_VERSION}-r${MINIO_RECIPE}"
ACTIONLINT_DIR="$TESTTOOLS_ROOT/actionlint-${ACTIONLINT_VERSION}-r${ACTIONLINT_RECIPE}"
# What the tests put on PATH: links to the binaries.
TESTTOOLS_DIR="$TESTTOOLS_ROOT/rclone-${RCLONE_VERSION}-r${RCLONE_RECIPE}-versitygw-${VERSITYGW_VERSION}-r${VERSITYGW_RECIPE}"

# The Run:ai model streamer that vLLM's `--load-format runai_streamer` uses (source.load: stream),
# in a Python venv of its own (tests/streamer). vLLM v0.11.0's `runai` extra asks for
# runai-model-streamer>=0.14.0 and its image installs it unpinned: 0.14.0 is that floor. The
# streamer imports torch: the version vLLM v0.11.0 pins (torch==2.8.0; PyPI's build, with its
# CUDA libraries, ~4 GB: no CPU-only torch is on PyPI for x86-64).
RUNAI_STREAMER_VERSION=0.14.0
STREAMER_TORCH_VERSION=2.8.0
# boto3 lists the prefix and copies the config files (the streamer's S3 package); unpinned there.
STREAMER_BOTO3_VERSION=1.44.8
STREAMER_RECIPE=1
STREAMER_DIR="$TESTTOOLS_ROOT/runai-streamer-${RUNAI_STREAMER_VERSION}-torch-${STREAMER_TORCH_VERSION}-r${STREAMER_RECIPE}"
