"""The API reference (docs/reference/): one page per module of the installed package, rendered from its
docstrings by mkdocstrings, grouped by package; a package's page lists what it exports."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))
from markup import docstring_to_markdown  # noqa: E402
from package import modules  # noqa: E402

#: The order of the reference's sections (the package's layers, bottom to top); other packages follow.
SECTIONS = ("schedule_gym", "schedule_gym.tasks", "schedule_gym.operators", "schedule_gym.spaces", "schedule_gym.envs",
            "schedule_gym.backends", "schedule_gym.agents", "schedule_gym.baselines", "schedule_gym.benchmark",
            "schedule_gym.models", "schedule_gym.cli")


def page_of(name: str, is_package: bool) -> str:
    parts = name.split(".")
    return "/".join(parts) + ("/index.md" if is_package else ".md")


def home_of(obj: object) -> str | None:
    """The module that defines a class or function, or None for other objects (constants, aliases)."""
    return getattr(obj, "__module__", None) if (inspect.isclass(obj) or inspect.isfunction(obj)) else None


def defined_here(module) -> list[str]:
    """The names of a package's ``__all__`` that the package's own ``__init__`` defines: its page renders them."""
    return [n for n in getattr(module, "__all__", ()) if home_of(getattr(module, n, None)) == module.__name__]


def rendered(name: str, home: str, found: dict) -> bool:
    """Whether the reference renders ``home.name`` on ``home``'s page: a module with ``__all__`` renders only those."""
    module = found.get(home)
    if module is None:
        return False
    if hasattr(module, "__path__"):
        return name in defined_here(module)
    return name in getattr(module, "__all__", [name])


def exports(module, found: dict) -> list[str]:
    """Table rows of a package's ``__all__``: each name linked to where it is defined and documented."""
    rows = []
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name, None)
        home = home_of(obj)
        summary = (inspect.getdoc(obj) or "").split("\n\n")[0].replace("\n", " ") if home else ""
        qualname = getattr(obj, "__qualname__", "")
        if home and qualname.isidentifier() and rendered(qualname, home, found):
            link = f"[`{name}`][{home}.{qualname}]"
        else:
            link = f"`{name}`"
        summary = docstring_to_markdown(summary).replace("|", "\\|")
        rows.append(f"| {link} | {summary} |")
    if not rows:
        return []
    return ["", "## Exports", "", "| name | summary |", "|---|---|", *rows]


found = modules()


def section_of(name: str) -> str:
    """The package a module is listed under: the longest of SECTIONS it is in, else its package below
    ``schedule_gym``, else ``schedule_gym`` itself (the core modules)."""
    for section in sorted(SECTIONS[1:], key=len, reverse=True):
        if name == section or name.startswith(section + "."):
            return section
    package = ".".join(name.split(".")[:2])
    return package if package != name or hasattr(found[name], "__path__") else "schedule_gym"



groups: dict[str, list[str]] = {}
for name in found:
    groups.setdefault(section_of(name), []).append(name)
order = [s for s in SECTIONS if s in groups] + sorted(s for s in groups if s not in SECTIONS)

summary = ["* [Overview](index.md)"]
for section in order:
    summary.append(f"* {section}")
    for name in sorted(groups[section], key=lambda n: (n != section, n)):
        module = found[name]
        is_package = module is not None and hasattr(module, "__path__")
        path = page_of(name, is_package)
        title = name if name == section else name[len(section) + 1:]
        summary.append(f"    * [{title}]({path})")
        with mkdocs_gen_files.open(f"reference/{path}", "w") as page:
            if is_package:
                page.write(f"::: {name}\n    options:\n      members: {defined_here(module)}\n")
                page.write("\n".join(exports(module, found)) + "\n")
            else:
                page.write(f"::: {name}\n")

with mkdocs_gen_files.open("reference/SUMMARY.md", "w") as nav:
    nav.write("\n".join(summary) + "\n")

with mkdocs_gen_files.open("reference/index.md", "w") as index:
    index.write(
        "# API reference\n\n"
        "Generated from the docstrings of the installed package at every build of this site: one page per\n"
        "module, grouped by package, in the package's layers from the bottom (tasks, operators, spaces) to the\n"
        "top (benchmark, models, command line). A package's page lists the names it exports, each linked to\n"
        "the module that defines it.\n\n"
        + "\n".join(f"- [`{s}`]({page_of(s, hasattr(found[s], '__path__'))})" for s in order) + "\n"
    )
