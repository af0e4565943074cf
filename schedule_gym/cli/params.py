"""Argument helpers shared by the commands: ``key=value`` parameters, files a command writes when it is done."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from schedule_gym.cli.errors import CLIError

__all__ = ["output_path", "parse_params", "write_output"]


def output_path(value: str | None, flag: str) -> Path | None:
    """``value`` as a file the command writes when it is done, checked before it starts, so that a long run does
    not end in a traceback: its folder is made and the file opened for appending (then removed again if it was
    not there). A path that cannot be written is a :class:`CLIError` naming the flag, the path and the cause."""
    if value is None:
        return None
    path = Path(value)
    if path.is_dir():
        raise CLIError(f"{flag} {path} is a directory; give a file name")
    blocking = next((p for p in path.parents if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise CLIError(f"{flag} {path} cannot be written: {blocking} is a file, not a folder")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as exc:
        raise CLIError(f"{flag} {path} cannot be written ({exc.strerror or exc})") from None
    if not existed:
        path.unlink(missing_ok=True)
    return path


def write_output(path: Path, text: str, flag: str) -> None:
    """Write ``text`` to ``path`` (checked by :func:`output_path`); a failure now is a :class:`CLIError` too."""
    try:
        path.write_text(text)
    except OSError as exc:
        raise CLIError(f"{flag} {path} could not be written ({exc.strerror or exc})") from None


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
