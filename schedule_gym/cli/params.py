"""Argument helpers shared by the commands: ``key=value`` parameters."""

from __future__ import annotations

import json
from typing import Any

from schedule_gym.cli.errors import CLIError

__all__ = ["parse_params"]


def parse_params(items: list[str], flag: str) -> dict[str, Any]:
    """``key=value`` items as a dict; values parsed as JSON where possible; dotted keys nest."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(part.isidentifier() for part in path):
            raise CLIError(f"bad {flag} {item!r}: expected key=value with a parameter name as key")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise CLIError(f"bad {flag} {item!r}: {part!r} is already set to {node!r}")
        if path[-1] in node:
            raise CLIError(f"bad {flag} {item!r}: {key.strip()!r} is given twice")
        node[path[-1]] = value
    return out
