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

from gemm_peak import PRECISE  # the finalists' protocol, the experiment beside this script
from grouped_convs import cells, interleaved_times
from residual_pairs import best_convs

from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.hardware import cpu_name
from schedule_gym.models.padding import flattened_task
from schedule_gym.operators import packed_task


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
            best = best_convs(path)
            print(path)
            for name, (_, config, task) in sorted(best.items()):
                flat = flattened_task(task)
                if flat is None or packed_task(flat).name not in best:
                    continue
                _, flat_config, flat_task = best[packed_task(flat).name]
                kernels = {"2-D": (backend, task, config), "row": (backend, flat_task, flat_config)}
                times = interleaved_times(kernels, task, args.rounds, args.threads)
                print(f"  {name:<52} {cells(times, task.flops)}  2-D/row {min(times['2-D']) / min(times['row']):.2f}x", flush=True)
                for key, ts in times.items():
                    totals[key] += min(ts)
        print("sum of the mins, one call each: " + ", ".join(f"{key} {t * 1e3:.3f} ms" for key, t in totals.items()))
    finally:
        backend.close()


if __name__ == "__main__":
    main()
