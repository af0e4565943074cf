"""Would Winograd's F(m x m, 3 x 3) pay for the 3x3 convolutions on this CPU? An experiment.

VGG-16's 3x3 convolutions already run at 0.86-0.90 of the CPU's FMA peak in the tuned build (the models page):
a direct convolution cannot go much faster, and 1.5x PyTorch on VGG-16 would need more than the peak. Winograd's
minimal filtering (Lavin and Gray, CVPR 2016) computes an ``m x m`` output tile of a 3x3 convolution with
``(m + 2)^2`` multiplications per input-output channel pair instead of ``9 m^2`` (2.25x fewer at ``m = 2``, 4x at
``m = 4``), as three steps:

1. input transform: each ``(m + 2) x (m + 2)`` input tile ``d`` (overlapping by 2) becomes ``B^T d B``, stored as
   ``V[(m + 2)^2, P, C]`` (``P`` tiles);
2. a batched GEMM, one per position of the tile: ``M[e] = V[e] @ U[e]`` with the weights transformed once,
   ``U[e] = (G g G^T)[e]`` (``[C, K]`` each) -- a ``batch_matmul`` task, tuned here with the package's packed
   template as any other;
3. output transform: ``Y = A^T M A`` per tile, plus bias and ReLU.

The transforms are the package's (:mod:`schedule_gym.models.fixed.winograd`, which the mapping uses with
``map_model(..., winograd=True)``: tiles in parallel, channels in 16-lane vectors, the constants of TVM's own
``A, B, G`` unrolled, zeros skipped). For each layer the
direct packed convolution (conv2d's packed template) and the Winograd GEMM are tuned with the same agent and budget on
the TVM backend; the three Winograd kernels are checked together against a float64 convolution (the models'
rule: the error within 1e-4 of the largest output), then the direct kernel, the Winograd steps and PyTorch's
``conv2d`` (channels-last) are timed side by side, interleaved (``--rounds`` rounds, each the best of 20 calls
after 3 warm-ups).

    python examples/benchmarks/winograd_experiment.py [--layers vgg16-56 resnet50-14] [--tiles 2 4] [--budget 32]

This measures one layer at a time, the transforms' tile ``m`` free; the models benchmark's ``--winograd`` builds
whole models with the fold (``m = 4``).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

#: name: (H, W, C in, K out) of a 3x3, stride 1, padding 1 convolution with bias and ReLU (NHWC, batch 1)
LAYERS = {"vgg16-224": (224, 224, 64, 64), "vgg16-112": (112, 112, 128, 128), "vgg16-56": (56, 56, 256, 256),
          "vgg16-28": (28, 28, 512, 512), "vgg16-14": (14, 14, 512, 512), "resnet50-56": (56, 56, 64, 64),
          "resnet50-28": (28, 28, 128, 128), "resnet50-14": (14, 14, 256, 256), "resnet50-7": (7, 7, 512, 512)}


def tune(task, budget: int, seed: int, records: Path):
    """The best config of ``task`` after ``budget`` real measurements with XGBoost (records kept in ``records``)."""
    from schedule_gym.agents import Budget, make_agent
    from schedule_gym.backends import make_backend
    from schedule_gym.envs import TilingEnv

    env = TilingEnv(task, backend=make_backend("tvm", records=str(records)))
    try:
        result = make_agent("xgb", seed).run(env, Budget(measurements=budget))
    finally:
        env.close()
    return result.best_config, result.best_latency_s


def compiled(mod, target):
    import tvm

    with tvm.target.Target(target):
        return tvm.compile(mod, target=tvm.target.Target(target))


def best_of(fn, args, calls: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn(*args)
    best = math.inf
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="+", default=["vgg16-56", "vgg16-28", "resnet50-14"], choices=sorted(LAYERS))
    parser.add_argument("--tiles", type=int, nargs="+", default=[2, 4], help="output tile sizes m of F(m x m, 3 x 3)")
    parser.add_argument("--budget", type=int, default=32, help="real measurements per tuned task")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--records", default="runs/winograd", help="record files (a rerun measures nothing again)")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    import torch
    import tvm

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_name
    from schedule_gym.models.fixed.winograd import input_transform, output_transform, weight_transform
    from schedule_gym.models.pipeline import interleaved
    from schedule_gym.operators import packed_task
    from schedule_gym.tasks import batch_matmul, conv2d
    from schedule_gym.templates import template_of
    from schedule_gym.templates.layouts import kernel_inputs

    torch.set_num_threads(args.threads)
    target = host_llvm_target(args.threads)
    dev = tvm.cpu()
    records = Path(args.records)
    records.mkdir(parents=True, exist_ok=True)
    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M}, CPU {cpu_name()}, {args.threads} threads; xgb, {args.budget} "
          f"real measurements per tuned task; best of 20 calls, median over {args.rounds} interleaved rounds", flush=True)
    rng = np.random.default_rng(0)
    for name in args.layers:
        h, w, c, k = LAYERS[name]
        flops = 2 * h * w * c * k * 9
        x = rng.uniform(-1, 1, (h, w, c)).astype(np.float32)
        weights = rng.uniform(-1, 1, (3, 3, c, k)).astype(np.float32) / math.sqrt(9 * c)
        bias = rng.uniform(-1, 1, (k,)).astype(np.float32)
        xt = torch.from_numpy(x).permute(2, 0, 1)[None].contiguous(memory_format=torch.channels_last)
        wt = torch.from_numpy(weights).permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        bt = torch.from_numpy(bias)
        exact = torch.relu(torch.nn.functional.conv2d(xt.double(), wt.double(), bt.double(), padding=1))
        exact = exact[0].permute(1, 2, 0).numpy()
        tolerance = 1e-4 * np.abs(exact).max()
        timers = {"torch conv2d": (lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=1).relu_(), ())}

        direct = packed_task(conv2d(1, h, w, c, k, 3, padding=1, bias=True, activation="relu"))
        config, _ = tune(direct, args.budget, 0, records / f"{direct.name}.jsonl")
        template = template_of(direct, "llvm")
        kernel = compiled(template.schedule(direct, config), target)["main"]
        out = tvm.runtime.tensor(np.zeros((1, h, w, k), np.float32), dev)
        direct_inputs = kernel_inputs([x[None], weights, bias], template.input_layout(direct, config))
        direct_args = [tvm.runtime.tensor(a, dev) for a in direct_inputs] + [out]
        kernel(*direct_args)
        assert np.abs(out.numpy()[0] - exact).max() <= tolerance, "the direct kernel is wrong"
        direct_label = f"direct ({template.name})"
        timers[direct_label] = (kernel, direct_args)

        for m in args.tiles:
            alpha, tiles = m + 2, math.ceil(h / m) * math.ceil(w / m)
            gemm = packed_task(batch_matmul(alpha * alpha, tiles, c, k))
            config, _ = tune(gemm, args.budget, 0, records / f"{gemm.name}.jsonl")
            steps = {"in": compiled(tvm.IRModule({"main": input_transform(h, w, c, m).with_attr("global_symbol", "main")}), target)["main"],
                     "gemm": compiled(template_of(gemm, "llvm").schedule(gemm, config), target)["main"],
                     "out": compiled(tvm.IRModule({"main": output_transform(h, w, k, m, relu=True).with_attr("global_symbol", "main")}), target)["main"]}
            v = tvm.runtime.tensor(np.zeros((alpha * alpha, tiles, c), np.float32), dev)
            mm = tvm.runtime.tensor(np.zeros((alpha * alpha, tiles, k), np.float32), dev)
            y = tvm.runtime.tensor(np.zeros((h, w, k), np.float32), dev)
            step_args = {"in": [tvm.runtime.tensor(x, dev), v],
                         "gemm": [v, tvm.runtime.tensor(weight_transform(weights, m), dev), mm],
                         "out": [mm, tvm.runtime.tensor(bias, dev), y]}
            for step in ("in", "gemm", "out"):
                steps[step](*step_args[step])
            error = np.abs(y.numpy() - exact).max()
            print(f"{name} F({m}x{m},3x3): max |error| {error:.3g}, {error / np.abs(exact).max():.2g} of max |output| "
                  f"({'within' if error <= tolerance else 'OUTSIDE'} the models' 1e-4)", flush=True)
            for step in ("in", "gemm", "out"):
                timers[f"winograd F({m}) {step}"] = (steps[step], step_args[step])

        times, _ = interleaved({label: (lambda fn=fn, a=a: best_of(fn, a)) for label, (fn, a) in timers.items()},
                               args.rounds)
        median = {label: statistics.median(ts) for label, ts in times.items()}
        print(f"\n{name}: 3x3 convolution {h}x{w}x{c} -> {k}, {flops / 1e9:.2f} GFLOP (direct)")
        for label in ("torch conv2d", direct_label):
            print(f"   {label:<26} {median[label] * 1e3:8.3f} ms  {flops / median[label] / 1e9:7.1f} GFLOP/s")
        for m in args.tiles:
            parts = [median[f"winograd F({m}) {s}"] for s in ("in", "gemm", "out")]
            total = sum(parts)
            print(f"   winograd F({m}x{m},3x3)       {total * 1e3:8.3f} ms  {flops / total / 1e9:7.1f} GFLOP/s "
                  f"direct-equivalent (in {parts[0] * 1e3:.3f} + GEMM {parts[1] * 1e3:.3f} + out {parts[2] * 1e3:.3f} "
                  f"ms); direct / winograd {median[direct_label] / total:.2f}x, torch / winograd "
                  f"{median['torch conv2d'] / total:.2f}x")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
