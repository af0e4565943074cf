"""How a fresh runner process times its first kernel runs, with and without OpenBLAS threads in it.

A new runner (forked from the zygote, see :mod:`schedule_gym.backends.tvm.workers`) makes the task's
inputs and its float64 reference with NumPy, then runs kernels. This script builds one GEMM 1024^3
kernel (a v1 config of about 30-40 ms on 2 threads) and, for each runner set-up, forks ``--trials``
fresh runners, times the kernel's first and second runs in each, and compares them with the same
kernel's steady time (the best of 5 further runs in the same runner). Set-ups:

* ``OPENBLAS_NUM_THREADS=1`` in the runner (what the backend does, ``RUNNER_ENV``) or OpenBLAS's own
  thread count, each with ``warmup_s`` 0 and 0.2 (NumPy matmuls before the first run: the old default);
* ``after a kill``: a runner forked right after another was killed in the middle of a slow kernel (a
  censored config), given 0.1 s (a build) before its first run, with and without the warm-up;
* ``parent BLAS``: a warm runner, while the *parent* has just run a NumPy matmul on all its threads
  (what an agent fitting a model right before a measurement does).

The first run decides whether a kernel is censored and is the whole figure of a coarse one: it must be
as fast as a steady run. Run it on a quiet machine.

    python examples/benchmarks/fresh_runner.py [--trials 8]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from schedule_gym import gemm
from schedule_gym.backends.tvm import builder, targets, workers
from schedule_gym.backends.tvm import runner as in_runner
from schedule_gym.hardware import cpu_name

#: a GEMM 1024^3 v1 config of about 30-40 ms with 2 threads on the Zen 4 of 2026-11-25
PROBE = ((16, 1, 32, 2), (64, 16), (8, 1, 16, 8))
#: one of over 1 s there: the kernel a runner is killed in
SLOW = ((2, 2, 128, 2), (512, 2), (1, 1024, 1, 1))


def first_runs(path: str, task, warmup_s: float, trials: int) -> tuple[list[float], list[float], list[float]]:
    """First, second and steady (best of 5 more) run seconds in ``trials`` fresh runners."""
    first, second, steady = [], [], []
    for _ in range(trials):
        time.sleep(0.5)  # the previous runner's threads idle, its memory freed
        runner = workers.ForkedWorker({"TVM_NUM_THREADS": "2"})
        try:
            runner.start()
            runner.call(in_runner.load_artifact, (path, task, "cpu", warmup_s), 60)
            first.append(runner.call(in_runner.first_run_loaded, (task, True), 60))
            second.append(runner.call(in_runner.first_run_loaded, (task, True), 60))
            steady.append(min(runner.call(in_runner.first_run_loaded, (task, True), 60) for _ in range(5)))
        finally:
            runner.close()
    return first, second, steady


def after_kill(path: str, slow_path: str, task, warmup_s: float, trials: int) -> tuple[list[float], list[float]]:
    """First and steady run seconds in runners forked right after a runner was killed mid-kernel."""
    first, steady = [], []
    for _ in range(trials):
        time.sleep(0.5)
        victim = workers.ForkedWorker({"TVM_NUM_THREADS": "2"})
        try:
            victim.call(in_runner.load_artifact, (slow_path, task, "cpu", 0.0), 60)
            victim.call(in_runner.first_run_loaded, (task, True), 0.15)  # killed at 0.15 s
        except TimeoutError:
            pass
        finally:
            victim.close()
        runner = workers.ForkedWorker({"TVM_NUM_THREADS": "2"})
        runner.task = task
        try:
            runner.call(in_runner.prepare_runner, (task, "cpu", warmup_s), 60)
            time.sleep(0.1)  # the next config's build
            runner.call(in_runner.load_artifact, (path, task, "cpu", warmup_s), 60)
            first.append(runner.call(in_runner.first_run_loaded, (task, True), 60))
            steady.append(min(runner.call(in_runner.first_run_loaded, (task, True), 60) for _ in range(5)))
        finally:
            runner.close()
    return first, steady


def parent_blas(path: str, task, trials: int) -> tuple[list[float], list[float]]:
    """Run seconds in a warm runner right after the parent's NumPy matmul, and without one."""
    after, quiet = [], []
    a = np.ones((1024, 1024), dtype=np.float32)
    runner = workers.ForkedWorker({"TVM_NUM_THREADS": "2"})
    try:
        runner.call(in_runner.load_artifact, (path, task, "cpu", 0.0), 60)
        for _ in range(3):
            runner.call(in_runner.first_run_loaded, (task, True), 60)
        for _ in range(trials):
            time.sleep(0.5)
            quiet.append(runner.call(in_runner.first_run_loaded, (task, True), 60))
            time.sleep(0.5)
            a @ a
            after.append(runner.call(in_runner.first_run_loaded, (task, True), 60))
    finally:
        runner.close()
    return after, quiet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    args = parser.parse_args()
    task = gemm(1024, 1024, 1024)
    target = targets.resolve_target("llvm", 2)
    med = statistics.median
    print(f"GEMM 1024^3 gemm-cpu {PROBE}, 2 threads, CPU {cpu_name()}, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"{args.trials} fresh runners a row; ms")
    print(f"{'runner set-up':44s} {'first min/med':>15s} {'second med':>11s} {'steady med':>11s} {'first/steady':>13s}")
    with tempfile.TemporaryDirectory() as tmp:
        path, slow_path = str(Path(tmp) / "probe.so"), str(Path(tmp) / "slow.so")
        builder.build_artifact(task, PROBE, "gemm-cpu", target, path)
        builder.build_artifact(task, SLOW, "gemm-cpu", target, slow_path)
        saved = dict(workers.RUNNER_ENV)
        try:
            for label, env in (("OPENBLAS_NUM_THREADS=1 (RUNNER_ENV)", saved), ("OpenBLAS's own threads", {})):
                workers.RUNNER_ENV.clear()
                workers.RUNNER_ENV.update(env)
                workers.restart_zygote()  # a zygote with this environment
                for warmup_s in (0.0, 0.2):
                    first, second, steady = first_runs(path, task, warmup_s, args.trials)
                    print(f"{label + f', warmup_s {warmup_s:g}':44s} {min(first) * 1e3:6.1f}/{med(first) * 1e3:6.1f} "
                          f"{med(second) * 1e3:11.1f} {med(steady) * 1e3:11.1f} {med(first) / med(steady):13.2f}")
        finally:
            workers.RUNNER_ENV.clear()
            workers.RUNNER_ENV.update(saved)
            workers.restart_zygote()
        for warmup_s in (0.0, 0.2):
            first, steady = after_kill(path, slow_path, task, warmup_s, args.trials)
            print(f"{f'after a kill, warmup_s {warmup_s:g}':44s} {min(first) * 1e3:6.1f}/{med(first) * 1e3:6.1f} "
                  f"{'':11s} {med(steady) * 1e3:11.1f} {med(first) / med(steady):13.2f}")
        after, quiet = parent_blas(path, task, args.trials)
        print(f"{'warm runner, parent quiet':44s} {min(quiet) * 1e3:6.1f}/{med(quiet) * 1e3:6.1f}")
        print(f"{'warm runner, parent just ran a NumPy matmul':44s} {min(after) * 1e3:6.1f}/{med(after) * 1e3:6.1f} "
              f"{'':11s} {'':11s} {med(after) / med(quiet):13.2f}")


if __name__ == "__main__":
    main()
