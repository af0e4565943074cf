"""MkDocs hooks (mkdocs.yml, ``hooks``): the package's source tree for the API reference is laid out before
any plugin starts, since the mkdocstrings handler drops a search path that does not exist yet."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.plugins import event_priority

sys.path.insert(0, str(Path(__file__).parent))
from package import source_tree  # noqa: E402


@event_priority(100)  # before every plugin's on_config
def on_config(config):
    source_tree()
    return config
