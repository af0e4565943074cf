"""Grouped and depthwise convolutions in the packed template against the direct one and PyTorch, kernel by kernel.

For every grouped conv2d task (depthwise ones included) of a model's record file that was tuned in both forms (the
direct template ``conv2d-cpu``'s task and its packed form ``...-packed``), it times, one of each per round
(``--rounds``): the direct task with its best recorded config, the packed task with its best recorded config
(``--packed-template``, default conv2d's packed template, ``conv2d-cpu-v5``; the packed records of ResNeXt-50 before
v5 were measured with ``conv2d-cpu-v3``), and PyTorch's ``F.conv2d`` on the same NHWC (channels_last) tensors. Each
timing is the best of 30 single calls after 5 warm-ups (the finalists' protocol, PyTorch's too); every kernel's output
is checked against the float64 reference as always.

With ``--model``, it first tunes the model's grouped convolutions in both forms into the record file (created or
resumed), as the models benchmark tunes a model (``examples/benchmarks/models.py``: ``tune_model`` with the same
agent, ``--budget-per-task`` measurements a task, the packed form's analytical picks first and each task's pick among
its finalists re-timed): the direct tasks in one schedule, the packed ones in another.

    python examples/benchmarks/grouped_convs.py runs/models-zen3/resnext50__xgb__packed__picks__seed0.jsonl \\
        --packed-template conv2d-cpu-v3
    python examples/benchmarks/grouped_convs.py runs/depthwise/mobilenetv2.jsonl --model mobilenetv2

Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

from gemm_peak import PRECISE  # the finalists' protocol, the experiment beside this script
from residual_pairs import best_convs

from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.hardware import cpu_identity
from schedule_gym.reference import library_task_times
from schedule_gym.templates import PACKED, packed_conv2d


def is_grouped_conv(task) -> bool:
    """Whether ``task`` is a grouped convolution (depthwise ones included): the layers this script compares."""
    return task.op == "conv2d" and task.param("groups") > 1


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


def tune_both_forms(model: str, records: str, budget_per_task: int, agent: str, threads: int) -> dict[str, int]:
    """Tune ``model``'s grouped convolutions in their direct and packed forms into ``records`` (see the module
    docstring); returns each direct task's calls in a pass of the model."""
    from schedule_gym.models.pipeline import load_model
    from schedule_gym.models.tuning import tune_model

    mapped = load_model(model).mapped
    grouped = [t for t in mapped.tasks if is_grouped_conv(t.task)]
    if not grouped:
        raise SystemExit(f"{model} has no grouped convolution")
    direct = dataclasses.replace(mapped, tasks=grouped)
    for label, form in (("direct", direct), ("packed", direct.packed(pad=False))):
        start = time.perf_counter()
        result = tune_model(form, budget_per_task * len(form.tasks), agent=agent, backend="tvm",
                            backend_options={"num_threads": threads}, records=records)
        print(f"{model}: {len(form.tasks)} {label} tasks, {result.measurements} new measurements in "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    return direct.task_weights()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", help="a record file holding both forms of a model's grouped convolutions")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="threads of every kernel (default: all cores)")
    parser.add_argument("--packed-template", default=PACKED["conv2d"],
                        help="the template the packed records were measured with (default: conv2d's packed template)")
    parser.add_argument("--model", help="a zoo model whose grouped convolutions to tune into RECORDS first")
    parser.add_argument("--budget-per-task", type=int, default=25, help="with --model: measurements a task and form")
    parser.add_argument("--agent", default="xgb", help="with --model: the tuning agent (the models benchmark's)")
    args = parser.parse_args()
    packed_names = [f"conv2d-cpu-v{version}" for version in packed_conv2d.VERSIONS]
    if args.packed_template not in packed_names:
        parser.error(f"--packed-template: {args.packed_template!r} is not one of conv2d's packed CPU templates "
                     f"({', '.join(packed_names)})")
    if args.budget_per_task < 1 or args.rounds < 1:
        parser.error("--budget-per-task and --rounds must be at least 1")
    print(f"CPU {cpu_identity().describe()}; {args.records}; median (min) of {args.rounds} rounds, ms and GFLOP/s by "
          f"the min; packed: {args.packed_template}", flush=True)
    calls: dict[str, int] = {}  # a task's calls in a pass of --model's (else one each)
    if args.model:  # the record file and its folder are created by its first measurement
        calls = tune_both_forms(args.model, args.records, args.budget_per_task, args.agent,
                                args.threads or os.cpu_count() or 1)
    best = best_convs(args.records, keep=is_grouped_conv)
    pairs = [(name, f"{name}-packed") for name in sorted(best) if f"{name}-packed" in best]
    if not pairs:
        raise SystemExit(f"{args.records}: no grouped convolution tuned in both forms")
    direct = TVMBackend(template="conv2d-cpu", num_threads=args.threads, protocol=PRECISE)
    packed = TVMBackend(template=args.packed_template, num_threads=args.threads, protocol=PRECISE)
    try:
        totals = {"direct": 0.0, "packed": 0.0, "torch": 0.0}
        for name, packed_name in pairs:
            (_, direct_config, direct_task), (_, packed_config, packed_task) = best[name], best[packed_name]
            kernels = {"direct": (direct, direct_task, direct_config), "packed": (packed, packed_task, packed_config)}
            times = interleaved_times(kernels, direct_task, args.rounds, args.threads)
            print(f"{name:<48} {cells(times, direct_task.flops)}  direct/packed {min(times['direct']) / min(times['packed']):.2f}x  "
                  f"torch/packed {min(times['torch']) / min(times['packed']):.2f}x", flush=True)
            for key, ts in times.items():
                totals[key] += min(ts) * calls.get(name, 1)
        weighting = f"each task's calls in a pass of {args.model}" if args.model else "one call each"
        print(f"sum of the mins, {weighting}: " + ", ".join(f"{key} {t * 1e3:.3f} ms" for key, t in totals.items()))
    finally:
        direct.close()
        packed.close()


if __name__ == "__main__":
    main()
