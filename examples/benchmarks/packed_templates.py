"""The packed templates (``schedule_gym.templates.PACKED``: ``gemm-``, ``batch_matmul-cpu-v4``, ``dense-``,
``conv2d-cpu-v5``) against v1 and torch on a network's layers.

For each layer of ``--suite`` (default ``bert-base``: its QKV projection, FFN up + GELU, FFN down, and the
attention's ``Q K^T`` and ``P V`` batch matmuls; ``resnet50``: its NHWC convolutions) that a packed
template builds (GEMM, dense, batch matmul, NHWC conv2d with ``groups == 1``):

1. an agent tunes the v1 task (the layer as the suite defines it, template ``<op>-cpu``) and the packed
   task (:func:`schedule_gym.operators.packed_task`, its operator's packed template) with the same budget and
   seed, on real kernels (every one checked against the float64 reference);
2. the two best kernels and torch's (``F.linear`` + activation, ``torch.bmm``, ``F.conv2d`` channels-last;
   in a subprocess) are re-timed side by side over ``--rounds`` interleaved rounds under the libraries'
   protocol (5 warm-ups, the best of 30 single calls).

Prints GFLOP/s (best round, median of rounds) and the ratios packed/v1 and packed/torch per layer.

    python examples/benchmarks/packed_templates.py [--suite bert-base] [--layers ffn-up ...] [--budget 100] [--agent felix]

Run it on a quiet machine; figures of different runs or days (the workplace CPU changes) are not comparable.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from schedule_gym import TilingEnv
from schedule_gym.agents import make_agent
from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.hardware import cpu_name
from schedule_gym.reference import library_task_times
from schedule_gym.tasks.suites import get_suite
from schedule_gym.operators import packed_task
from schedule_gym.templates import PACKED, has_packed_template

#: The finalists' protocol, the libraries' too: 5 warm-up calls, then the best of 30 single calls.
PRECISE = {"warmup": 5, "number": 1, "repeat": 30, "min_repeat_ms": 0, "early_stop_ratio": None,
           "coarse_above_s": None, "censor_ratio": None}


def tune(task, template: str, agent_name: str, seed: int, budget: int, threads: int):
    backend = TVMBackend(template=template, num_threads=threads)
    env = TilingEnv(task, backend=backend)
    t0 = time.time()
    try:
        result = make_agent(agent_name, seed).run(env, budget)
    finally:
        env.close()
        backend.close()
    return result, time.time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="bert-base")
    parser.add_argument("--layers", nargs="*", help="layer names (the part after SUITE/); default: every layer a packed template builds")
    parser.add_argument("--budget", type=int, default=100, help="measurements per template and layer")
    parser.add_argument("--agent", default="felix")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    entries = [e for e in get_suite(args.suite) if has_packed_template(e.task)]
    if args.layers:
        wanted = {f"{args.suite}/{x}" if "/" not in x else x for x in args.layers}
        unknown = wanted - {e.name for e in entries}
        if unknown:
            parser.error(f"not layers of {args.suite} with a packed template: {', '.join(sorted(unknown))}")
        entries = [e for e in entries if e.name in wanted]
    t_start = time.time()
    print(f"{args.suite}: {len(entries)} layers, {args.agent} seed {args.seed}, {args.budget} measurements per template, "
          f"{args.threads} threads, CPU {cpu_name()}, {time.strftime('%Y-%m-%d %H:%M')}")

    finalists = []  # (layer, label, task, template, config)
    for entry in entries:
        for label, task, template in (("v1", entry.task, f"{entry.task.op}-cpu"),
                                      ("packed", packed_task(entry.task), PACKED[entry.task.op])):
            result, seconds = tune(task, template, args.agent, args.seed, args.budget, args.threads)
            print(f"{entry.name} {template}: best {task.flops / result.best_latency_s * 1e-9:.1f} GFLOP/s at "
                  f"{result.best_config} ({result.num_measurements} measurements, {seconds:.0f} s)", flush=True)
            finalists.append((entry.name, label, task, template, tuple(result.best_config)))

    backends = {template: TVMBackend(template=template, num_threads=args.threads, protocol=PRECISE)
                for template in {f[3] for f in finalists}}
    gflops: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(args.rounds):
            for entry in entries:
                for name, label, task, template, config in (f for f in finalists if f[0] == entry.name):
                    (r,) = backends[template].measure(task, [config])
                    if not r.ok:
                        raise RuntimeError(f"{name} {template} {config} failed when re-timed: {r.error}")
                    gflops.setdefault((name, label), []).append(task.flops / min(r.costs_s) * 1e-9)
                times = library_task_times(entry.task, "torch", repeats=30, min_repeat_ms=0, warmup=5, threads=args.threads)
                gflops.setdefault((entry.name, "torch"), []).append(times.stats.best_gflops)
    finally:
        for backend in backends.values():
            backend.close()

    print(f"\nGFLOP/s, best round / median of {args.rounds} interleaved rounds:")
    print(f"{'layer':<22}{'v1':>14}{'packed':>14}{'torch':>14}{'packed/v1':>10}{'packed/torch':>13}")
    for entry in entries:
        row = {label: gflops[(entry.name, label)] for label in ("v1", "packed", "torch")}
        cells = "".join(f"{max(v):>7.1f} /{statistics.median(v):>5.1f}" for v in row.values())
        print(f"{entry.name:<22}{cells}{max(row['packed']) / max(row['v1']):>10.2f}"
              f"{max(row['packed']) / max(row['torch']):>13.2f}")
    print(f"Run took {time.time() - t_start:.0f} s.")


if __name__ == "__main__":
    sys.exit(main())
