"""The package's shape, read from its source: no import circles, no module above 500 lines, and library text that
states contracts (no dates, no pointers outside the repository).

The import graph spans ``schedule_gym/``, ``agents/`` (as ``schedule_gym.agents``) and ``baselines/`` (as
``schedule_gym.baselines``), and counts every import statement of a module: top-level ones, those inside
functions and those under ``if TYPE_CHECKING:`` (a function-level import that goes up the layers is a circle
too). ``from pkg import name`` depends on ``pkg.name`` where that is a module, else on ``pkg``; ``import a.b``
depends on ``a.b`` (the nearest module), not on the packages above it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: where each package's source lives
PACKAGES = {"schedule_gym": ROOT / "schedule_gym", "schedule_gym.agents": ROOT / "agents",
            "schedule_gym.baselines": ROOT / "baselines"}
MAX_LINES = 500
DATE = re.compile(r"20\d\d-\d\d-\d\d")
OUTSIDE = re.compile(r"TVM_NOTES|\.\./shared")



def _modules() -> dict[str, Path]:
    """Every library module by dotted name."""
    out = {}
    for prefix, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if prefix == "schedule_gym" and parts and parts[0] in ("agents", "baselines"):
                continue  # not installed from there
            out[".".join([prefix, *parts])] = path
    return out


MODULES = _modules()


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _nearest_module(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    """The library modules ``module`` imports anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            subs = [f"{base}.{alias.name}" for alias in node.names]
            names = [s for s in subs if s in MODULES]
            if len(names) < len(subs):  # some names are attributes of ``base`` itself
                names.append(base)
        else:
            continue
        for name in names:
            if name.startswith("schedule_gym"):
                target = _nearest_module(name)
                if target is not None and target != module:
                    targets.add(target)
    return targets


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_circle_finder_finds_a_circle_through_a_function_level_import():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(edges) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


def test_from_package_import_submodule_depends_on_the_submodule_only():
    edges = _imports("schedule_gym.benchmark", MODULES["schedule_gym.benchmark"])
    assert "schedule_gym.benchmark.runs" in edges and "schedule_gym.benchmark" not in edges


def test_no_import_circles():
    edges = {module: _imports(module, path) for module, path in MODULES.items()}
    circles = _circles(edges)
    assert not circles, "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


def test_no_library_module_over_500_lines():
    long = {_rel(p): n for p in MODULES.values() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    unexpected = long
    assert not unexpected, f"modules over {MAX_LINES} lines: " + ", ".join(f"{p} ({n})" for p, n in sorted(unexpected.items()))


def _text(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of every docstring and comment of a module."""
    source = path.read_text()
    out = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                out.append((node.body[0].lineno, doc))
    out += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT]
    return out


@pytest.mark.parametrize("pattern, what", [(DATE, "a date"), (OUTSIDE, "a file outside the repository")],
                         ids=["dates", "outside"])
def test_library_text_holds_no_dates_and_no_pointers_outside_the_repository(pattern, what):
    found = [f"{_rel(p)}:{line}" for p in MODULES.values()
             for line, text in _text(p) if pattern.search(text)]
    assert not found, f"docstrings or comments naming {what}: {', '.join(found)}"


def test_agents_and_baselines_are_imported_as_schedule_gym_agents_and_baselines():
    """``agents/`` and ``baselines/`` install as ``schedule_gym.agents`` and ``schedule_gym.baselines``: a
    top-level ``import agents`` would load a second copy of them (or another project's package)."""
    found = []
    for folder in ("schedule_gym", "agents", "baselines", "tests", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                found += [f"{_rel(path)}:{node.lineno}" for n in names if n.split(".")[0] in ("agents", "baselines")]
    assert not found, f"top-level imports of agents or baselines: {', '.join(found)}"


def test_every_package_folder_is_in_the_wheel():
    """Each folder with an ``__init__.py`` under the package roots is listed in ``pyproject.toml``'s packages (the
    list is explicit: a new subpackage left out of it is missing from the wheel, and an import of it fails there)."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                relative = init.parent.relative_to(ROOT / folder).parts
                found.add(".".join((package, *relative)))
    assert found - listed == set(), f"package folders missing from pyproject.toml's packages: {sorted(found - listed)}"
