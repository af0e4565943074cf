"""Write the suite file of every full-size zoo network: its distinct tunable tasks and their weights.

    .venv/bin/python examples/make_zoo_suites.py                  # every network -> schedule_gym/data/suites/
    .venv/bin/python examples/make_zoo_suites.py vgg16 gpt2       # some of them
    .venv/bin/python examples/make_zoo_suites.py --out /tmp/suites

Each network (``schedule_gym.models.zoo.NETWORKS``, seed 0) is built, imported into TVM Relax and mapped
(``schedule_gym.models.pipeline.load_model``, what ``tune-model`` tunes); its mapped tasks, named
``zoo-<network>/<kernel>``, go to ``<out>/zoo-<network>.json`` (``schedule_gym.tasks.suite_files``), the suite
``zoo-<network>`` of :func:`schedule_gym.tasks.get_suite` (the prefix keeps the mapped ResNets, MobileNet-V2
and BERT-base apart from the hand-written suites of the same networks). The mapping
report (what was mapped, refused and left to TVM) is printed. Needs PyTorch and TVM; a full-size network
takes a minute or more to import and map.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from schedule_gym.models.pipeline import load_model
from schedule_gym.models.zoo import MODELS, NETWORKS
from schedule_gym.tasks.suite_files import write_suite_file

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "schedule_gym" / "data" / "suites"


def write_network_suite(name: str, out: Path) -> Path:
    loaded = load_model(name)
    suite = f"zoo-{name}"
    path = write_suite_file(out / f"{suite}.json", suite, [(t.task, t.weight) for t in loaded.mapped.tasks],
                            description=f"{MODELS[name]}; seed 0, mapped by schedule_gym.models.pipeline.load_model")
    calls = sum(t.weight for t in loaded.mapped.tasks)
    print(f"{name}: {len(loaded.mapped.tasks)} tasks, {calls} kernel calls -> {path}")
    for line in loaded.report_lines():
        print(f"  {line}")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("networks", nargs="*", help=f"default: all of {', '.join(NETWORKS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="directory of the suite files")
    args = parser.parse_args()
    unknown = [n for n in args.networks if n not in NETWORKS]
    if unknown:
        parser.error(f"not full-size zoo networks: {', '.join(unknown)}; known: {', '.join(NETWORKS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.networks or NETWORKS:
        write_network_suite(name, args.out)


if __name__ == "__main__":
    main()
