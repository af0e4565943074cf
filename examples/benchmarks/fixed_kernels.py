"""Our fixed kernels against TVM's own lowering of the same operators, in one model, side by side.

Builds a zoo model's packed form twice with the same picks: as the mapping makes it (each concatenation on the
channel axis, with the batch norm and ReLU after it, and each layer norm, with the residual sum before it, one
call of a kernel of ``schedule_gym.models.fixed``) and with ``map_model(..., fixed_kernels=False)`` (TVM lowers
those operators, fusing the batch norm and ReLU into the concatenations, as before the fixed kernels). Both builds
are checked against PyTorch, profiled (where the time goes), then timed with PyTorch eager, interleaved (one
timing of each per round, the order rotated; PyTorch after a second's sleep, as the models benchmark). The picks:
each task's fastest measurement in ``--records`` (a models run's record file of this CPU), else the calibrated
mock's picks (no measurement). ``--folds`` names the folds of the first build (default: the mapping's,
``DEFAULT_FOLDS``; ``--folds concat layer_norm`` adds the layer norm's), ``--base-folds`` those of the second
(default: none, TVM's lowering; ``--base-folds concat`` to weigh the attention's fold alone); ``--fast-math``
builds both with fast math; ``--base-direct-grouped`` keeps the second build's grouped convolutions (depthwise ones
too) in their direct form (``conv2d-cpu``), as before ``conv2d-cpu-v5`` built depthwise ones, the first build's
folds in both (give ``--records`` the files that hold each form's measurements: ``grouped_convs.py --model``'s and
the models run's); ``--base-templates`` names templates that build the second build's tasks of their operators
(``dense-cpu-v7``: a template against the one ``"auto"`` builds, the first build labelled "packed templates"; the
first build's folds in both); ``--base-head-copies`` folds the second build's attention with each head copied to
``[heads, tokens, depth]`` and back (``fold_attention(heads_in_place=False)``, the form before the kernel read the
heads in place; the first build's folds in both). Prints the CPU, the date, medians and minimums::

    python examples/benchmarks/fixed_kernels.py --model densenet121 \\
        --records runs/models-zen3/densenet121__xgb__packed__picks__seed0.jsonl
    python examples/benchmarks/fixed_kernels.py --model bert-base --folds concat layer_norm [--fast-math] \\
        --records runs/models-zen3/bert-base__xgb__packed__picks__seed0.jsonl
    python examples/benchmarks/fixed_kernels.py --model gpt2 --folds concat attention --base-folds concat \\
        [--fast-math] --records runs/models-zen3/gpt2__xgb__packed__picks__seed0.jsonl
    python examples/benchmarks/fixed_kernels.py --model bert-base --base-templates dense-cpu-v7 --fast-math \\
        --timings 21 --records runs/models-zen3/bert-base__xgb__packed__picks__seed0.jsonl
    python examples/benchmarks/fixed_kernels.py --model bert-base --folds concat attention layer_norm \\
        --base-head-copies --fast-math --records runs/models-zen3-d/bert-base__xgb__packed__picks__seed0.jsonl
    python examples/benchmarks/fixed_kernels.py --model mobilenetv2 --base-direct-grouped \\
        --records runs/models-zen3/mobilenetv2__xgb__packed__picks__seed0.jsonl runs/depthwise/mobilenetv2.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path


def _picks(tasks, records: list[str]) -> dict:
    """Each task's fastest configuration in the record files ``records`` (tasks without one: the mock's pick)."""
    if not records:
        return {}
    from schedule_gym.backends.replay import ReplayBackend

    replay = ReplayBackend(records)
    fastest = {t.task.name: replay.recorded(t.task) for t in tasks}
    return {name: results[0].config for name, results in fastest.items() if results}


def _direct_grouped(packed, direct):
    """``packed`` (a packed model) with the tasks of its grouped convolutions as ``direct`` (the same mapping, not
    packed) has them: their direct form, built by the direct template."""
    from grouped_convs import is_grouped_conv

    unpacked = {t.function: t for t in direct.tasks if is_grouped_conv(t.task)}
    return dataclasses.replace(packed, tasks=[unpacked.get(t.function, t) for t in packed.tasks])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="densenet121")
    parser.add_argument("--records", nargs="+", default=[], help="record files of this model's tasks")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timings", type=int, default=7)
    parser.add_argument("--fast-math", action="store_true", help="build both with compile_model(fast_math=True)")
    parser.add_argument("--folds", nargs="+", default=None, help="the first build's folds (default: the mapping's)")
    parser.add_argument("--base-folds", nargs="*", default=None,
                        help="the second build's folds (default: none, TVM's lowering of those operators; the first "
                             "build's with --base-templates)")
    parser.add_argument("--base-templates", nargs="*", default=[],
                        help="templates that build the second build's tasks of their operators (e.g. dense-cpu-v4: "
                             "the weights packed by each call, against dense-cpu-v5's packed once)")
    parser.add_argument("--base-direct-grouped", action="store_true",
                        help="the second build's grouped and depthwise convolutions in their direct form")
    parser.add_argument("--base-head-copies", action="store_true",
                        help="the second build's attention kernels take each head copied, not read in place")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from models import print_profile

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_name
    from schedule_gym.models.build import compile_model, profile_model, run_model, schedule_kernels, time_model
    from schedule_gym.models.fixed import DEFAULT_FOLDS, fold_attention
    from schedule_gym.models.mapping import map_model
    from schedule_gym.models.pipeline import (MAX_SPREAD, RETIMES, check_outputs, interleaved, load_model,
                                              torch_latency, torch_outputs)

    loaded = load_model(args.model)
    target = host_llvm_target(args.threads)
    folds = True if args.folds is None else tuple(args.folds)
    if args.base_folds is not None:
        base_folds = tuple(args.base_folds)
    else:  # with --base-templates, --base-direct-grouped or --base-head-copies the first build's folds (they alone
        # differ), else none
        base_folds = folds if args.base_templates or args.base_direct_grouped or args.base_head_copies else ()
    base = ("templates " + " ".join(args.base_templates) if args.base_templates else
            "direct grouped" if args.base_direct_grouped else "head copies" if args.base_head_copies else
            "fewer folds" if base_folds else "TVM's lowering")
    base_model, base_mapped_folds = loaded.canonical, base_folds
    if args.base_head_copies:  # the attention folded with the heads copied, before the mapping's other folds
        base_model, _ = fold_attention(base_model, heads_in_place=False)
        base_mapped_folds = tuple(f for f in (DEFAULT_FOLDS if base_folds is True else base_folds) if f != "attention")
    base_mapping = map_model(base_model, fixed_kernels=base_mapped_folds)
    # the build the script weighs: with --base-templates the packed templates "auto" builds (PACKED)
    first = ("packed grouped" if args.base_direct_grouped else "packed templates" if args.base_templates else
             "heads in place" if args.base_head_copies else "fixed kernels")
    builds = {first: map_model(loaded.canonical, fixed_kernels=folds).packed(),
              base: _direct_grouped(base_mapping.packed(), base_mapping) if args.base_direct_grouped else
              base_mapping.packed()}
    picks = {label: _picks(mapped.tasks, args.records) for label, mapped in builds.items()}
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, CPU {cpu_name()}, {args.threads} threads, {args.model}; "
          f"picks: {len(picks[first])} of {len(builds[first].tasks)} tasks from "
          f"{' '.join(args.records) or 'none'}, "
          f"the rest the mock's; {base}: folds {'the default' if base_folds is True else list(base_folds)}", flush=True)
    print("\n".join("   " + line for line in builds[first].report.lines() if line.startswith("fixed")))
    reference = torch_outputs(loaded.spec)
    executables, timers = {}, {}
    for label, mapped in builds.items():
        templates = args.base_templates if label == base else ()
        executables[label] = compile_model(schedule_kernels(mapped, picks[label], templates=templates), target,
                                           fast_math=args.fast_math)
        error = check_outputs(run_model(executables[label], loaded.spec.inputs), reference)
        if error:
            raise SystemExit(f"{label}: the outputs differ from PyTorch's: {error}")
        print_profile(label, profile_model(executables[label], loaded.spec.inputs, tasks=mapped.kernel_tasks()), top=5)
        timers[label] = (lambda e=executables[label]: time_model(e, loaded.spec.inputs, repeat=1, min_repeat_ms=200)[0])
    timers["torch"] = lambda: torch_latency(loaded.spec, args.threads, 1)[0]
    times, sets = interleaved(timers, args.timings, MAX_SPREAD, RETIMES)
    print(f"   timed {sets} set(s) of {args.timings} rounds (again where a median exceeded its min {MAX_SPREAD}x)")
    for label, ts in times.items():
        print(f"   {label:<16} median {statistics.median(ts) * 1e3:8.2f} ms   min {min(ts) * 1e3:8.2f} ms   "
              f"{[round(t * 1e3, 1) for t in ts]}")
    ours, theirs = statistics.median(times[first]), statistics.median(times[base])
    print(f"   {base} / {first}: {theirs / ours:.2f}x (medians); "
          f"PyTorch / {first} {statistics.median(times['torch']) / ours:.2f}x")


if __name__ == "__main__":
    main()
