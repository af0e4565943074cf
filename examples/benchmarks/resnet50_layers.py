"""Tune every distinct conv2d layer of ResNet-50 on this CPU and compare with PyTorch's conv2d (oneDNN).

For each of the 20 distinct conv2d layers of ResNet-50 v1 (batch 1, 224x224, NHWC; ``schedule-gym tasks
--suite resnet50``), in one run:

1. an agent tunes the layer with the TVM backend for ``--budget`` measurements (every kernel checked
   against the float64 reference; records in ``--records-dir``, so a rerun resumes and measures nothing
   twice);
2. the mock model's optimum (the whole space scored) is found;
3. side by side, right after each other: the tuned best config and the mock's optimum are built and timed
   afresh (checked again; the median of 5 repeats of at least 50 ms), and torch's ``nn.functional.conv2d``
   (oneDNN, ``channels_last``) is timed on the same inputs in a subprocess
   (:func:`schedule_gym.reference.library_task_times`), 2 threads like the kernels. Only this step needs
   an idle machine: rerunning the command replays the searches from the records and times again.

It prints per layer the tuned kernel's GFLOP/s, torch's (best / median of its samples), their ratio and
the mock optimum's real GFLOP/s, then geometric means of the tuned/torch ratio over layers weighted by
how often ResNet-50 runs each (its 53 convolutions) and by their share of its convolution time in torch.

    python examples/benchmarks/resnet50_layers.py --agent xgb --budget 100
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from schedule_gym.agents import make_agent
from schedule_gym.backends import MockBackend, make_backend
from schedule_gym.envs import TilingEnv
from schedule_gym.hardware import cpu_name
from schedule_gym.reference import library_task_times
from schedule_gym.tasks import get_suite


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="xgb")
    parser.add_argument("--budget", type=int, default=100, help="measurements per layer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", nargs="*", help="layer names (default: every conv2d of the suite)")
    parser.add_argument("--records-dir", default="runs/resnet50")
    parser.add_argument("--mock-profile", default=None, help="mock profile for the mock optimum (default: the mock's)")
    parser.add_argument("--no-mock-optimum", action="store_true")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()

    layers = [t for t in get_suite("resnet50") if t.task.op == "conv2d" and (not args.layers or t.name in args.layers)]
    Path(args.records_dir).mkdir(parents=True, exist_ok=True)
    mock = MockBackend(**({"profile": args.mock_profile} if args.mock_profile else {}))
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, CPU {cpu_name()}, 2 threads; agent {args.agent}, {args.budget} "
          f"measurements per layer, seed {args.seed}; mock profile {mock.profile.name}")
    header = (f"{'layer':<16} {'x':>2} {'input -> co, kernel, stride':<28} {'tuned':>7} {'torch best/med':>15} "
              f"{'tuned/torch':>11} {'mock opt':>8} {'search s':>8}")
    print(header)
    rows = []
    t_start = time.perf_counter()
    from schedule_gym.backends.tvm.backend import TVMBackend

    retimer = TVMBackend(num_threads=2, protocol={"repeat": 5, "min_repeat_ms": 50, "early_stop_ratio": None,
                                                  "coarse_above_s": None, "censor_ratio": None})
    for entry in layers:
        task = entry.task
        records = Path(args.records_dir) / f"{task.name.replace('/', '_')}.jsonl"
        backend = make_backend("tvm", records=str(records))
        env = TilingEnv(task, backend=backend)
        try:
            result = make_agent(args.agent, seed=args.seed).run(env, args.budget)
        finally:
            env.close()
        configs = [result.best_config]
        if not args.no_mock_optimum:
            configs.append(env.space.config(int(np.argmin(mock.score_space(task)))))
        # the side-by-side timings: fresh kernels, then torch, one after the other
        timed = retimer.measure(task, configs)
        tuned = task.flops / timed[0].latency_s * 1e-9 if timed[0].ok else 0.0
        mock_opt = (task.flops / timed[1].latency_s * 1e-9 if timed[1].ok else 0.0) if len(timed) > 1 else None
        torch_times = library_task_times(task, "torch", threads=2)
        stats = torch_times.stats
        (h, w), (s, _) = task.param("in_hw"), task.param("stride")
        shape = f"{h}x{w}x{task.dim('rc').extent}->{task.dim('co').extent} k{task.dim('rh').extent} s{s}"
        row = dict(layer=task.name, weight=entry.weight, tuned_gflops=tuned,
                   tuned_s=timed[0].latency_s if timed[0].ok else None, tuned_in_search_gflops=result.best_gflops,
                   torch_best_gflops=stats.best_gflops,
                   torch_median_gflops=stats.median_gflops, torch_median_s=torch_times.median_s,
                   ratio=tuned / stats.median_gflops, mock_optimum_gflops=mock_opt, search_s=result.wall_s,
                   best_config=[list(f) for f in result.best_config] if result.best_config else None)
        rows.append(row)
        mock_text = f"{mock_opt:8.1f}" if mock_opt is not None else f"{'-':>8}"
        print(f"{task.name:<16} {entry.weight:>2} {shape:<28} {tuned:7.1f} {stats.best_gflops:7.1f}/{stats.median_gflops:<7.1f} "
              f"{row['ratio']:11.2f} {mock_text} {result.wall_s:8.0f}", flush=True)

    retimer.close()
    weights = np.array([r["weight"] for r in rows], dtype=float)
    ratios = np.log([r["ratio"] for r in rows])
    time_share = weights * np.array([r["torch_median_s"] for r in rows])
    print(f"\ngeometric mean tuned/torch over {len(rows)} layers: unweighted {math.exp(ratios.mean()):.3f}, "
          f"weighted by occurrences {math.exp((weights * ratios).sum() / weights.sum()):.3f}, "
          f"weighted by torch time {math.exp((time_share * ratios).sum() / time_share.sum()):.3f}")
    tuned_total = sum(r["weight"] * r["tuned_s"] for r in rows if r["tuned_s"] is not None)
    torch_total = sum(r["weight"] * r["torch_median_s"] for r in rows)
    print(f"ResNet-50's 53 convolutions: {tuned_total * 1e3:.2f} ms tuned vs {torch_total * 1e3:.2f} ms torch (median); "
          f"total {time.perf_counter() - t_start:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps({"cpu": cpu_name(), "agent": args.agent, "budget": args.budget, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
