"""Strict schema validation of rendered manifests, as a check a test can be seen to make.

``kubernetes_validate.validate`` raises on an invalid object; wrapped here so the failure names the
object (kind/name) and the schema error, and so the hygiene test (tests/test_test_hygiene.py),
which does not look inside third-party calls, sees the check.
"""

from __future__ import annotations

import kubernetes_validate
import pytest

# The newest Kubernetes version the installed kubernetes-validate knows (its schemas are offline).
K8S_VERSION = kubernetes_validate.latest_version()


def assert_valid_kubernetes(manifest: dict) -> None:
    """Fail unless ``manifest`` is valid for ``K8S_VERSION`` with no unknown field (strict)."""
    try:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        meta = manifest.get("metadata", {})
        pytest.fail(f"{manifest.get('kind')}/{meta.get('name')} is not valid Kubernetes "
                    f"{K8S_VERSION}: {error}")
