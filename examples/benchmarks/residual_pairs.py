"""What reading a residual in a convolution's epilogue costs: each ``+res`` task of a record file against its
plain counterpart, each with its own best config and with the other's, timed in interleaved rounds.

For every packed conv2d task named ``...+res[+act]-packed`` in the record file whose counterpart without the
residual (``...+bias-packed``: the same convolution, the add and activation left to TVM) is in the file too, it
times four kernels, one of each per round (``--rounds``): the residual task with its best recorded config and
with the counterpart's, the counterpart with its own and with the residual task's. Each timing is the best of
30 single calls after 5 warm-ups (the finalists' protocol); every kernel's output is checked against the
float64 reference as always. Same config, the two tasks differ only by the epilogue's read of ``R``; same task,
the two configs show how much of a difference between the models' builds is the search's.

    python examples/benchmarks/residual_pairs.py runs/models-zen3/resnet50__xgb__packed__picks__seed0.jsonl

Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics

from gemm_peak import PRECISE  # the finalists' protocol, the experiment beside this script

from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.hardware import cpu_name
from schedule_gym.records import RecordStore


def best_convs(path: str, keep=lambda task: task.name.endswith("-packed")) -> dict:
    """Task name -> (latency, config, task) of the best successful, uncensored measurement of each conv2d task that
    ``keep`` accepts (default: the packed ones)."""
    best: dict = {}
    for record in RecordStore(path):
        result, task = record.result, record.task
        if task.op != "conv2d" or not keep(task) or not result.ok or result.censored:
            continue
        if task.name not in best or result.latency_s < best[task.name][0]:
            best[task.name] = (result.latency_s, tuple(result.config), task)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="a model's packed record file")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    best = best_convs(args.records)
    print(f"CPU {cpu_name()}; {args.records}; median (min) of {args.rounds} rounds, ms")
    backend = TVMBackend(template="conv2d-cpu-v3", protocol=PRECISE)
    try:
        for name in sorted(best):
            plain_name = name.replace("+res+relu", "").replace("+res", "")
            if "+res" not in name or plain_name not in best:
                continue
            (_, res_cfg, res_task), (_, plain_cfg, plain_task) = best[name], best[plain_name]
            kernels = {"residual, its config": (res_task, res_cfg), "residual, plain's config": (res_task, plain_cfg),
                       "plain, its config": (plain_task, plain_cfg), "plain, residual's config": (plain_task, res_cfg)}
            times: dict = {key: [] for key in kernels}
            for _ in range(args.rounds):
                for key, (task, config) in kernels.items():
                    result = backend.measure(task, [config])[0]
                    if not result.ok:
                        raise RuntimeError(f"{task.name} {config}: {result.error}")
                    times[key].append(result.latency_s)
            print(f"{name} (plain: {plain_name})")
            for key, ts in times.items():
                print(f"   {key:<26} {statistics.median(ts) * 1e3:7.3f} ({min(ts) * 1e3:.3f})")
    finally:
        backend.close()


if __name__ == "__main__":
    main()
