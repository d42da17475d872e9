"""The reStructuredText of the workflow report's landing page: an image directive that embeds its file.

Snakemake's ``embeddedimage`` directive leaves the file's path in the page (its base64 mix-in comes after docutils'
``Image`` in the method order, so it never runs): the landing page then shows its figures only while
``report.html`` sits next to ``results/``. :class:`DataUriImage` (``.. adaptcs-image::``) puts the file itself in
the page as a ``data:`` URI, so the report can be moved or mailed. The Snakefile registers it with
:func:`register` before Snakemake renders ``workflow/report/workflow.rst``.
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path

from docutils.parsers.rst import directives
from docutils.parsers.rst.directives.images import Image

DIRECTIVE = "adaptcs-image"


class DataUriImage(Image):
    """``.. adaptcs-image:: path``: docutils' image with the file's bytes as a ``data:`` URI (alt text: the file's
    name unless given)."""

    def run(self):
        path = Path(directives.uri(self.arguments[0]))
        if not path.is_file():
            raise self.error(f"{DIRECTIVE}: no such file {path}")
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self.arguments[0] = f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"
        self.options.setdefault("alt", path.name)
        return super().run()


def register() -> None:
    """Make ``.. adaptcs-image::`` known to docutils (idempotent)."""
    directives.register_directive(DIRECTIVE, DataUriImage)
