"""The installed package's modules, found by walking it (not listed by hand), each imported: a module that
fails to import fails the documentation build with its traceback."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import shutil

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the docs extra installs tomli
    import tomli as tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def roots() -> list[str]:
    """The packages installed from their own folders (pyproject.toml's ``package-dir``: ``schedule_gym`` and
    the top-level ``agents/`` and ``baselines/`` installed as ``schedule_gym.agents`` and
    ``schedule_gym.baselines``), which a walk of ``schedule_gym``'s own folder would not find."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return sorted(setuptools.get("package-dir", {"schedule_gym": "schedule_gym"}))


#: Where the reference reads the package's source from (mkdocs.yml, mkdocstrings ``paths``; hooks.py writes it).
SOURCE_TREE = ROOT / "build" / "docs-src"


def source_tree() -> Path:
    """A copy of the package's Python source as installed, under ``build/docs-src``: the mkdocstrings
    handler reads source files by package path, and ``agents/`` and ``baselines/`` live outside
    ``schedule_gym/`` in the repository (pyproject.toml's ``package-dir``). Copied, not linked: Griffe
    resolves links to the repository's layout."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    if SOURCE_TREE.exists():
        shutil.rmtree(SOURCE_TREE)
    only_python = shutil.ignore_patterns("__pycache__", "*.gz", "*.json", "*.jsonl", "*.pt", "*.zip")
    for package, folder in sorted(mapping.items()):  # parents first: schedule_gym, then schedule_gym.agents
        shutil.copytree(ROOT / folder, SOURCE_TREE.joinpath(*package.split(".")), ignore=only_python)
    return SOURCE_TREE


def _is_optional(missing: str) -> bool:
    """Whether ``missing`` (an import name) is a package of an optional extra: its distribution's name,
    with or without a prefix or suffix (``apache-tvm`` gives ``tvm``, ``xgboost-cpu`` gives ``xgboost``)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {re.split(r"[\[<>=!~;, ]", req, maxsplit=1)[0].lower().replace("-", "_") for reqs in extras.values()
             for req in reqs}
    missing = missing.lower()
    return any(n == missing or n.endswith("_" + missing) or n.startswith(missing + "_") for n in names)


def _raise(name: str) -> None:
    raise ImportError(f"the documentation build could not import {name!r}")


def modules() -> dict[str, ModuleType | None]:
    """Every public module of the package, imported, by dotted name (``__main__`` modules are left out:
    importing one runs it). A module that needs an optional extra that is not installed (RLlib's masking
    without the ``rllib`` extra) maps to None: the reference documents it from its source. Any other
    import error fails."""
    found: dict[str, ModuleType | None] = {}
    for root in roots():
        package = importlib.import_module(root)
        found[root] = package
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{root}.", onerror=_raise):
            parts = info.name.split(".")
            if any(p.startswith("_") for p in parts):
                continue
            try:
                found[info.name] = importlib.import_module(info.name)
            except ModuleNotFoundError as error:
                missing = (error.name or "").split(".")[0]
                if not _is_optional(missing) or importlib.util.find_spec(missing) is not None:
                    raise
                found[info.name] = None
    return dict(sorted(found.items()))
