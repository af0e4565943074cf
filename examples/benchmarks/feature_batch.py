"""Milliseconds to compute the ``"features"`` observation of one vector step three ways, side by side in one process:
one pass per task (the code before the grouping); one pass per group of tasks with equal loop nests and operand
expressions, each task's factors looked up from its config indices (the code before the stacked tables); and
``FeatureTables.config_part`` as shipped, the group's factors one gather per dimension from its tasks' stacked
factor tables.

The batch is what a step of the multi-task vector environment computes: ``--num-envs`` configs drawn uniformly
from a protocol's training tasks (``MultiTask-v0``'s default, protocol v1's training split). The ways alternate
``--repeats`` times; min and median of each, and the check that all give the same bits::

    taskset -c 0,1 python examples/benchmarks/feature_batch.py --num-envs 1024 --repeats 30
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark.protocol import get_protocol
from schedule_gym.envs.features import FeatureTables, machine_profile
from schedule_gym.hardware import cpu_identity
from schedule_gym.spaces import TileSpace


def per_task(tables: FeatureTables, tasks: np.ndarray, rows: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``tables.config_part`` as it was before the grouping: one NumPy pass per task."""
    out = np.empty((indices.shape[0], tables.config_size), dtype=np.float32)
    out[:, : tables.layout.size] = tables.factors.of_rows(tasks, rows)
    for t in np.unique(tasks).tolist():
        at = tasks == t
        out[at, tables.layout.size:] = tables._nests[t].config_part(indices[at])
    return out


def grouped_by_index(tables: FeatureTables, tasks: np.ndarray, rows: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``tables.config_part`` as it was before the stacked tables: one pass per group, each task's factors from
    its configs' indices (``TileSpace.factors_of_indices``), concatenated."""
    out = np.empty((indices.shape[0], tables.config_size), dtype=np.float32)
    out[:, : tables.layout.size] = tables.factors.of_rows(tasks, rows)
    groups: dict[int, list[int]] = {}
    for t in np.unique(tasks).tolist():
        groups.setdefault(int(tables._group[t]), []).append(t)
    for members in groups.values():
        spans = [np.flatnonzero(tasks == t) for t in members]
        nests = [tables._nests[t] for t in members]
        per_task = [nest.space.factors_of_indices(indices[span]) for nest, span in zip(nests, spans)]
        factors = [np.concatenate(parts) for parts in zip(*per_task)]
        point_flops = np.concatenate([np.full(len(span), nest.point_flops) for nest, span in zip(nests, spans)])
        params = np.concatenate([np.broadcast_to(nest.params, (len(span), len(nest.params))) for nest, span in zip(nests, spans)])
        out[np.concatenate(spans), tables.layout.size:] = nests[0].features(factors, point_flops, params)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", default="v1")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    protocol = get_protocol(args.protocol)
    tasks = protocol.train_tasks()
    spaces = [TileSpace(t) for t in tasks]
    tables = FeatureTables(spaces, protocol.layout(), machine_profile(MockBackend(profile=protocol.profile)))
    rng = np.random.default_rng(0)
    which = rng.integers(len(tasks), size=args.num_envs)
    indices = np.array([rng.integers(spaces[t].size) for t in which])
    rows = np.zeros((args.num_envs, max(len(s.dims) for s in spaces)), dtype=np.int64)
    for i, (t, index) in enumerate(zip(which, indices)):
        got = spaces[t].rows_of_index(int(index))
        rows[i, : len(got)] = got
    ways = {"per task": lambda: per_task(tables, which, rows, indices),
            "grouped, factors by index": lambda: grouped_by_index(tables, which, rows, indices),
            "grouped, stacked tables": lambda: tables.config_part(which, rows)}
    first = ways["per task"]()
    same = all(np.array_equal(first, way()) for way in ways.values())
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, way in ways.items():
            t0 = time.perf_counter()
            way()
            times[name].append((time.perf_counter() - t0) * 1e3)
    print(f"{time.strftime('%Y-%m-%d')}  {cpu_identity().describe()}; protocol {protocol.name}'s {len(tasks)} training "
          f"tasks in {len(set(tables._group.tolist()))} groups; {args.num_envs} configs a step; {args.repeats} "
          f"repeats alternating; bit-equal: {same}")
    print("| feature pass | min ms | median ms |\n|---|---:|---:|")
    for name, values in times.items():
        print(f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} |")
    shipped = statistics.median(times["grouped, stacked tables"])
    for name in ("per task", "grouped, factors by index"):
        print(f"{name} / grouped, stacked tables (median): {statistics.median(times[name]) / shipped:.2f}x")


if __name__ == "__main__":
    main()
