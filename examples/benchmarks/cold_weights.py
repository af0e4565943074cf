"""Why a model's kernels run slower in the model than their measured best: warm against cold weights.

A tuned kernel is timed in isolation, run after run on the same buffers, so its weights stay in the caches
(BERT-base's 128x768x768 dense layer has 2.4 MB of them, L3-resident after the first run). In the model,
each call reads weights no other call has touched for a whole pass (BERT-base's are 340 MB), so they come
from memory. Ansor flushes the CPU caches before each timed run for that reason (TVM's
``cache_flush_cpu_non_first_arg``: every argument but the first, the activation, leaves the caches);
``MeasureProtocol(cache_flush=True)`` is the same switch here.

For each packed task of ``--model`` this script takes the ``--top`` fastest configs of a tuning run's record
file (the picks + agent run of ``analytical_picks.py`` by default, replayed, so its chosen configs are among
them), and times each with the caches warm and flushed, alternately, ``--rounds`` times (one call per timed
repeat, ``--repeat`` repeats, nothing censored or cut short): the best of the rounds' medians. It prints,
per task, both latencies of every config, the rank correlation and which config each protocol picks. Then
it builds the model three times, with the configs the tuning chose, with the warm picks and with the cold
picks, checks each against PyTorch, times them side by side (and PyTorch eager) and profiles them per
kernel, so the cold latency can be set beside what a kernel costs where it runs, and a re-timing of the
tuning's finalists beside its own choice.

    python examples/benchmarks/cold_weights.py --model bert-base --budget 400
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

THREADS_ENV = "TVM_NUM_THREADS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--budget", type=int, default=400, help="the tuning run's budget (replayed from its records)")
    parser.add_argument("--agent", default="xgb")
    parser.add_argument("--picks", type=int, default=4)
    parser.add_argument("--records", default=None,
                        help="the tuning run's record file (default: runs/models/<model>__<agent>__packed__picks__seed0.jsonl)")
    parser.add_argument("--top", type=int, default=8, help="configs per task, fastest recorded first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--model-repeat", type=int, default=7)
    parser.add_argument("--out", default="examples/results/models/cold-weights.json")
    args = parser.parse_args()
    os.environ[THREADS_ENV] = str(args.threads)  # before TVM's runtime starts

    from scipy.stats import spearmanr

    from schedule_gym.backends.tvm.backend import TVMBackend
    from schedule_gym.backends.tvm.protocol import MeasureProtocol
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_identity
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels
    from schedule_gym.models.pipeline import check_outputs, load_model, torch_outputs
    from schedule_gym.models.tuning import tune_model
    from schedule_gym.records import RecordStore

    from analytical_picks import time_and_profile  # the benchmark beside this script: one way to time and profile

    cpu = cpu_identity().describe()
    records = args.records or f"runs/models/{args.model}__{args.agent}__packed__picks__seed0.jsonl"
    if not Path(records).exists():
        parser.error(f"--records {records} does not exist: tune first (analytical_picks.py) or name the file")
    print(f"CPU {cpu}, {args.threads} threads, {time.strftime('%Y-%m-%d')}; {args.model}, records {records}", flush=True)
    loaded = load_model(args.model)
    packed = loaded.mapped.packed()
    start = time.perf_counter()
    tuned = tune_model(packed, args.budget, agent=args.agent, backend="tvm", backend_options={"num_threads": args.threads},
                       records=records, analytical=args.picks)
    print(f"replayed {tuned.measurements} measurements in {time.perf_counter() - start:.0f} s", flush=True)

    # one call per timed repeat, the only difference between the two the flush before each
    precise = {"warmup": 1, "number": 1, "repeat": args.repeat, "min_repeat_ms": 0, "early_stop_ratio": None,
               "coarse_above_s": None, "censor_ratio": None}
    protocols = {"warm": MeasureProtocol(**precise), "cold": MeasureProtocol(**precise, cache_flush=True)}
    store = RecordStore(records)
    row: dict = {"model": args.model, "cpu": cpu, "threads": args.threads, "date": time.strftime("%Y-%m-%d"),
                 "records": records, "budget": args.budget, "tasks": []}
    picked: dict[str, dict] = {"warm": {}, "cold": {}}
    with TVMBackend(num_threads=args.threads) as backend, tempfile.TemporaryDirectory() as keep_dir:
        for model_task in packed.tasks:
            task = model_task.task
            exact = sorted((r.result for r in store.records_of(task) if r.result.exact), key=lambda r: r.latency_s)
            configs = list(dict.fromkeys(r.config for r in exact))[: args.top]  # fastest first, each once
            chosen = tuned.configs.get(task.name)
            if chosen is not None and chosen not in configs:
                configs.append(chosen)
            built = backend.build(task, configs)
            for item in built:
                if item.path is None:
                    raise RuntimeError(f"{task.name} {item.config}: {item.error}")
            # a run deletes the artifact it loads: each run gets its own copy
            kept = [shutil.copy(item.path, Path(keep_dir) / f"{task.name}-{i}.so") for i, item in enumerate(built)]
            times: dict[str, list[list[float]]] = {p: [[] for _ in configs] for p in protocols}
            for r in range(args.rounds):
                for i, item in enumerate(built):
                    for label, protocol in protocols.items():
                        copy = shutil.copy(kept[i], Path(keep_dir) / f"{task.name}-{i}-{r}-{label}.so")
                        result = backend.run_one(task, dataclasses.replace(item, path=copy), protocol)
                        if not result.exact:
                            raise RuntimeError(f"{task.name} {configs[i]}: {result.error}")
                        times[label][i].append(result.latency_s)
            best = {label: [min(t) for t in per] for label, per in times.items()}
            cells = []
            for i, config in enumerate(configs):
                cells.append({"config": [list(c) for c in config], "chosen": config == chosen,
                              **{f"{label}_gflops": task.flops / best[label][i] * 1e-9 for label in protocols}})
            for label in protocols:
                picked[label][task.name] = configs[min(range(len(configs)), key=best[label].__getitem__)]
            rho = spearmanr(best["warm"], best["cold"]).statistic if len(configs) > 2 else float("nan")
            row["tasks"].append({"task": task.name, "weight": model_task.weight, "flops": task.flops,
                                 "spearman": rho, "configs": cells,
                                 "warm_pick": [list(c) for c in picked["warm"][task.name]],
                                 "cold_pick": [list(c) for c in picked["cold"][task.name]]})
            print(f"\n{task.name} x{model_task.weight}: Spearman warm/cold {rho:.2f}", flush=True)
            for cell in cells:
                print(f"   {str(cell['config']):<40} warm {cell['warm_gflops']:7.1f}  cold {cell['cold_gflops']:7.1f} GFLOP/s"
                      f"{'  (tuning chose it)' if cell['chosen'] else ''}", flush=True)
            same = picked["warm"][task.name] == picked["cold"][task.name]
            print(f"   warm pick {picked['warm'][task.name]}, cold pick {picked['cold'][task.name]}"
                  f"{' (the same)' if same else ''}", flush=True)

    target = host_llvm_target(args.threads)
    reference = torch_outputs(loaded.spec)
    builds = {}
    for label, configs in (("as tuned", tuned.configs), *((f"{p} picks", picked[p]) for p in protocols)):
        builds[label] = compile_model(schedule_kernels(packed, configs), target)
        wrong = check_outputs(run_model(builds[label], loaded.spec.inputs), reference)
        row[f"check[{label}]"] = wrong or "ok"
        if wrong:
            raise RuntimeError(f"the build {label} is wrong: {wrong}")
    print()
    row["latency_s"], row["profile_ms"], profiles = time_and_profile(loaded.spec, builds, args.threads,
                                                                     args.model_repeat, packed.kernel_tasks())
    for label, kernels in profiles.items():
        print(f"{label}, each task's kernel where it runs (the profile's hook included):")
        for kernel in kernels:
            if kernel.task is not None:
                task = next(t.task for t in packed.tasks if t.task.name == kernel.task)
                print(f"   {kernel.task:<45} in the model {task.flops * kernel.calls / kernel.seconds * 1e-9:7.1f} GFLOP/s",
                      flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps([row], indent=1) + "\n")
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
