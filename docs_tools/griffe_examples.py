"""A griffe extension for the API reference: the package's docstrings as Google-style sections
that mkdocstrings renders well.

- ``Example:`` is read as ``Examples:``, so that its ``>>>`` lines render as code: griffe
  reads a singular ``Example:`` as an admonition of plain Markdown, where ``docs[0][0]``
  would be taken for a link.
- ``Call arguments:`` (the layers' ``call``, as keras-hub writes them) stays an admonition,
  with each ``name: text`` entry a list item instead of one run-on paragraph.

Used by mkdocs.yml (mkdocstrings' ``extensions``).
"""
import re

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.M)
_CALL_ARGUMENTS = re.compile(r"^(\s*)Call arguments:\s*$")
_ENTRY = re.compile(r"^(\s*)(\*{0,2}[A-Za-z_][\w, *]*(?: \([^)]*\))?:\s)")


def _list_call_arguments(text):
    """Each entry of a ``Call arguments:`` section as a Markdown list item."""
    lines, out, entry_indent, header_indent = text.split("\n"), [], None, None
    for line in lines:
        header = _CALL_ARGUMENTS.match(line)
        if header:
            header_indent, entry_indent = len(header.group(1)), None
            out.append(line)
            continue
        if header_indent is not None:
            indent = len(line) - len(line.lstrip())
            if line.strip() and indent <= header_indent:
                header_indent = None  # the section ended
            elif line.strip():
                entry_indent = indent if entry_indent is None else entry_indent
                entry = _ENTRY.match(line)
                if indent == entry_indent and entry:
                    line = f"{line[:indent]}- {line[indent:]}"
                elif indent > entry_indent:
                    line = " " * (entry_indent + 2) + line.lstrip()
        out.append(line)
    return "\n".join(out)


class ExampleSections(griffe.Extension):
    """Rewrites every docstring griffe loads: ``Example:`` to ``Examples:`` (after a blank
    line, which a section needs), ``Call arguments:`` entries to list items."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            value = _EXAMPLE.sub(r"\n\1Examples:", obj.docstring.value)
            obj.docstring.value = _list_call_arguments(value)
