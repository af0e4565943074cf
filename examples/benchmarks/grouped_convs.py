"""Grouped convolutions (ResNeXt's) in the packed template against the direct one and PyTorch, kernel by kernel.

For every grouped conv2d task of a model's record file that was tuned in both forms (the direct template
``conv2d-cpu``'s task and its packed form ``...-packed``, ``conv2d-cpu-v3``), it times, one of each per round
(``--rounds``): the direct task with its best recorded config, the packed task with its best recorded config,
and PyTorch's ``F.conv2d`` on the same NHWC (channels_last) tensors. Each timing is the best of 30 single calls
after 5 warm-ups (the finalists' protocol, PyTorch's too); every kernel's output is checked against the float64
reference as always.

    python examples/benchmarks/grouped_convs.py runs/models-zen3/resnext50__xgb__packed__picks__seed0.jsonl

Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics

from gemm_peak import PRECISE  # the finalists' protocol, the experiment beside this script
from residual_pairs import best_convs

from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.hardware import cpu_name
from schedule_gym.reference import library_task_times


def interleaved_times(kernels: dict, torch_task, rounds: int, threads: int | None) -> dict:
    """Per key, the best-of-30 time of each round: the kernels (key -> (backend, task, config)), one of each per
    round, then PyTorch's kernel of ``torch_task`` (key ``"torch"``)."""
    times: dict = {key: [] for key in (*kernels, "torch")}
    for _ in range(rounds):
        for key, (backend, task, config) in kernels.items():
            result = backend.measure(task, [config])[0]
            if not result.ok:
                raise RuntimeError(f"{task.name} {config}: {result.error}")
            times[key].append(result.latency_s)
        torch_times = library_task_times(torch_task, "torch", repeats=30, min_repeat_ms=0, warmup=5, threads=threads)
        times["torch"].append(min(torch_times.times_s))
    return times


def cells(times: dict, flops: float) -> str:
    """Each key's median (min, GFLOP/s by the min)."""
    return "  ".join(f"{key} {statistics.median(ts) * 1e3:6.3f} ({min(ts) * 1e3:.3f}, {flops / min(ts) * 1e-9:5.1f})"
                     for key, ts in times.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="a model's record file holding both forms of its grouped convolutions")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="threads of every kernel (default: all cores)")
    args = parser.parse_args()
    best = best_convs(args.records, keep=lambda task: task.param("groups") > 1)
    pairs = [(name, f"{name}-packed") for name in sorted(best) if f"{name}-packed" in best]
    if not pairs:
        raise SystemExit(f"{args.records}: no grouped convolution tuned in both forms")
    print(f"CPU {cpu_name()}; {args.records}; median (min) of {args.rounds} rounds, ms and GFLOP/s by the min")
    direct = TVMBackend(template="conv2d-cpu", num_threads=args.threads, protocol=PRECISE)
    packed = TVMBackend(template="conv2d-cpu-v3", num_threads=args.threads, protocol=PRECISE)
    try:
        totals = {"direct": 0.0, "packed": 0.0, "torch": 0.0}
        for name, packed_name in pairs:
            (_, direct_config, direct_task), (_, packed_config, packed_task) = best[name], best[packed_name]
            kernels = {"direct": (direct, direct_task, direct_config), "packed": (packed, packed_task, packed_config)}
            times = interleaved_times(kernels, direct_task, args.rounds, args.threads)
            print(f"{name:<48} {cells(times, direct_task.flops)}  direct/packed {min(times['direct']) / min(times['packed']):.2f}x  "
                  f"torch/packed {min(times['torch']) / min(times['packed']):.2f}x", flush=True)
            for key, ts in times.items():
                totals[key] += min(ts)
        print("sum of the mins, one call each: " + ", ".join(f"{key} {t * 1e3:.3f} ms" for key, t in totals.items()))
    finally:
        direct.close()
        packed.close()


if __name__ == "__main__":
    main()
