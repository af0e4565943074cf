"""What taking a padded layer's result back by a view saves: one model built twice with the same picks, its padded
results taken back by views of their first rows (``MappedModel.packed(views=True)``, the default) and by
``strided_slice`` copies (``views=False``, as before the views), timed in interleaved rounds.

ViT-B/16's 197 tokens are padded to 200 rows for its dense layers; the 197 rows of each padded result are its first
elements, so a view of them replaces the copy that read them out for the attention kernel (the ``qkv`` result) and
the residual sums (the projections). Pointwise convolutions flattened to one row of pixels at batch 1 (ResNet-50's
and DenseNet-121's on 7 x 7 maps) are taken back the same way. Both builds are the attention build (each attention
and layer norm a fixed kernel, ``ATTENTION_FOLDS``) with fast math, as the models benchmark's fastest transformer
builds; the picks come from the record file of the models benchmark (``--records-dir``), the packed tasks tuned
with its budget and analytical picks (replayed where the records hold them; what they lack is measured and
appended, as the models benchmark does), each task's fastest measurement (no finalists re-timed).

    python examples/benchmarks/padded_views.py --model vit-b16 --records-dir runs/models-zen4 --rounds 12

Each round times each build with ``time_model`` (3 means of at least 200 ms); both builds' outputs are checked
against PyTorch's. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics

from models import THREADS_ENV, packed_records  # the models benchmark, the script beside this one (no TVM import)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vit-b16")
    parser.add_argument("--records-dir", required=True, help="the models benchmark's records (its --records-dir)")
    parser.add_argument("--budget-per-task", type=int, default=25)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--out", help="write the timings here (JSON)")
    args = parser.parse_args()
    os.environ[THREADS_ENV] = str(args.threads)  # before TVM's runtime starts, as the models benchmark does

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_name
    from schedule_gym.models.build import compile_model, profile_model, run_model, schedule_kernels, time_model
    from schedule_gym.models.fixed import ATTENTION_FOLDS
    from schedule_gym.models.pipeline import check_outputs, interleaved, load_model, torch_outputs
    from schedule_gym.models.tuning import ANALYTICAL_PICKS, tune_model

    loaded = load_model(args.model)
    packed = loaded.mapped.packed()
    tuned = tune_model(packed, args.budget_per_task * len(packed.tasks), agent="xgb", backend="tvm",
                       backend_options={"num_threads": args.threads}, analytical=ANALYTICAL_PICKS, finalists=0,
                       records=packed_records(args.records_dir, args.model, "xgb", ANALYTICAL_PICKS))
    target, reference = host_llvm_target(args.threads), torch_outputs(loaded.spec)
    builds, tasks = {}, {}
    row = {"model": args.model, "cpu": cpu_name(), "threads": args.threads, "date": datetime.date.today().isoformat(),
           "rounds": args.rounds}
    for label, views in (("views", True), ("slices", False)):
        attention = loaded.remap(fixed_kernels=ATTENTION_FOLDS).packed(views=views)
        picks = {t.task.name: tuned.configs[t.task.name] for t in attention.tasks}
        builds[label] = compile_model(schedule_kernels(attention, picks), target, fast_math=True)
        tasks[label] = attention.kernel_tasks()
        row[f"check_{label}"] = check_outputs(run_model(builds[label], loaded.spec.inputs), reference) or "ok"
        script = attention.mod["main"].script()
        row[f"{label}_in_main"] = {"memory.view": script.count("R.memory.view("),
                                   "strided_slice": script.count("R.strided_slice(")}
    timings, sets = interleaved({label: lambda b=b: min(time_model(b, loaded.spec.inputs, repeat=3))
                                 for label, b in builds.items()}, args.rounds)
    row["timings_s"], row["timing_sets"] = timings, sets
    print(f"{args.model} on {row['cpu']}, {args.threads} threads, {args.rounds} interleaved rounds")
    for label, times in timings.items():
        print(f"  {label:7s} median {statistics.median(times) * 1e3:8.2f} ms   min {min(times) * 1e3:8.2f} ms   "
              f"({row[f'{label}_in_main']}; outputs {row[f'check_{label}']})")
    print(f"  slices / views: {statistics.median(timings['slices']) / statistics.median(timings['views']):.3f} by the "
          f"median, {min(timings['slices']) / min(timings['views']):.3f} by the min")
    row["profiles_ms"] = {}
    for label, build in builds.items():
        kernels = [k for k in profile_model(build, loaded.spec.inputs, runs=5, tasks=tasks[label])
                   if k.task is None][:6]
        row["profiles_ms"][label] = {k.symbol: round(k.seconds * 1e3, 3) for k in kernels}
        print(f"  {label}: the costliest functions left to TVM or fixed, ms a run: {row['profiles_ms'][label]}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(row, f, indent=1)
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
