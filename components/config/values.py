"""Value checks shared by the config model: images, quantities, names, revisions, URLs.

Pure functions; each raises ``ValueError`` with a message that says what to do, which pydantic
prefixes with the field path.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from urllib.parse import urlparse

# A DNS-1035 label: what a Service name must be (starts with a letter), and so what a model
# name must be, since the model's Service is named after it.
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

# Model names are the stem of every object name; "-weights-" plus an 8-hex source hash is
# appended to the longest derived name, which must stay a valid 63-character label.
MODEL_NAME_MAX = 45

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}

# Git ref names as the hub accepts them for branches and tags, or a full commit id.
_REVISION = re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9][A-Za-z0-9._/-]{0,199}(?<![./])$")
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
_HF_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

_IMAGE = re.compile(
    r"^(?P<registry>[a-zA-Z0-9.-]+(?::[0-9]+)?)/"
    r"(?P<path>[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


# Kubernetes caps every quantity at 2^63-1 (k8s.io/apimachinery resource.Quantity) and rounds
# below a nano; a larger value is silently capped, so it is refused here instead.
QUANTITY_MAX = Decimal(2**63 - 1)
_EXPONENT_MAX = 30  # beyond 1e30 nothing fits under the cap; bounds Decimal's work on '1e1000000'


def _short(text: object, limit: int = 24) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"


def parse_quantity(text: str) -> Decimal:
    """Parse a Kubernetes quantity ("16Gi", "500m", "1e3") into its value in base units."""
    match = _QUANTITY.match(str(text).strip())
    if not match:
        raise ValueError(f"'{_short(text)}' is not a Kubernetes quantity; write e.g. '16Gi', '500m' or '4'")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation as exc:
        raise ValueError(f"'{_short(text)}' is not a Kubernetes quantity; write e.g. '16Gi'") from exc
    if suffix in _BINARY:
        value = value * _BINARY[suffix]
    elif len(suffix) > 1:  # an exponent, e.g. "e3"; "E" alone is the exa suffix
        exponent = int(suffix[1:]) if len(suffix) < 12 else None
        if exponent is None or abs(exponent) > _EXPONENT_MAX:
            raise ValueError(f"'{_short(text)}' is out of range for a Kubernetes quantity (at most "
                             "2^63-1, in steps of 1n); write e.g. '16Gi'")
        value = value.scaleb(exponent)
    else:
        value = value * _DECIMAL[suffix]
    if abs(value) > QUANTITY_MAX:
        raise ValueError(f"'{_short(text)}' is too large for a Kubernetes quantity (at most 2^63-1); "
                         "write e.g. '16Gi'")
    return value


def check_quantity(text: str) -> str:
    parse_quantity(text)
    return str(text)


def check_positive_quantity(text: str) -> str:
    if parse_quantity(text) <= 0:
        raise ValueError(f"'{text}' must be greater than zero")
    return str(text)


def check_image(ref: str) -> str:
    """Images must name their registry and a pinned tag or digest.

    Short names ("busybox") fail on runtimes that enforce fully qualified names, and a moving
    ':latest' (or no tag) makes two nodes run different code under one spec.
    """
    match = _IMAGE.match(ref or "")
    registry = match.group("registry") if match else ""
    if not match or not ("." in registry or ":" in registry or registry == "localhost"):
        raise ValueError(
            f"image '{ref}' is not fully qualified; write registry/repository:tag, "
            "e.g. 'docker.io/library/busybox:1.37.0'"
        )
    if not match.group("tag") and not match.group("digest"):
        raise ValueError(f"image '{ref}' has no tag; pin a version tag or an @sha256 digest")
    if match.group("tag") == "latest" and not match.group("digest"):
        raise ValueError(f"image '{ref}' uses ':latest'; pin a version tag or an @sha256 digest")
    return ref


def check_non_root_uid(uid: int) -> int:
    if uid <= 0:
        raise ValueError(
            f"uid {uid} is not allowed: no pod runs as root; use the image's non-root user "
            "(vLLM: 2000, NIM: 1000)"
        )
    return uid


def check_model_name(name: str) -> str:
    if len(name) > MODEL_NAME_MAX:
        raise ValueError(
            f"'{name}' is {len(name)} characters; model names are at most {MODEL_NAME_MAX} "
            "(derived object names must fit Kubernetes' 63-character limit)"
        )
    if not DNS1035_LABEL.match(name):
        raise ValueError(
            f"'{name}' is not a valid name; use lowercase letters, digits and '-', "
            "starting with a letter and ending with a letter or digit"
        )
    return name


def check_dns1123_label(name: str) -> str:
    if len(name) > 63 or not DNS1123_LABEL.match(name):
        raise ValueError(
            f"'{name}' is not a DNS-1123 label; use at most 63 lowercase letters, digits and '-'"
        )
    return name


def check_revision(revision: str) -> str:
    if not _REVISION.match(revision or ""):
        raise ValueError(
            f"revision '{revision}' is not a branch, tag or 40-hex commit; "
            "write e.g. 'main', 'v1.0' or a full commit id"
        )
    if re.fullmatch(r"[0-9a-fA-F]{7,39}", revision) and not re.fullmatch(r"[0-9]+", revision):
        raise ValueError(
            f"revision '{revision}' looks like an abbreviated commit; write the full 40-hex commit id"
        )
    return revision


def check_hf_repo(repo: str) -> str:
    if not _HF_REPO.match(repo or "") or ".." in repo:
        raise ValueError(f"repo '{repo}' is not a Hugging Face repo id; write 'owner/name'")
    return repo


def check_cluster_reachable_url(url: str) -> str:
    """The puller runs in a pod: a loopback URL would point at the pod itself."""
    parsed = urlparse(url or "")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"'{url}' is not an http(s) URL; write e.g. 'https://huggingface.co'")
    try:
        port = parsed.port
    except ValueError:
        port = 0
    if port == 0:  # out of 1-65535 (urlparse raises beyond it) or 0: no server listens there
        raise ValueError(f"'{url}' has a port outside 1-65535; write e.g. 'http://hf-mirror.mirrors.svc:8080'")
    host = parsed.hostname
    loopback = host == "localhost" or host.endswith(".localhost")
    try:
        address = ipaddress.ip_address(host)
        mapped = getattr(address, "ipv4_mapped", None)
        # 0.0.0.0 and ::ffff:127.0.0.1 point back at the pod just as 127.0.0.1 does.
        loopback = loopback or address.is_loopback or address.is_unspecified or bool(mapped and mapped.is_loopback)
    except ValueError:
        pass
    if loopback:
        raise ValueError(
            f"'{url}' is a loopback address, which the puller pod cannot reach; use the hub or a "
            "mirror reachable from inside the cluster (e.g. http://hf-mirror.mirrors.svc:8080)"
        )
    return url.rstrip("/")


@dataclass(frozen=True)
class Problem:
    """One thing a stack file must change: the field path (camelCase, relative to the model that
    found it) and the message, which says what is wrong and what to write instead."""

    path: str
    message: str

    def under(self, prefix: str) -> Problem:
        """The same problem, with its path relative to the model one level up."""
        return Problem(f"{prefix}.{self.path}", self.message)


class Problems(ValueError):
    """Several problems found by one cross-field check, each with its own field path.

    Raised from model validators so the error formatter can report each problem on its own
    line, at the path of the field to change (relative to the model that raised it).
    """

    def __init__(self, problems: Sequence[Problem]):
        wrong = [p for p in problems if not isinstance(p, Problem)]
        if wrong:
            raise TypeError(f"Problems takes Problem(path, message) items, got {wrong[0]!r}")
        self.problems = list(problems)
        super().__init__("; ".join(f"{p.path}: {p.message}" for p in self.problems))


def check_requests_within_limits(requests: object, limits: object) -> None:
    """A container's cpu and memory requests may not exceed its limits (the API server refuses
    the pod); raises Problems at `requests.<key>`."""
    problems = [
        Problem(f"requests.{key}", f"{getattr(requests, key)} exceeds limits.{key} "
                f"({getattr(limits, key)}); lower the request or raise the limit")
        for key in ("cpu", "memory")
        if parse_quantity(getattr(requests, key)) > parse_quantity(getattr(limits, key))
    ]
    if problems:
        raise Problems(problems)

# --- the router's names ----------------------------------------------------------------

# Longest derived Service name is "<name>-headless" (DNS-1035, 63); StatefulSet pods also carry
# a "<name>-<hash>" controller-revision label, so keep well under the limit.
ROUTER_NAME_MAX = 40
_DNS_NAME = re.compile(r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

def check_router_name(name: str) -> str:
    if len(name) > ROUTER_NAME_MAX or not DNS1035_LABEL.match(name):
        raise ValueError(
            f"'{name}' is not a valid router name; use at most {ROUTER_NAME_MAX} lowercase letters, "
            "digits and '-', starting with a letter (it names the router's Services)"
        )
    return name


def check_dns_name(name: str) -> str:
    if len(name) > 253 or not _DNS_NAME.match(name):
        raise ValueError(
            f"'{name}' is not a DNS name; write lowercase labels joined by '.', optionally "
            "starting with '*.', e.g. 'router.example.com'"
        )
    return name


def check_domain(domain: str) -> str:
    if len(domain) > 253 or not _DOMAIN.match(domain):
        raise ValueError(
            f"'{domain}' is not a domain; write lowercase labels joined by '.' without a "
            "wildcard, e.g. 'example.com' (subdomains are allowed with it)"
        )
    return domain
