"""Docstrings as Markdown: the package's docstrings are Markdown with a few reStructuredText habits
(Sphinx cross-reference roles, ``::`` before literal blocks, doctest blocks without fences), which this
module turns into Markdown for the generated pages and the API reference."""

from __future__ import annotations

import re

#: ``:class:`~schedule_gym.tasks.Task```, ``:func:`gemm```, ``:meth:`text <target>```: a Sphinx role.
ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|data|mod|exc|obj|const|ref|term):`([^`]+)`")


def _role_text(match: re.Match[str]) -> str:
    target = match.group(1).strip()
    if "<" in target and target.endswith(">"):  # :role:`text <target>`
        return f"`{target[:target.index('<')].strip()}`"
    if target.startswith("~"):  # :role:`~a.b.C` shows C
        return f"`{target[1:].rsplit('.', 1)[-1]}`"
    return f"`{target}`"


def _fence_doctests(lines: list[str]) -> list[str]:
    """Doctest blocks (``>>>`` lines and their output, up to a blank line) become fenced ``pycon`` code,
    unless they are inside an indented literal block or a fence already."""
    out: list[str] = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("```"):
            in_fence = not in_fence
        if not in_fence and stripped.startswith(">>>") and len(indent) < 4:
            if out and out[-1].strip():
                out.append("")
            out.append(f"{indent}```pycon")
            while i < len(lines) and lines[i].strip():
                out.append(lines[i])
                i += 1
            out.append(f"{indent}```")
            continue
        out.append(line)
        i += 1
    return out


def docstring_to_markdown(text: str) -> str:
    """The Markdown of a docstring: roles as code, ``::`` as ``:``, doctest blocks fenced."""
    text = ROLE.sub(_role_text, text)
    text = re.sub(r"(?<=\S)::$", ":", text, flags=re.MULTILINE)
    text = re.sub(r"^::$", "", text, flags=re.MULTILINE)
    return "\n".join(_fence_doctests(text.splitlines()))


def sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """A docstring split at its ``## Heading`` lines: the text before the first, then (heading, body) pairs."""
    parts = re.split(r"^## +(.+?)\s*$", text, flags=re.MULTILINE)
    return parts[0].strip(), [(parts[i].strip(), parts[i + 1].strip()) for i in range(1, len(parts), 2)]
