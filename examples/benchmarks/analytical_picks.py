"""BLIS's analytical picks as a model's first measurements: the same tuning with and without them, side by side.

For each model (``schedule_gym.models.zoo``, batch 1) its packed form (``MappedModel.packed()``: every task on
its packed template, ``templates.PACKED``) is tuned three times with real TVM measurements, the same budget and seed:

* ``agent alone``: ``--agent`` by itself (``tune_model(..., analytical=0)``);
* ``with picks``: each task's first round opened by up to ``--picks`` configs of BLIS's analytical model for
  this CPU (``schedule_gym.templates.analytical``; the default of ``tune_model``), then ``--agent``;
* ``local search from the best pick``: the picks, then ``--local-agent`` (an agent with a start: G-BFS by
  default) started from each task's best pick (``agent_params={"start": "analytical"}``); ``none`` skips it.

The builds are checked against PyTorch and timed side by side with PyTorch eager (median and min of
``--repeat`` timings of at least 200 ms), then profiled per kernel (``profile_model``). Per task it prints
the best GFLOP/s of each run and of the picks alone. Records go to ``--records-dir``
(``<model>__<agent>__packed__seed0.jsonl``, the models benchmark's file for the agent alone, so the two
share it; ``...__packed__picks__...`` and ``<model>__<local agent>__packed__picks-start__...`` for the
others): a rerun resumes.

    python examples/benchmarks/analytical_picks.py --models bert-base --budget-per-task 25 --min-budget 400
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

THREADS_ENV = "TVM_NUM_THREADS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert-base"])
    parser.add_argument("--budget-per-task", type=int, default=25)
    parser.add_argument("--min-budget", type=int, default=400)
    parser.add_argument("--picks", type=int, default=4, help="analytical picks per task (at most half its first round)")
    parser.add_argument("--agent", default="xgb")
    parser.add_argument("--local-agent", default="gbfs", help="an agent with a start, run from the best pick ('none': skip)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--records-dir", default="runs/models")
    parser.add_argument("--out", default="examples/results/models/analytical-picks.json")
    args = parser.parse_args()
    os.environ[THREADS_ENV] = str(args.threads)  # before TVM's runtime starts

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_identity
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels
    from schedule_gym.models.pipeline import check_outputs, load_model, torch_outputs
    from schedule_gym.models.tuning import ANALYTICAL_START, tune_model
    from schedule_gym.records import RecordStore
    from schedule_gym.templates.analytical import MicroArch, analytical_configs

    cpu = cpu_identity().describe()
    arch = MicroArch.of_host(cores=args.threads)
    target = host_llvm_target(args.threads)
    print(f"CPU {cpu}, {args.threads} threads, {time.strftime('%Y-%m-%d')}; {arch}", flush=True)
    Path(args.records_dir).mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.models:
        loaded = load_model(name)
        packed = loaded.mapped.packed()
        budget = max(args.min_budget, args.budget_per_task * len(packed.tasks))
        reference = torch_outputs(loaded.spec)
        row: dict = {"model": name, "cpu": cpu, "threads": args.threads, "budget": budget, "agent": args.agent,
                     "picks": args.picks, "date": time.strftime("%Y-%m-%d"), "arch": vars(arch)}
        print(f"\n== {name}: {len(packed.tasks)} tasks, budget {budget}", flush=True)
        runs, builds = {}, {}
        variants = [("agent alone", args.agent, 0, {}, "packed"), ("with picks", args.agent, args.picks, {}, "packed__picks")]
        if args.local_agent != "none":
            variants.append(("local search from the best pick", args.local_agent, args.picks,
                             {"start": ANALYTICAL_START}, "packed__picks-start"))
        for label, agent, picks, params, suffix in variants:
            records = f"{args.records_dir}/{name}__{agent}__{suffix}__seed0.jsonl"
            start = time.perf_counter()
            runs[label] = tune_model(packed, budget, agent=agent, backend="tvm",
                                     backend_options={"num_threads": args.threads}, records=records,
                                     analytical=picks, agent_params=params)
            row[f"tune_s[{label}]"] = time.perf_counter() - start
            builds[label] = compile_model(schedule_kernels(packed, runs[label].configs), target)
            row[f"check[{label}]"] = check_outputs(run_model(builds[label], loaded.spec.inputs), reference) or "ok"
            print(f"   {label}: {runs[label].measurements} measurements in {row[f'tune_s[{label}]']:.0f} s, "
                  f"outputs {row[f'check[{label}]']}", flush=True)
        # per task: the best of each run, and the best of the picks alone (read back from the records)
        picks_store = RecordStore(f"{args.records_dir}/{name}__{args.agent}__packed__picks__seed0.jsonl")
        row["tasks"] = []
        for model_task in packed.tasks:
            task = model_task.task
            chosen = set(analytical_configs(task, arch, args.picks))
            measured = [r.result for r in picks_store.records_of(task) if r.result.config in chosen and r.result.exact]
            cells = {"task": task.name, "weight": model_task.weight, "flops": task.flops}
            for label, run in runs.items():
                outcome = next(t for t in run.tasks if t.name == task.name)
                cells[label] = None if outcome.best_latency_s is None else task.flops / outcome.best_latency_s * 1e-9
            cells["picks alone"] = max((task.flops / r.latency_s * 1e-9 for r in measured), default=None)
            row["tasks"].append(cells)
            print(f"   {task.name:<45} x{model_task.weight:<3} best GFLOP/s: "
                  + ", ".join(f"{label} {_num(cells[label])}" for label in runs)
                  + f", picks alone {_num(cells['picks alone'])}", flush=True)
        # side by side, on a quiet machine
        row["latency_s"], row["profile_ms"], _ = time_and_profile(loaded.spec, builds, args.threads, args.repeat,
                                                                  packed.kernel_tasks())
        results.append(row)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwritten to {args.out}")


def time_and_profile(spec, builds: dict, threads: int, repeat: int, kernel_tasks: dict) -> tuple[dict, dict, dict]:
    """PyTorch eager, then each build, timed one after the other (``repeat`` timings of at least 200 ms each)
    and printed with eager's median over each one's; then each build profiled per kernel (``profile_model``
    over ``repeat`` runs). Returns the latencies ``{label: {"min", "median", "runs"}}``, the profiles
    ``{label: {task or symbol: ms per run}}`` and the profiles' ``KernelTime`` lists by label."""
    from schedule_gym.models.build import profile_model, time_model
    from schedule_gym.models.pipeline import summary, torch_latency

    from models import print_profile  # the models benchmark beside this script: one way to print a profile

    timings = {"torch": torch_latency(spec, threads, repeat)}
    for label, executable in builds.items():
        timings[label] = time_model(executable, spec.inputs, repeat=repeat)
    latency = {k: {"min": summary(v)[0], "median": summary(v)[1], "runs": v} for k, v in timings.items()}
    for label, stats in latency.items():
        print(f"   {label:<32} median {stats['median'] * 1e3:9.2f} ms   min {stats['min'] * 1e3:9.2f} ms   "
              f"eager / this {latency['torch']['median'] / stats['median']:.2f}x", flush=True)
    profiles, kernels = {}, {}
    for label, executable in builds.items():
        kernels[label] = profile_model(executable, spec.inputs, runs=repeat, tasks=kernel_tasks)
        profiles[label] = {k.task or k.symbol: k.seconds * 1e3 for k in kernels[label]}
        print_profile(label, kernels[label], top=0)
    return latency, profiles, kernels


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


if __name__ == "__main__":
    main()
