"""Draw a protocol's validation split from suites and write it as a frozen split file.

    .venv/bin/python examples/freeze_validation_split.py v1-validation --like v1 \\
        --suites zoo-vgg16,zoo-inceptionv3,zoo-densenet121,zoo-efficientnet-b0,zoo-vit-b16,zoo-gpt2 --per-suite 6

The draw is :meth:`schedule_gym.benchmark.protocol.Protocol.validation_tasks` of the protocol ``--like`` with
``validation=--suites`` and ``validation_per_suite=--per-suite``: per suite, in the suite's order, that many
layers (``numpy`` seed 0) among those whose computation is in neither of the protocol's splits and that fit its
layout. The tasks go to ``schedule_gym/data/splits/<name>.json`` (a suite file named ``<name>``, each task
``<name>/<network>.<layer>``), which the protocol then names as its whole validation split
(``validation="<name>", validation_per_suite=None``).

Why frozen: the suites are the mapping's output, and a change to the mapping (a new epilogue fused, which
renames a layer and regroups a suite's order) would move the draw, and with it every checkpoint choice made
on the split. The file keeps the tasks as they were drawn; the description records the commit of the draw.
A draw made later from changed suites is a different split: give it a new name.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
from pathlib import Path

from schedule_gym.benchmark.protocol import get_protocol
from schedule_gym.tasks.suite_files import write_suite_file

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "schedule_gym" / "data" / "splits"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the split's name (its file's stem and its tasks' suite prefix)")
    parser.add_argument("--like", required=True, help="the protocol whose splits and layout the draw avoids and fits")
    parser.add_argument("--suites", required=True, help="comma-separated suites to draw from")
    parser.add_argument("--per-suite", type=int, default=6, help="layers drawn per suite")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory of the split files")
    args = parser.parse_args()
    protocol = dataclasses.replace(get_protocol(args.like), validation=args.suites, validation_per_suite=args.per_suite)
    drawn = protocol.validation_tasks()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or "unknown"
    renamed = [dataclasses.replace(t, name=t.name.removeprefix("zoo-").replace("/", ".", 1)) for t in drawn]
    args.out.mkdir(parents=True, exist_ok=True)
    path = write_suite_file(
        args.out / f"{args.name}.json", args.name, [(t, 1) for t in renamed],
        description=f"protocol {args.like}'s validation split: {args.per_suite} layers per suite of {args.suites} "
                    f"drawn by Protocol.validation_tasks (numpy seed 0) at commit {commit}, frozen")
    print(f"{len(renamed)} tasks -> {path}")


if __name__ == "__main__":
    main()
