"""Pointwise convolutions as one row of pixels against their 2-D form, kernel by kernel.

``schedule_gym.models.padding`` gives a pointwise convolution (1x1, stride 1, no padding) whose output width has
none of the register tile's divisors 4, 6 and 8 the task of ``1 x P`` pixels (``P = h * w``, padded to a
multiple of 8 where it has none of them: 7 x 7 -> 56). For every packed 2-D pointwise convolution of a record
file whose flattened counterpart is in the file too, it times one of each per round (``--rounds``): the 2-D
task with its best recorded config, the flattened task with its best (its padded pixels computed; the copies of
the input in and of the result out, which the model's build does besides, not counted), and PyTorch's
``F.conv2d`` on the 2-D task's NHWC tensors (without the epilogue). Each timing is the best of 30 single calls
after 5 warm-ups (the finalists' protocol); every kernel's output is checked against the float64 reference.

    python examples/benchmarks/pointwise_rows.py runs/models-zen3/resnet50__xgb__packed__picks__seed0.jsonl

Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import statistics

from gemm_peak import PRECISE  # the finalists' protocol, the experiment beside this script
from residual_pairs import best_packed_convs

from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.hardware import cpu_name
from schedule_gym.models.padding import flattened_task
from schedule_gym.operators import packed_task
from schedule_gym.reference import library_task_times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", help="models' packed record files")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="threads of every kernel (default: all cores)")
    args = parser.parse_args()
    print(f"CPU {cpu_name()}; median (min) of {args.rounds} rounds, ms, and GFLOP/s of the 2-D task's work by the min")
    backend = TVMBackend(template="conv2d-cpu-v3", num_threads=args.threads, protocol=PRECISE)
    totals = {"2-D": 0.0, "row": 0.0, "torch": 0.0}
    try:
        for path in args.records:
            best = best_packed_convs(path)
            print(path)
            for name, (_, config, task) in sorted(best.items()):
                flat = flattened_task(task)
                if flat is None or packed_task(flat).name not in best:
                    continue
                _, flat_config, flat_task = best[packed_task(flat).name]
                times: dict = {key: [] for key in totals}
                for _ in range(args.rounds):
                    for key, kernel, kernel_config in (("2-D", task, config), ("row", flat_task, flat_config)):
                        result = backend.measure(kernel, [kernel_config])[0]
                        if not result.ok:
                            raise RuntimeError(f"{kernel.name} {kernel_config}: {result.error}")
                        times[key].append(result.latency_s)
                    torch_times = library_task_times(task, "torch", repeats=30, min_repeat_ms=0, warmup=5,
                                                     threads=args.threads)
                    times["torch"].append(min(torch_times.times_s))
                cells = "  ".join(f"{key} {statistics.median(ts) * 1e3:6.3f} ({min(ts) * 1e3:.3f}, "
                                  f"{task.flops / min(ts) * 1e-9:5.1f})" for key, ts in times.items())
                print(f"  {name:<52} {cells}  2-D/row {min(times['2-D']) / min(times['row']):.2f}x", flush=True)
                for key, ts in times.items():
                    totals[key] += min(ts)
        print("sum of the mins, one call each: " + ", ".join(f"{key} {t * 1e3:.3f} ms" for key, t in totals.items()))
    finally:
        backend.close()


if __name__ == "__main__":
    main()
