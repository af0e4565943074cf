"""A Griffe extension (mkdocs.yml, mkdocstrings options): every docstring of the API reference goes through
:func:`markup.docstring_to_markdown` before it is parsed, so Sphinx roles and doctests render as code."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import griffe

sys.path.insert(0, str(Path(__file__).parent))
from markup import docstring_to_markdown  # noqa: E402


class DocstringsAsMarkdown(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = docstring_to_markdown(obj.docstring.value)
