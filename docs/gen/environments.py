"""One page per registered environment id (docs/environments/), generated from the registry and from the
docstring of the class each id makes, so a page cannot drift from the code.

The class is read through the registry's entry point, never a hard-coded module: an entry point that is a
class is the class; a factory is resolved by its return annotation, else by making the environment (with
the mock backend, so no kernel is built) and taking ``env.unwrapped.__class__``.
"""

from __future__ import annotations

import inspect
import sys
import typing
from pathlib import Path

import gymnasium
import mkdocs_gen_files
from gymnasium.envs.registration import load_env_creator, registry

import schedule_gym
from schedule_gym.registration import ENV_IDS

sys.path.insert(0, str(Path(__file__).parent))
from markup import docstring_to_markdown, sections  # noqa: E402

#: The sections every environment class documents, in Gymnasium's order.
EXPECTED = ("Description", "Action Space", "Observation Space", "Rewards", "Starting State", "Episode End",
            "Arguments", "Version History")


def qualified(obj: object) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def env_class(env_id: str) -> type[gymnasium.Env]:
    """The class ``gymnasium.make(env_id)`` builds (below its wrappers)."""
    creator = load_env_creator(registry[env_id].entry_point) if isinstance(registry[env_id].entry_point, str) \
        else registry[env_id].entry_point
    if inspect.isclass(creator) and issubclass(creator, gymnasium.Env):
        return creator
    try:
        returned = typing.get_type_hints(creator).get("return")
    except NameError:  # an annotation only importable while type checking: make the environment instead
        returned = None
    if inspect.isclass(returned) and issubclass(returned, gymnasium.Env):
        return returned
    kwargs = {"backend": "mock"} if "backend" in registry[env_id].kwargs else {}
    env = gymnasium.make(env_id, **kwargs)
    try:
        return type(env.unwrapped)
    finally:
        env.close()


def entry_point_name(entry_point: object) -> str:
    return entry_point if isinstance(entry_point, str) else qualified(entry_point)


def kwargs_text(kwargs: dict) -> str:
    return ", ".join(f"`{k}={v!r}`" for k, v in kwargs.items()) or "none"


def slug(env_id: str) -> str:
    return env_id.split("/", 1)[1]


def summary_line(text: str) -> str:
    return text.strip().split("\n\n")[0].replace("\n", " ")


def page(env_id: str) -> str:
    spec = registry[env_id]
    cls = env_class(env_id)
    creator_name = entry_point_name(spec.entry_point)
    creator = load_env_creator(creator_name) if isinstance(spec.entry_point, str) else spec.entry_point
    intro, parts = sections(docstring_to_markdown(inspect.getdoc(cls) or ""))
    missing = [s for s in EXPECTED if s not in dict(parts)]
    if missing:
        raise ValueError(f"{qualified(cls)} (the class of {env_id}) documents no section {', '.join(missing)}")
    rows = [
        ("`gymnasium.make`", f'`gymnasium.make("{env_id}")`'),
        ("Entry point", f"`{creator_name}`"),
        ("Environment class", f"[`{qualified(cls)}`][{qualified(cls)}]"),
        ("Registered keyword arguments", kwargs_text(spec.kwargs)),
        ("Step limit (`TimeLimit`)", str(spec.max_episode_steps) if spec.max_episode_steps else "none: the episode ends itself"),
        ("Deterministic", "no (`nondeterministic=True`)" if spec.nondeterministic else "yes"),
        ("Native vector environment", f"`{entry_point_name(spec.vector_entry_point)}` "
         f'(`gymnasium.make_vec("{env_id}", num_envs=N)`)' if spec.vector_entry_point else
         'none: `gymnasium.make_vec(..., vectorization_mode="sync")` or `"async"`'),
    ]
    lines = [f"# {env_id}", "", summary_line(intro), "", "| registration | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    if not inspect.isclass(creator):
        lines += ["", "## Entry point", "", f"`{creator_name}`: " + docstring_to_markdown(inspect.getdoc(creator) or "")]
    rest = intro.split("\n\n", 1)[1].strip() if "\n\n" in intro.strip() else ""
    if rest:
        lines += ["", rest]
    for heading, body in parts:
        lines += ["", f"## {heading}", "", body]
    lines += ["", "---", "",
              f"*Generated from the docstring of `{qualified(cls)}` and the registration of `{env_id}` "
              f"(schedule-gym {schedule_gym.__version__}).*"]
    return "\n".join(lines) + "\n"


def index() -> str:
    lines = ["# Environments", "",
             "Every id is registered when `schedule_gym` is imported. Each page below is generated from the",
             "registry (entry point, keyword arguments, step limit, vector entry point) and from the docstring of",
             "the class the id makes, so it documents exactly what `gymnasium.make` returns.",
             "Ids change version when their behaviour changes: see [Versioning of environment ids](../versioning.md).",
             "", "| id | environment class | registered keyword arguments | deterministic |", "|---|---|---|---|"]
    for env_id in ENV_IDS:
        spec, cls = registry[env_id], env_class(env_id)
        lines.append(f"| [`{env_id}`]({slug(env_id)}.md) | `{cls.__name__}` | {kwargs_text(spec.kwargs)} "
                     f"| {'no' if spec.nondeterministic else 'yes'} |")
    return "\n".join(lines) + "\n"


nav = ["* [Overview](index.md)"]
for env_id in ENV_IDS:
    with mkdocs_gen_files.open(f"environments/{slug(env_id)}.md", "w") as f:
        f.write(page(env_id))
    nav.append(f"* [{env_id}]({slug(env_id)}.md)")
with mkdocs_gen_files.open("environments/index.md", "w") as f:
    f.write(index())
with mkdocs_gen_files.open("environments/SUMMARY.md", "w") as f:
    f.write("\n".join(nav) + "\n")
