"""Does a TVM run slow down PyTorch timed right after it in the same process? An experiment.

TVM's thread-pool workers spin (``TVM_THREAD_POOL_SPIN_COUNT``, 300,000 by default) before they sleep when idle.
This script builds a zoo model's packed form with the calibrated mock's picks (no tuning), then, in each of
``--phases`` phases, times with ``--threads`` threads, 7 timings of at least 200 ms each: PyTorch eager alone, the
TVM build alone, then the two alternating (TVM, PyTorch, TVM, ...; ``--pause`` seconds of sleep after each TVM
timing, PyTorch's own included). It prints the median, min and every timing.
Compare runs with TVM's spinning as it is, stopped (``TVM_THREAD_POOL_SPIN_COUNT=0``, read once, when the pool
starts), and with ``--pause`` (PyTorch's timing starts after that sleep, as ``torch_latency``'s ``settle_s``):

    python examples/benchmarks/torch_after_tvm.py --model resnet18
    TVM_THREAD_POOL_SPIN_COUNT=0 python examples/benchmarks/torch_after_tvm.py --model resnet18
    python examples/benchmarks/torch_after_tvm.py --model resnet18 --pause 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--phases", type=int, default=2)
    parser.add_argument("--timings", type=int, default=7)
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds PyTorch sleeps before each timing (torch_latency's settle_s; default 0)")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_name
    from schedule_gym.models.build import compile_model, schedule_kernels, time_model
    from schedule_gym.models.pipeline import load_model, torch_latency

    loaded = load_model(args.model)
    executable = compile_model(schedule_kernels(loaded.mapped.packed(), untuned="mock"), host_llvm_target(args.threads))
    spin = os.environ.get("TVM_THREAD_POOL_SPIN_COUNT", "TVM's default")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, CPU {cpu_name()}, {args.threads} threads, {args.model}; "
          f"TVM_THREAD_POOL_SPIN_COUNT {spin}, pause {args.pause:g} s; ms per run, {args.timings} timings of at least 200 ms each")

    def torch_ms() -> float:
        return torch_latency(loaded.spec, args.threads, 1, settle_s=args.pause)[0] * 1e3

    def tvm_ms() -> float:
        return time_model(executable, loaded.spec.inputs, repeat=1, min_repeat_ms=200)[0] * 1e3

    def line(label: str, times: list[float]) -> str:
        return (f"{label:<30} median {statistics.median(times):7.1f}  min {min(times):7.1f}   "
                f"{[round(t, 1) for t in times]}")

    for phase in range(args.phases):
        alone = [torch_ms() for _ in range(args.timings)]
        tvm_alone = [tvm_ms() for _ in range(args.timings)]
        after, tvm_between = [], []
        for _ in range(args.timings):
            tvm_between.append(tvm_ms())
            after.append(torch_ms())
        print(f"phase {phase}")
        print(line("  PyTorch alone", alone))
        print(line("  TVM alone", tvm_alone))
        print(line("  PyTorch, each after TVM", after))
        print(line("  TVM, each after PyTorch", tvm_between), flush=True)


if __name__ == "__main__":
    main()
