"""Logical names of the children each component declares: the one place that defines them.

A child's logical name is ``f"{parent}-{role}"``; a model's weights children (SOURCE_NAMED_ROLES)
add their source's hash, ``f"{parent}-{role}-{hash}"`` (compile/plan.py weights_names), aliased to
the name without it. Pulumi keys state by these names, so changing
one strands a deployed stack (a delete and a create, not an update); the preview report reads
the same constants to classify what a preview shows. Pure: no Pulumi import.
"""

from __future__ import annotations

# --- a model's children (VllmModel, NimModel) ---------------------------------------------
WEIGHTS = "weights"
PULLER = "puller"
WEIGHTS_GATE = "weights-gate"  # also the gate's object name in the cluster
NETWORK_POLICY = "network-policy"
PULLER_NETWORK_POLICY = "puller-network-policy"
SERVER = "server"
SERVICE = "service"
STATUS = "status"
NIM_OPERATOR_CHECK = "nim-operator-check"
NIM_CACHE = "nim-cache"
NIM_SERVICE = "nim-service"
SERVER_PDB = "pdb"  # the server's PodDisruptionBudget (both paths; models that may run several pods)
# Other operators' CRDs the model's settings need (autoscaling: KEDA), checked at preview.
CRD_CHECK = "crd-check"
SCALED_OBJECT = "scaled-object"  # autoscaling: the KEDA ScaledObject scaling the server
SERVICE_MONITOR = "service-monitor"  # platform.metrics: the raw path's ServiceMonitor
# models[].next: the next revision's children are the raw path's roles with this prefix
# (`<model>-next-server`...): its objects are `<model>-next...`.
NEXT_ROLE_PREFIX = "next-"

# --- the router's children (RequestRouter) -------------------------------------------------
ROUTER_CRD_CHECK = "crd-check"
ROUTER_WORKLOAD_KIND = "workload-kind"
ROUTER_TARGETS = "targets"
ROUTER_WORKLOAD = "workload"
ROUTER_SERVICE = "service"
ROUTER_PDB = "pdb"
ROUTER_HEADLESS_SERVICE = "headless-service"
ROUTER_ISSUER = "issuer"
ROUTER_CERTIFICATE = "certificate"
ROUTER_SERVICE_ACCOUNT = "service-account"
ROUTER_ROLE = "role"
ROUTER_ROLE_BINDING = "role-binding"
ROUTER_SERVICE_MONITOR = "service-monitor"
ROUTER_NETWORK_POLICY = "network-policy"
ROUTER_LB_CONFIG = "lb-config"  # router.loadBalancer: the --lb-config-path ConfigMap
BACKEND_NETWORK_POLICY = "backend-network-policy"
BACKEND_SERVICE_ACCOUNT = "backend-service-account"
BACKEND_ROLE = "backend-role"
BACKEND_ROLE_BINDING = "backend-role-binding"
BACKEND = "backend"
BACKEND_SERVICE = "backend-service"
BACKEND_PDB = "backend-pdb"
BACKEND_SERVICE_MONITOR = "backend-service-monitor"
# The gateway (router.gateway): the OpenAI front door, a child of the router component.
GATEWAY = "gateway"
GATEWAY_CONFIG = "gateway-config"
GATEWAY_SERVICE = "gateway-service"
GATEWAY_PDB = "gateway-pdb"
GATEWAY_NETWORK_POLICY = "gateway-network-policy"
GATEWAY_LIMITER = "gateway-limiter"
GATEWAY_METRICS_SERVICE = "gateway-metrics-service"
GATEWAY_SERVICE_MONITOR = "gateway-service-monitor"
GATEWAY_LIMITER_SERVICE = "gateway-limiter-service"
GATEWAY_LIMITER_NETWORK_POLICY = "gateway-limiter-network-policy"
GATEWAY_ISSUER = "gateway-issuer"  # router.gateway.tls without an issuer: a self-signed one
GATEWAY_CERTIFICATE = "gateway-certificate"  # router.gateway.tls: the client port's certificate

