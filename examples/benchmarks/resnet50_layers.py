"""ResNet-50's 20 distinct convolutions, tuned as a model build runs them, against PyTorch's conv2d (oneDNN).

For each of the 20 distinct conv2d layers of ResNet-50 v1 (batch 1, 224x224, NHWC; ``schedule-gym tasks --suite
resnet50``), in one run:

1. tuning as the models benchmark tunes a model (:func:`schedule_gym.models.tuning.tune_model`, XGBoost): each
   layer's packed form (conv2d's packed template, its weight laid out once, as a packed model build lays it out) gets
   ``--budget`` measurements, BLIS's analytical picks first, and its ``--finalists`` fastest are timed again; with
   ``--winograd`` each 3x3 layer that ``map_model(..., winograd=True)`` folds (``foldable_task``) also gets the batch
   matmul of its Winograd F(4x4, 3x3) tuned the same way. The records go to ``--records-dir``, so a rerun measures
   nothing twice;
2. every kernel is built afresh from its pick and checked: the direct one with the package's own bound
   (:meth:`Workload.check`, which rejects a wrong answer), Winograd's three steps together against the float64
   convolution with the models' rule (within 1e-4 of the largest output);
3. side by side, in ``--rounds`` interleaved rounds: our direct kernel, Winograd's three steps called in turn, and
   PyTorch's ``nn.functional.conv2d`` (oneDNN, ``channels_last``, no bias, as the suite's layers) on the same inputs,
   each the best of ``--calls`` calls after three warm-ups (``winograd_experiment.best_of``), PyTorch after a settle
   of :data:`~schedule_gym.models.pipeline.SETTLE_S` (TVM's idle workers spin for a while after a TVM call).

It prints per layer the median of the rounds for each, in ms and GFLOP/s (Winograd's counted as the direct
convolution's arithmetic), PyTorch's time over ours, and the geometric means of that ratio over the layers, weighted
by how often ResNet-50 runs each (its 53 convolutions) and by PyTorch's time in them, for the packed build and
for the packed build with Winograd's fold (the fold's layers as Winograd). A ratio above 1 is ours ahead.

    python examples/benchmarks/resnet50_layers.py --budget 25 --winograd --out examples/results/resnet50-layers/R.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import numpy as np
from winograd_experiment import best_of, compiled  # noqa: E402  (examples/benchmarks, the script's own folder)


def geomeans(ratios: list[float], weights: list[float], torch_s: list[float]) -> dict[str, float]:
    """Geometric means of ``ratios``: unweighted, by ``weights`` (occurrences) and by PyTorch's time in them."""
    logs = np.log(ratios)
    occurrences, share = np.array(weights), np.array(weights) * np.array(torch_s)
    return {"unweighted": float(math.exp(logs.mean())),
            "by_occurrences": float(math.exp((occurrences * logs).sum() / occurrences.sum())),
            "by_torch_time": float(math.exp((share * logs).sum() / share.sum()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=25, help="measurements per layer (and per Winograd GEMM)")
    parser.add_argument("--agent", default="xgb")
    parser.add_argument("--winograd", action="store_true", help="also tune and time the 3x3 layers as Winograd F(4x4)")
    parser.add_argument("--layers", nargs="*", help="layer names, e.g. resnet50/conv2 (default: all 20)")
    parser.add_argument("--finalists", type=int, default=3, help="fastest configs of each task timed again")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--calls", type=int, default=20, help="calls per timing, the best kept")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--records-dir", default="runs/resnet50-layers")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    if args.budget < 1 or args.rounds < 1 or args.calls < 1 or args.threads < 1:
        parser.error(f"--budget, --rounds, --calls and --threads must be positive, got {args.budget}, {args.rounds}, "
                     f"{args.calls}, {args.threads}")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import torch
    import tvm

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_identity
    from schedule_gym.models.fixed.winograd import (TILE, foldable_task, input_transform, output_transform,
                                                    weight_transform)
    from schedule_gym.models.mapping import MappedModel, MappingReport, ModelTask
    from schedule_gym.models.pipeline import SETTLE_S, interleaved
    from schedule_gym.models.tuning import tune_model
    from schedule_gym.operators import get_workload, packed_task
    from schedule_gym.tasks import batch_matmul, get_suite
    from schedule_gym.templates import template_of
    from schedule_gym.templates.layouts import kernel_inputs

    layers = [e for e in get_suite("resnet50") if e.task.op == "conv2d" and (not args.layers or e.name in args.layers)]
    unknown = sorted(set(args.layers or ()) - {e.name for e in layers})
    if unknown:
        parser.error(f"no conv2d layer of the resnet50 suite is named {', '.join(unknown)}")
    torch.set_num_threads(args.threads)
    target = tvm.target.Target(host_llvm_target(args.threads))
    dev = tvm.cpu()
    cpu = cpu_identity()
    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"{started}, CPU {cpu.name} ({cpu.vendor} family {cpu.family} model {cpu.model}), {args.threads} threads; "
          f"{args.agent}, {args.budget} measurements per task, {args.finalists} finalists; timings: best of "
          f"{args.calls} calls, median of {args.rounds} interleaved rounds", flush=True)

    # 1. tuning, every task in one record file, each its own round of --budget
    tasks = {e.name: packed_task(e.task) for e in layers}
    winograd = {e.name: shape for e in layers if args.winograd and (shape := foldable_task(e.task)) is not None}
    gemms = {name: packed_task(batch_matmul((TILE + 2) ** 2, math.ceil(h / TILE) * math.ceil(w / TILE), c, k))
             for name, (h, w, c, k) in winograd.items()}
    weights = {e.name: e.weight for e in layers}
    model_tasks = [ModelTask(task, name, weights[name]) for name, task in tasks.items()]
    model_tasks += [ModelTask(task, f"{name} winograd", weights[name]) for name, task in gemms.items()]
    Path(args.records_dir).mkdir(parents=True, exist_ok=True)
    records = Path(args.records_dir) / f"resnet50-layers__{args.agent}__seed0.jsonl"
    start = time.perf_counter()
    tuned = tune_model(MappedModel(None, model_tasks, MappingReport()), args.budget * len(model_tasks),
                       agent=args.agent, backend="tvm", backend_options={"num_threads": args.threads},
                       records=str(records), round_measurements=args.budget, strategy="round-robin",
                       finalists=args.finalists)
    tune_s = time.perf_counter() - start
    picks = tuned.configs
    print(f"tuned {len(model_tasks)} tasks, {tuned.measurements} measurements (those the records hold replayed, not "
          f"measured again), in {tune_s:.0f} s (records {records})", flush=True)

    def transform(func):
        return compiled(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target)["main"]

    rows = []
    for entry in layers:
        name, task = entry.name, tasks[entry.name]
        workload = get_workload(task.op)
        inputs = workload.inputs(entry.task)
        expected, tolerance = workload.reference(entry.task, inputs)
        x, w = inputs  # NHWC [1, H, W, C], HWIO [KH, KW, C, K]
        xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        wt = torch.from_numpy(w).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        stride, padding = entry.task.param("stride"), entry.task.param("padding")
        timers = {"torch": lambda: (time.sleep(SETTLE_S), best_of(
            lambda: torch.nn.functional.conv2d(xt, wt, stride=stride, padding=padding), (), args.calls))[1]}

        config = picks[task.name]
        template = template_of(task, "llvm")
        kernel = compiled(template.schedule(task, config), target)["main"]
        out = tvm.runtime.tensor(np.zeros(workload.output_shape(task), np.float32), dev)
        direct_args = [tvm.runtime.tensor(a, dev) for a in kernel_inputs(inputs, template.input_layout(task, config))]
        direct_args.append(out)
        kernel(*direct_args)
        why = workload.check(entry.task, out.numpy(), expected, tolerance)
        if why is not None:
            raise SystemExit(f"{name}: the direct kernel of {config} is wrong: {why}")
        timers["direct"] = lambda: best_of(kernel, direct_args, args.calls)

        if name in winograd:
            h, wd, c, k = winograd[name]
            gemm = gemms[name]
            alpha, tiles = TILE + 2, math.ceil(h / TILE) * math.ceil(wd / TILE)
            gemm_template = template_of(gemm, "llvm")
            steps = (transform(input_transform(h, wd, c, TILE)),
                     compiled(gemm_template.schedule(gemm, picks[gemm.name]), target)["main"],
                     transform(output_transform(h, wd, k, TILE)))
            v = tvm.runtime.tensor(np.zeros((alpha * alpha, tiles, c), np.float32), dev)
            mm = tvm.runtime.tensor(np.zeros((alpha * alpha, tiles, k), np.float32), dev)
            y = tvm.runtime.tensor(np.zeros((h, wd, k), np.float32), dev)
            u = kernel_inputs([np.zeros((alpha * alpha, tiles, c), np.float32), weight_transform(w, TILE)],
                              gemm_template.input_layout(gemm, picks[gemm.name]))[1]
            step_args = ([tvm.runtime.tensor(x[0], dev), v], [v, tvm.runtime.tensor(u, dev), mm],
                         [mm, tvm.runtime.tensor(np.zeros(k, np.float32), dev), y])

            def winograd_call(steps=steps, step_args=step_args):
                for step, step_in in zip(steps, step_args):
                    step(*step_in)

            winograd_call()
            error, scale = float(np.abs(y.numpy() - expected[0]).max()), float(np.abs(expected).max())
            if not error <= 1e-4 * scale:
                raise SystemExit(f"{name}: Winograd's steps are wrong: max |error| {error:.3g} over 1e-4 x {scale:.3g}")
            timers["winograd"] = lambda call=winograd_call: best_of(call, (), args.calls)

        times, _ = interleaved(timers, args.rounds)
        median = {label: statistics.median(ts) for label, ts in times.items()}
        flops = entry.task.flops
        row = {"layer": name, "weight": entry.weight, "gflop": flops / 1e9,
               "shape": f"{entry.task.param('in_hw')[0]}x{entry.task.param('in_hw')[1]}x{entry.task.dim('rc').extent}"
                        f"->{entry.task.dim('co').extent} k{entry.task.dim('rh').extent} s{stride[0]}",
               "config": [list(f) for f in config], "times_s": times, "median_s": median,
               "gflops": {label: flops / s / 1e9 for label, s in median.items()}}
        if name in winograd:
            row["winograd_config"] = [list(f) for f in picks[gemms[name].name]]
        rows.append(row)
        text = "  ".join(f"{label} {median[label] * 1e3:7.3f} ms ({row['gflops'][label]:6.1f})"
                         for label in ("torch", "direct", "winograd") if label in median)
        print(f"{name:<16} x{entry.weight} {row['shape']:<22} {text}  torch/direct "
              f"{median['torch'] / median['direct']:.2f}x"
              + (f", torch/winograd {median['torch'] / median['winograd']:.2f}x" if "winograd" in median else ""),
              flush=True)

    torch_s = [r["median_s"]["torch"] for r in rows]
    occurrences = [r["weight"] for r in rows]
    builds = {"packed": [r["median_s"]["direct"] for r in rows]}
    if winograd:
        builds["packed + winograd"] = [r["median_s"].get("winograd", r["median_s"]["direct"]) for r in rows]
    summary = {}
    for build_name, ours in builds.items():
        means = geomeans([t / o for t, o in zip(torch_s, ours)], occurrences, torch_s)
        total = sum(n * s for n, s in zip(occurrences, ours))
        torch_total = sum(n * s for n, s in zip(occurrences, torch_s))
        summary[build_name] = {**means, "ours_ms": total * 1e3, "torch_ms": torch_total * 1e3}
        print(f"{build_name}: PyTorch / ours, geometric mean over {len(rows)} layers {means['unweighted']:.3f}, "
              f"weighted by occurrences {means['by_occurrences']:.3f}, by PyTorch's time {means['by_torch_time']:.3f}; "
              f"ResNet-50's {sum(occurrences)} convolutions {total * 1e3:.2f} ms against PyTorch's "
              f"{torch_total * 1e3:.2f} ms ({torch_total / total:.2f}x)", flush=True)
    print(f"total {time.perf_counter() - start:.0f} s", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "started": started, "cpu": cpu.name, "cpu_identity": {"vendor": cpu.vendor, "family": cpu.family,
                                                                   "model": cpu.model},
            "threads": args.threads, "agent": args.agent, "budget": args.budget, "finalists": args.finalists,
            "rounds": args.rounds, "calls": args.calls, "tune_s": tune_s, "rows": rows, "summary": summary},
            indent=1))


if __name__ == "__main__":
    main()
