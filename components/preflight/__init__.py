"""Hugging Face preflight: what `pulumi preview` can know about the weights before anything is
created — the commit a branch or tag resolves to (pinning), whether the token can read the repo,
and whether the files the puller downloads fit the weights volume.

``decide`` is pure (table-tested); ``hub`` is the only module that talks to an endpoint;
``stack`` applies both to a ``StackConfig``.
"""

from .decide import Check, HubError, HubFile, Problem, RepoState, Verdict, decide
from .stack import ENDPOINT_ENV, PreflightError, PreflightReport, preflight_stack

__all__ = [
    "Check", "ENDPOINT_ENV", "HubError", "HubFile", "PreflightError", "PreflightReport", "Problem",
    "RepoState", "Verdict", "decide", "preflight_stack",
]
