"""A griffe extension for the API reference: the package's ``Example:`` sections are read as
Google-style ``Examples:`` sections, so that their ``>>>`` lines render as code.

Griffe reads a singular ``Example:`` as an admonition of plain Markdown, where
``docs[0][0]`` would be taken for a link. Used by mkdocs.yml (mkdocstrings' ``extensions``).
"""
import re

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)


class ExampleSections(griffe.Extension):
    """Rewrites ``Example:`` to ``Examples:`` (after a blank line, which a section needs)
    in every docstring griffe loads."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\n\1Examples:", obj.docstring.value)
