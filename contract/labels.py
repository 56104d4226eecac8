"""Label keys and API names the compilers write and the providers read, so the two cannot drift
apart. Pure constants, no imports: the pickled providers import this module."""

from __future__ import annotations

# --- labels ---------------------------------------------------------------------------------
COMPONENT_LABEL = "app.kubernetes.io/component"
DOMAIN = "llm-serving.dev"
MODEL_LABEL = f"{DOMAIN}/model"
ENGINE_LABEL = f"{DOMAIN}/engine"

# Values of COMPONENT_LABEL on a model's pods: what the status projection tells apart.
SERVER_COMPONENT = "server"

# --- the k8s-nim-operator's API (apps.nvidia.com/v1alpha1, k8s-nim-operator api/apps/v1alpha1) --
NIM_GROUP = "apps.nvidia.com"
NIM_VERSION = "v1alpha1"
NIM_CACHE_PLURAL, NIM_SERVICE_PLURAL = "nimcaches", "nimservices"
# What the operator path needs on the cluster; a vLLM-only (or raw-path) stack needs neither.
NIM_CRD_NAMES = (f"{NIM_CACHE_PLURAL}.{NIM_GROUP}", f"{NIM_SERVICE_PLURAL}.{NIM_GROUP}")
# The operator selects the pods of a NIMService by this label (value: the NIMService's name).
NIM_POD_SELECTOR_LABEL = "app"
