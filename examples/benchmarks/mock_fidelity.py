"""How well each mock profile ranks configs that were measured for real: per task of some record files, Spearman's
rank correlation between the real latencies and each profile's mock latencies, and what trusting the mock would
cost.

A policy or cost model trained on the mock is led by the mock's ranking of configs; where that ranking is wrong
on a layer, no amount of training on the mock helps there. This reads real TVM records (any agent's, any number
of files; censored and failed measurements are left out) and reports per task and profile:

* ``rho``: Spearman's rank correlation of mock and real latency over the measured configs
  (:func:`schedule_gym.calibration.spearman`);
* ``pick``: the real latency of the config the mock ranks fastest among them, over the fastest measured one
  (1.00: the mock's favourite is the real best; 20: it is 20 times slower);
* ``top10``: the same for the best of the mock's ten favourites.

Figures describe the records' CPU (named from the records' host and target as stored), not this machine's.

    python examples/benchmarks/mock_fidelity.py runs/real-heldout-<date>-<cpu> \\
        --profiles znver5-2core-fitted sapphirerapids-2core-fitted [--out examples/results/mock-fidelity/X.md]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from schedule_gym.backends import PROFILES
from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.calibration import spearman
from schedule_gym.records import RecordStore

#: the mock's favourites whose best real latency ``top10`` reports
TOP = 10


def fidelity(real: np.ndarray, mock: np.ndarray) -> dict[str, float]:
    """``rho``, ``pick`` and ``top10`` (module docstring) of one task's real and mock latencies, config by config."""
    order = np.argsort(mock, kind="stable")
    return {"rho": spearman(real, mock), "pick": float(real[order[0]] / real.min()),
            "top10": float(real[order[:TOP]].min() / real.min())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", type=Path,
                        help="TVM record files (.jsonl), or folders of them (every *.jsonl inside)")
    parser.add_argument("--profiles", nargs="+", default=["znver5-2core-fitted", "sapphirerapids-2core-fitted"],
                        choices=list(PROFILES))
    parser.add_argument("--min-configs", type=int, default=20, help="tasks with fewer measured configs are skipped")
    parser.add_argument("--out", type=Path, help="also write the table here (Markdown)")
    args = parser.parse_args()
    measured: dict[str, dict] = defaultdict(dict)  # task key -> config -> real latency
    tasks, targets = {}, set()
    missing = [str(p) for p in args.records if not p.exists()]
    if missing:
        parser.error(f"no such record file or folder: {', '.join(missing)}")
    files = [f for p in args.records for f in (sorted(p.glob("*.jsonl")) if p.is_dir() else [p])]
    if not files:
        parser.error(f"no record files in {' '.join(map(str, args.records))}")
    for path in files:
        store = RecordStore(path, fsync=False)
        try:
            for record in store:
                r = record.result
                if r.error is None and not r.censored and r.latency_s is not None and record.backend == "tvm":
                    measured[record.task.key][r.config] = r.latency_s
                    tasks[record.task.key] = record.task
                    targets.add(f"{record.host}: {record.target}")
        finally:
            store.close()
    backends = {p: MockBackend(profile=p) for p in args.profiles}
    lines = [f"records of {', '.join(sorted(targets))}", "",
             "| task | configs | " + " | ".join(f"{p} rho / pick / top{TOP}" for p in args.profiles) + " |",
             "|---|---:|" + "---:|" * len(args.profiles)]
    for key, configs in sorted(measured.items(), key=lambda kv: tasks[kv[0]].name):
        if len(configs) < args.min_configs:
            continue
        task = tasks[key]
        space = backends[args.profiles[0]].space(task)
        indices = np.array([space.index(c) for c in configs], dtype=np.int64)
        real = np.array(list(configs.values()))
        cells = []
        for backend in backends.values():
            f = fidelity(real, backend.model_latency_s(task, indices))
            cells.append(f"{f['rho']:.3f} / {f['pick']:.2f} / {f['top10']:.2f}")
        lines.append(f"| {task.name} | {len(configs)} | " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        default = args.min_configs == parser.get_default("min_configs")
        min_configs = "" if default else f" --min-configs {args.min_configs}"
        args.out.write_text(f"`python examples/benchmarks/mock_fidelity.py {' '.join(map(str, args.records))} "
                            f"--profiles {' '.join(args.profiles)}{min_configs}`\n\n" + text)


if __name__ == "__main__":
    main()
