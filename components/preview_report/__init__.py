"""CI preview report: `pulumi preview --json` -> a Markdown summary a reviewer acts on.

Pure, one step per module: ``parsing`` reads what pulumi printed (either JSON form), ``paths``
walks the property paths a diff names, ``changes`` says what changed in one resource,
``summary`` groups the steps per model (and for the router and the platform) and says what the
change will do, ``markdown`` writes the report. ``runner`` holds ``run_preview`` (the only
function that runs anything) and ``command``, which ``python -m components preview-report`` calls.
"""

from .changes import image_change, short_revision, source_change, template_changes
from .markdown import render
from .parsing import Preview, Resource, Step, Violation, parse
from .paths import get_path, path_segments
from .runner import EXIT_PREVIEW_FAILED, PreviewRunError, command, preview_command, preview_report, run_preview
from .summary import Report, Section, component_of, role_of, summarize

__all__ = [
    "EXIT_PREVIEW_FAILED", "Preview", "PreviewRunError", "Report", "Resource", "Section", "Step", "Violation",
    "command", "component_of", "get_path", "image_change", "parse", "path_segments", "preview_command",
    "preview_report", "render", "role_of", "run_preview", "short_revision", "source_change", "summarize",
    "template_changes",
]
