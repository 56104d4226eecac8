"""Kubernetes' own rules for what the config passes through to an object: integer ranges, label
keys and values, DNS subdomains, environment variable names, Secret keys.

The rules are the API server's (k8s.io/apimachinery ``pkg/util/validation``: IsQualifiedName,
IsValidLabelValue, IsDNS1123Subdomain, IsConfigMapKey; ``pkg/apis/core/validation``:
IsValidUserID/IsValidGroupID and the int32 fields of the workload APIs). Checking them here means
`validate` refuses what the cluster would refuse half-way through an `up`, with the field path and
the fix. Each check raises ``Problems`` with paths relative to the field, so a selector's bad key
is reported at ``<field>.<key>``.

Nothing in a message repeats more than the start of a value: a credential pasted into a label
must not be echoed in full (the stack's secret-value check reports those, without the value).
"""

from __future__ import annotations

import re
from typing import Annotated, Optional

from pydantic import AfterValidator

from .values import Problem, Problems

# Every integer the config holds lands in (or bounds) a Kubernetes int32 field: replica counts
# (Deployment, StatefulSet, NIMService, ScaledObject/HPA min and max), uids and gids
# (IsValidUserID/IsValidGroupID: 0..2147483647), probe thresholds and periods. A larger number is
# refused by the API server's JSON decoding ("cannot unmarshal number ... of type int32").
INT32_MAX = 2**31 - 1

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
NAME_MAX, VALUE_MAX, SUBDOMAIN_MAX = 63, 63, 253


def short(text: object, limit: int = 20) -> str:
    """The start of a value, for a message: enough to find it, never a whole pasted credential."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def int32_problem(value: int) -> Optional[str]:
    if -INT32_MAX - 1 <= value <= INT32_MAX:
        return None
    return (f"{short(value)} is beyond Kubernetes' 32-bit integer range (at most {INT32_MAX}); "
            "write a smaller number")


def qualified_name_problem(key: str) -> Optional[str]:
    """Why ``key`` is not a label key (annotation keys follow the same rule), or None."""
    prefix, slash, name = key.rpartition("/")
    fix = ("write an optional DNS-subdomain prefix and '/', then a name of at most 63 letters, digits, "
           "'-', '_' and '.' that starts and ends with a letter or digit, e.g. example.com/gpu or gpu")
    if not name:
        return f"is not a label key: the name after the prefix is empty; {fix}"
    if len(name) > NAME_MAX:
        return f"is not a label key: its name part is {len(name)} characters (at most {NAME_MAX}); {fix}"
    if not _NAME.match(name):
        return f"is not a label key; {fix}"
    if slash and (len(prefix) > SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.match(prefix)):
        return (f"is not a label key: its prefix must be a lowercase DNS subdomain of at most "
                f"{SUBDOMAIN_MAX} characters; {fix}")
    return None


def label_value_problem(value: str) -> Optional[str]:
    if value == "" or (len(value) <= VALUE_MAX and _NAME.match(value)):
        return None
    length = f" ({len(value)} characters)" if len(value) > VALUE_MAX else ""
    return (f"'{short(value)}' is not a label value{length}; write at most {VALUE_MAX} letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit (or quote an empty value '')")


def label_problems(labels: dict[str, str], where: str = "") -> list[Problem]:
    """Problems of a label map (a selector or labels to set), at ``<where>.<key>``."""
    problems = []
    for key, value in sorted(labels.items()):
        path = f"{where}.{key}" if where else key
        for problem in (qualified_name_problem(key), label_value_problem(value)):
            if problem:
                problems.append(Problem(path, problem))
    return problems


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    problems = label_problems(labels)
    if problems:
        raise Problems(problems)
    return labels


def check_dns_subdomain(name: str) -> str:
    if len(name) > SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.match(name):
        raise ValueError(f"'{short(name, 40)}' is not a DNS subdomain; use at most {SUBDOMAIN_MAX} lowercase "
                         "letters, digits, '-' and '.', starting and ending with a letter or digit, e.g. 'fast-ssd'")
    return name


def check_secret_key(key: str) -> str:
    if len(key) > SUBDOMAIN_MAX or not _SECRET_KEY.match(key) or key in (".", "..") or key.startswith(".."):
        raise ValueError(f"'{short(key, 40)}' is not a Secret key; use letters, digits, '-', '_' and '.' "
                         "(at most 253, not '.' or '..'), e.g. token")
    return key


def env_name_problem(name: str) -> Optional[str]:
    """Kubernetes (1.34+, relaxed validation) takes any printable ASCII but '=' in a variable name."""
    if name and all(32 <= ord(ch) <= 126 for ch in name) and "=" not in name:
        return None
    what = "an empty name" if not name else "is not an environment variable name"
    return (f"{what}; use printable ASCII without '=' (by convention "
            "upper-case letters, digits and '_', e.g. VLLM_LOGGING_LEVEL)")


def check_env(env: dict[str, str]) -> dict[str, str]:
    problems = [Problem(name, problem) for name in sorted(env) if (problem := env_name_problem(name))]
    if problems:
        raise Problems(problems)
    return env


# A label map passed to Kubernetes as it is: nodeSelector, matchLabels, labels to set.
Labels = Annotated[dict[str, str], AfterValidator(check_labels)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
SecretKey = Annotated[str, AfterValidator(check_secret_key)]
EnvVars = Annotated[dict[str, str], AfterValidator(check_env)]
