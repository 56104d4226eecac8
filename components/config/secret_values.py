"""Credential-shaped values anywhere in the stack's plain config: refused, never echoed.

``managed.py`` refuses credential-looking *names* (``*_TOKEN`` in ``env``); this module looks at
*values*: a Hugging Face token under ``env.MY_VAR``, an NGC key in ``args``, a private key pasted
into a label. Every plain field ends up in the stack file, the Pulumi state and the rendered
manifests, readable by anyone who can read one of them. The stack secrets (``hfToken``,
``ngcApiKey``) are the only fields meant to hold a credential, as Pulumi secrets.

The shapes are the credentials' published formats (a prefix and a length), so a match is a
credential with near certainty. The check walks the raw input before any other validation,
so no other message (a label-syntax error, a type error) can repeat the value either; a problem
names the path and the kind of credential, never its content, and not even a key that holds one.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .values import Problem

_HF_FIX = ("for the hub token: hfTokenSecret (a Kubernetes Secret) or the stack secret "
           "(`pulumi config set --secret hfToken <token>`)")
_NGC_FIX = ("for the NGC key: nim.authSecret (a Kubernetes Secret with key NGC_API_KEY) or the "
            "stack secret (`pulumi config set --secret ngcApiKey <key>`)")
_CLOUD_FIX = ("cloud credentials belong in the cluster, not in this config: give the pods a "
              "workload identity (IRSA, GKE Workload Identity) or keep the key in a Kubernetes Secret "
              "you create yourself")
_KEY_FIX = ("a TLS key belongs in a Kubernetes Secret: router.tls.existingSecret, or a cert-manager "
            "issuer (router.tls.issuer); other keys in a Secret you create yourself")
_TOKEN_FIX = "keep it in a Kubernetes Secret you create yourself; no plain config field may hold it"


@dataclass(frozen=True)
class Shape:
    kind: str  # what it looks like, for the message
    pattern: re.Pattern
    fix: str


SHAPES = (
    # huggingface_hub user access tokens: "hf_" and 34 letters (older ones: "api_org_" for orgs).
    Shape("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9])(hf_[A-Za-z0-9]{30,}|api_org_[A-Za-z0-9]{30,})"), _HF_FIX),
    # NGC personal and service keys (the NGC catalog's "nvapi-" keys).
    Shape("an NGC API key", re.compile(r"(?<![A-Za-z0-9])nvapi-[A-Za-z0-9_-]{20,}"), _NGC_FIX),
    # AWS access key ids: AKIA (long-term) and ASIA (temporary), 20 upper-case characters.
    Shape("an AWS access key id", re.compile(r"(?<![A-Z0-9])(AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"), _CLOUD_FIX),
    # A Google Cloud service-account key file (JSON): its private key fields.
    Shape("a Google Cloud service-account key",
          re.compile(r'"(private_key_id|private_key)"\s*:|"type"\s*:\s*"service_account"'), _CLOUD_FIX),
    Shape("a private key", re.compile(r"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY( BLOCK)?-----"), _KEY_FIX),
    # GitHub personal, OAuth, user-to-server, server-to-server and refresh tokens; fine-grained PATs.
    Shape("a GitHub token", re.compile(r"(?<![A-Za-z0-9])(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
          _TOKEN_FIX),
    Shape("an OpenAI-style API key", re.compile(r"(?<![A-Za-z0-9])sk-(proj-|ant-)?[A-Za-z0-9_-]{32,}"), _TOKEN_FIX),
    # An HTTP bearer credential pasted with its scheme (`Authorization: Bearer <token>`): the scheme
    # and a token of at least 20 characters (RFC 6750's b64token characters).
    Shape("a bearer token", re.compile(r"(?i)(?<![A-Za-z0-9])bearer\s+[A-Za-z0-9._~+/-]{20,}=*"), _TOKEN_FIX),
    # A JSON Web Token (e.g. a Kubernetes service-account token): header.payload.signature.
    Shape("a JSON Web Token", re.compile(r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
          _TOKEN_FIX),
)
# An AWS secret access key has no prefix: 40 base64 characters. Taken as one only when a whole
# word is exactly that with upper- and lower-case letters and digits (a 40-hex commit id, which
# has no upper case, is not one).
_AWS_SECRET = re.compile(r"^[A-Za-z0-9/+]{40}$")
_WORDS = re.compile(r"[\s=:,;\"']+")
_AWS_SECRET_SHAPE = Shape("an AWS secret access key", _AWS_SECRET, _CLOUD_FIX)


def credential_shape(text: str) -> Shape | None:
    """The credential ``text`` holds (anywhere in it), or None."""
    for shape in SHAPES:
        if shape.pattern.search(text):
            return shape
    for word in _WORDS.split(text):
        if (_AWS_SECRET.match(word) and re.search(r"[A-Z]", word) and re.search(r"[a-z]", word)
                and re.search(r"[0-9]", word)):
            return _AWS_SECRET_SHAPE
    return None


def _walk(value: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    """(path, text, is_key) of every string in a raw section, keys of mappings included."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, dict):
        if set(value) == {"secure"}:  # a Pulumi secret: encrypted, and not ours to read
            return
        for key, item in value.items():
            key_text = str(key)
            yield path, key_text, True
            yield from _walk(item, f"{path}.{key_text}" if path else key_text)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}.{index}" if path else str(index))


def problems(raw: dict, skip: tuple[str, ...] = ()) -> list[Problem]:
    """(path, message) for every credential-shaped string in ``raw`` (the `llm-serving:*` sections,
    stack-file spelling), skipping the sections named in ``skip`` (the stack secrets)."""
    found: dict[str, str] = {}
    for section, value in raw.items():
        if section in skip:
            continue
        for path, text, is_key in _walk(value, str(section)):
            shape = credential_shape(text)
            if shape is None:
                continue
            if is_key:
                where = f"{path} (one of its keys)"
            else:
                parent, _, last = path.rpartition(".")
                # A key that is itself a credential is not repeated in the path either.
                where = f"{parent} (one of its keys)" if credential_shape(last) else path
            found.setdefault(where, (
                f"holds what looks like {shape.kind}; every plain field is written in clear to the "
                "stack file, the Pulumi state and the rendered manifests. Remove it (and revoke it if "
                f"the file was ever shared or committed); {shape.fix}"))
    return [Problem(path, message) for path, message in sorted(found.items())]
