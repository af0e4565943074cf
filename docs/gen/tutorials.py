"""The tutorials (docs/tutorials/): each script of examples/tutorials/ rendered as a page, its docstring
the introduction, each ``# %% [markdown]`` comment block prose, the code between them code blocks.
The scripts themselves run in the test suite (tests/test_tutorials.py), so a page shows code that runs."""

from __future__ import annotations

import ast
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]
TUTORIALS = ROOT / "examples" / "tutorials"


def render(path: Path) -> tuple[str, str]:
    """(title, Markdown) of a tutorial script."""
    source = path.read_text()
    docstring = ast.get_docstring(ast.parse(source)) or path.stem
    title, _, intro = docstring.partition("\n")
    body = source[source.index('"""', source.index('"""') + 3) + 3:]  # the code after the docstring
    lines = [f"# {title.strip()}", "", intro.strip(), "",
             f"The whole script: [`examples/tutorials/{path.name}`](#the-whole-script) (end of this page); it runs in the "
             "test suite (`tests/test_tutorials.py`).", ""]
    code: list[str] = []

    def flush() -> None:
        text = "\n".join(code).strip("\n")
        if text:
            lines.extend(["```python", text, "```", ""])
        code.clear()

    prose = False
    for line in body.splitlines():
        if line.startswith("# %% [markdown]"):
            flush()
            prose = True
            continue
        if prose and line.startswith("#"):
            lines.append(line[2:] if line.startswith("# ") else line[1:])
            continue
        if prose:
            lines.append("")
            prose = False
        code.append(line)
    flush()
    lines += ["## The whole script", "", f"```python title=\"examples/tutorials/{path.name}\"", source.rstrip(), "```", ""]
    return title.strip(), "\n".join(lines)


nav = ["* [Overview](index.md)"]
index = ["# Tutorials", "",
         "Readable scripts, top to bottom, with small budgets on the mock backend (the real-hardware ones on a tiny",
         "GEMM or model). Each runs in the test suite, so every page shows code that works with this version.", "",
         "| tutorial | script |", "|---|---|"]
for script in sorted(TUTORIALS.glob("[0-9]*.py")):
    title, markdown = render(script)
    name = script.stem.split("_", 1)[1].replace("_", "-") + ".md"
    with mkdocs_gen_files.open(f"tutorials/{name}", "w") as page:
        page.write(markdown)
    nav.append(f"* [{title}]({name})")
    index.append(f"| [{title}]({name}) | `examples/tutorials/{script.name}` |")
with mkdocs_gen_files.open("tutorials/index.md", "w") as page:
    page.write("\n".join(index) + "\n")
with mkdocs_gen_files.open("tutorials/SUMMARY.md", "w") as page:
    page.write("\n".join(nav) + "\n")
