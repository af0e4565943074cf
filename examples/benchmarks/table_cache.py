"""The mock's disk cache of whole latency tables: scoring a protocol split's spaces against loading them.

For each task of ``--protocol``'s ``--split`` (on the protocol's mock profile): its space's size, the seconds a
first ``MockBackend.whole_table`` took to score it (and write it, from ``MIN_CONFIGS`` configs up; ``nan`` where
the cache held it already), the seconds a fresh backend's took to get it again (read from the cache, or scored
again below ``MIN_CONFIGS``), and whether the two are equal to the bit. Set ``SCHEDULE_GYM_CACHE`` to an empty
folder to start cold; the tables stay there. ``--chunked`` adds the seconds ``all_latencies`` took before tables
had a whole form: the table of a backend serving several (as the multi-task environment's do) asked for
2**20 configs at a time, each scored as asked. ``--tasks`` keeps the first N tasks.

    SCHEDULE_GYM_CACHE=/tmp/tables python examples/benchmarks/table_cache.py --protocol v1 --split train
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from schedule_gym import MockBackend
from schedule_gym.backends.mock import table_cache
from schedule_gym.benchmark import get_protocol
from schedule_gym.benchmark.oracle import all_latencies
from schedule_gym.benchmark.protocol import SPLITS
from schedule_gym.cache import cache_dir
from schedule_gym.hardware import cpu_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="v1")
    parser.add_argument("--split", default="train", choices=SPLITS)
    parser.add_argument("--chunked", action="store_true", help="also time the chunked scoring (slow)")
    parser.add_argument("--tasks", type=int, default=None, help="the first N tasks only")
    args = parser.parse_args()
    protocol = get_protocol(args.protocol)
    tasks = protocol.split_tasks(args.split)[: args.tasks]
    print(f"{args.protocol} {args.split}: {len(tasks)} tasks, profile {protocol.profile}; CPU {cpu_name()}, "
          f"{time.strftime('%Y-%m-%d')}; cache {cache_dir()}; tables kept from {table_cache.MIN_CONFIGS:,} configs")
    print(f"{'task':44s} {'configs':>12s} {'score s':>9s} {'again s':>8s} equal" + (f" {'chunked s':>10s}" if args.chunked else ""))
    sizes, scored_s, again_s = [], [], []
    for task in tasks:
        backend = MockBackend(protocol.profile)
        size = backend.space(task).size
        cold = not table_cache.table_path(backend.table_key(task)).is_file()
        t0 = time.perf_counter()
        first = backend.whole_table(task)  # scored (and written, from MIN_CONFIGS up) if cold
        score_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        loaded = MockBackend(protocol.profile).whole_table(task)
        load_s = time.perf_counter() - t0
        equal = bool(np.array_equal(first, loaded))
        sizes.append(size)
        again_s.append(load_s)
        if cold:
            scored_s.append(score_s)
        chunked = ""
        if args.chunked:
            backend = MockBackend(protocol.profile)
            space = backend.space(task)
            backend.latency_table(task, space)  # a second table: the multi-task environment's way of filling
            table = backend.latency_table(task, space)
            t0 = time.perf_counter()
            equal &= bool(np.array_equal(all_latencies(lambda indices: table(indices), size), loaded))
            chunked = f" {time.perf_counter() - t0:10.2f}"
        print(f"{task.name[:44]:44s} {size:12,d} {score_s if cold else float('nan'):9.2f} {load_s:8.3f} {equal}"
              + chunked, flush=True)
    print(f"{'all':44s} {sum(sizes):12,d} {sum(scored_s):9.1f} {sum(again_s):8.2f}  ({len(scored_s)} scored cold)")


if __name__ == "__main__":
    main()