# --- the platform's children ------------------------------------------------------------------
NAMESPACE = "namespace"
MODEL_SERVICE_ACCOUNT = "model-service-account"
STACK_CRD_CHECK = "required-crds"  # every other operator's CRD the stack needs (compile/crds.py)
DASHBOARD = "dashboard"  # platform.metrics.dashboard: the Grafana dashboard ConfigMap

# Roles of a model whose objects hold or make its weights: a replace of one of these is a
# re-download, which the preview report calls out.
MODEL_WEIGHTS_ROLES = (WEIGHTS, PULLER, WEIGHTS_GATE, NIM_CACHE)
# Roles whose children are named `<model>-<role>-<source hash>` (compile/plan.py weights_names).
SOURCE_NAMED_ROLES = (WEIGHTS, PULLER, WEIGHTS_GATE)
# Roles of a model that run its server.
MODEL_SERVER_ROLES = (SERVER, NIM_SERVICE)
# Roles of bookkeeping resources (dynamic providers): they hold no cluster object of their own.
BOOKKEEPING_ROLES = (STATUS, NIM_OPERATOR_CHECK, CRD_CHECK, ROUTER_WORKLOAD_KIND, ROUTER_TARGETS, ROUTER_CRD_CHECK,
                     STACK_CRD_CHECK, NEXT_ROLE_PREFIX + STATUS)
_RAW_ROLES = (WEIGHTS, PULLER, WEIGHTS_GATE, NETWORK_POLICY, PULLER_NETWORK_POLICY, SERVER, SERVICE, STATUS,
              SERVER_PDB, SERVICE_MONITOR)
# Its weights children are named as the model's own (SOURCE_NAMED_ROLES, by their source) and
# its puller's egress is the model's policy: the prefixed roles are its server side's.
NEXT_ROLES = tuple(NEXT_ROLE_PREFIX + role for role in (NETWORK_POLICY, SERVER, SERVICE, STATUS, SERVER_PDB,
                                                         SERVICE_MONITOR))
# Every role a model declares, longest first so a suffix match never stops at a shorter role
# ("weights-gate" before "weights", "next-weights-gate" before both).
MODEL_ROLES = tuple(sorted(
    (*_RAW_ROLES, NIM_OPERATOR_CHECK, NIM_CACHE, NIM_SERVICE, CRD_CHECK, SCALED_OBJECT, *NEXT_ROLES),
    key=len, reverse=True,
))


def child(parent: str, role: str) -> str:
    """The logical name of ``parent``'s child in ``role``."""
    return f"{parent}-{role}"


def _longest_first(roles: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(roles, key=len, reverse=True))


# Every role the router declares and every role the platform declares by a constant here (the
# platform's teardown objects and stack secrets are named after what they hold). Longest first,
# like MODEL_ROLES ("backend-service" before "service").
ROUTER_ROLES = _longest_first((
    ROUTER_CRD_CHECK, ROUTER_WORKLOAD_KIND, ROUTER_TARGETS, ROUTER_WORKLOAD, ROUTER_SERVICE, ROUTER_PDB,
    ROUTER_HEADLESS_SERVICE, ROUTER_ISSUER, ROUTER_CERTIFICATE, BACKEND_SERVICE_ACCOUNT, BACKEND_ROLE,
    BACKEND_ROLE_BINDING, BACKEND, BACKEND_SERVICE, BACKEND_PDB, BACKEND_SERVICE_MONITOR,
    ROUTER_SERVICE_ACCOUNT, ROUTER_ROLE, ROUTER_ROLE_BINDING, ROUTER_SERVICE_MONITOR, ROUTER_NETWORK_POLICY, ROUTER_LB_CONFIG,
    BACKEND_NETWORK_POLICY, GATEWAY, GATEWAY_CONFIG, GATEWAY_SERVICE, GATEWAY_PDB, GATEWAY_NETWORK_POLICY,
    GATEWAY_LIMITER, GATEWAY_LIMITER_SERVICE, GATEWAY_LIMITER_NETWORK_POLICY, GATEWAY_METRICS_SERVICE,
    GATEWAY_SERVICE_MONITOR, GATEWAY_ISSUER, GATEWAY_CERTIFICATE,
))
PLATFORM_ROLES = _longest_first((NAMESPACE, MODEL_SERVICE_ACCOUNT, STACK_CRD_CHECK, DASHBOARD))
