"""Whole models on this CPU, in one run: PyTorch eager, TVM's default builds, schedule-gym tuned, MetaSchedule.

For each model (``schedule_gym.models.zoo``: random seeded weights, batch 1) it prints, measured side by
side at the end of the model's run (median and min of ``--repeat`` timings, each the mean over at
least 200 ms; nothing else should run on the machine). The timings are interleaved: each of ``--repeat``
rounds times PyTorch and every build once, in an order rotated each round, so that a disturbance of the
machine spreads over all of them instead of falling on one (``tvm-default``, seconds a run, is timed 3
times after the rounds); a set in which some build's median is more than ``--max-spread`` times its minimum
(a disturbed machine) is timed again, up to ``--retime`` more times, and the quietest set is kept (the row's
``timing_sets`` and ``timing_spread``). PyTorch's timings start after a second's sleep (``torch_latency``'s ``settle_s``), so
that TVM's idle workers, which spin for a while after a TVM run, are asleep; run 30 timed PyTorch among them,
run 31 stopped their spinning (``TVM_THREAD_POOL_SPIN_COUNT=0``), which slowed TVM's small kernels:

* ``torch``: PyTorch eager, ``--threads`` threads;
* ``tvm-default``: TVM Relax's CPU build of the imported model as TVM ships it (no schedules);
* ``tvm-default-sched``: the same module with TVM's dlight CPU rules and parallel/vectorised loops for
  every operator (what ``compile_model`` gives the operators left to TVM), no tuning;
* ``schedule-gym``: the model mapped to tasks, ``--budget-per-task`` x tasks real measurements spread over its tasks by
  the gradient task scheduler, each task tuned by ``--agent``, the kernels put back and the model
  rebuilt (its outputs checked against PyTorch's);
* ``schedule-gym-packed`` (with ``--packed``): the same with every task that has a packed template
  (GEMM, dense, batch matmul, NHWC conv2d: ``MappedModel.packed()``, templates ``gemm-``, ``batch_matmul-cpu-v4``,
  ``dense-``, ``conv2d-cpu-v5``)
  in its packed form, the same budget, agent and seed (``--only-packed``: this build alone, without the one
  before it); ``--agent-param KEY=VALUE`` sets the agent's parameters for the packed tunings (``start=analytical``:
  G-BFS or N-A2C searches from each task's best analytical pick), each set its own record file;
* ``schedule-gym-packed-tuned-picks``: our builds take each task's pick of its ``--finalists`` (3) fastest
  configs timed again after tuning (``tune_model(finalists=...)``); this build is the packed model with the
  fastest tuned measurements instead (as with ``--finalists 0``, and every run before run 29), timed beside it
  where a pick changed;
* ``schedule-gym-packed-winograd`` (with ``--winograd``): the packed build with the 3x3 convolutions as
  Winograd's F(4x4, 3x3), its batched GEMMs tuned with the same budget per task;
* ``schedule-gym-packed-no-residual`` (with ``--no-residual-build``): the packed build with the residual adds
  left to TVM (``map_model(residual=False)``), as before the convolutions' epilogue took them;
* ``schedule-gym-packed-fast`` (with ``--fast-math``): the packed build's kernels, with the softmax, ``exp``,
  ``tanh``, ``erf`` and GELUs left to TVM replaced by TVM's fast approximations
  (``compile_model(fast_math=True)``; its outputs checked against PyTorch's all the same);
* ``schedule-gym-packed-attention`` (with ``--attention``, for a model with attention): the packed build with each
  attention, ``softmax(Q @ K^T * alpha) @ V``, one fixed kernel (``map_model(fixed_kernels=ATTENTION_FOLDS)``,
  ``schedule_gym.models.fixed.attention``) instead of two batch-matmul tasks, a softmax and the scaling, and each
  layer norm with the residual sum before it another (``schedule_gym.models.fixed.layer_norm``); its other
  tasks are the packed build's, with the packed build's picks (the same kernels); ``-attention-fast`` the same
  with fast math (with ``--fast-math``);
* ``metaschedule``: MetaSchedule's ``tune_relax`` of the imported model with as many trials in all
  (for the models in ``--metaschedule-models``), compiled with ``compile_relax``, which leaves the functions
  its trials did not reach unscheduled on a CPU;
* ``metaschedule+default``: the same records, compiled by ``compile_model(database=...)``: the functions
  without a record get the default schedules that ``tvm-default-sched`` gives every function.

With ``--profile``, each of our builds is also broken down by kernel (``profile_model``: the time of every
function the model calls, tuned tasks, operators left to TVM and the VM's builtins). Tuning wall times are
printed next to them. Records go to ``--records-dir``: a rerun resumes our tuning and reuses a finished
MetaSchedule tuning of the same trials, with its recorded wall time.

With ``--fma-peak``, the FP32 FMA peak of ``--threads`` threads is measured at the start and again after each
model's timings (``fma_peak.c``, built with gcc; ``gemm_peak.py``'s ``fma_peak``); the highest so far is the peak (a
probe that another process disturbed reads low, never high), and each model gets its **ceiling**: PyTorch eager's
median over the time the floating-point operations of its mapped kernels (``MappedModel.flops``: the matmuls and
convolutions, as the model states them, unpadded) would take at that peak. A build that does those multiplications,
however well scheduled, cannot be faster than PyTorch by more than that; only one that does fewer (Winograd's
convolutions) can.

The LSTM model also prints the optimization-mapping speed-up (the fused, merged LSTM against the native cells;
``examples/benchmarks/lstm_mapping.py``).

    python examples/benchmarks/models.py --models resnet18 bert-base --budget-per-task 12 --agent xgb
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from schedule_gym.models.pipeline import MAX_SPREAD, RETIMES  # imports no TVM: the thread count is set before it
from schedule_gym.models.tuning import ANALYTICAL_PICKS, ANALYTICAL_START  # nor does this

THREADS_ENV = "TVM_NUM_THREADS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenetv2", "bert-base", "lstm-ptb"])
    parser.add_argument("--budget-per-task", type=int, default=12,
                        help="a model's budget is this many measurements per task (at least --min-budget); "
                             "MetaSchedule gets the same number of trials")
    parser.add_argument("--min-budget", type=int, default=160)
    parser.add_argument("--metaschedule-models", nargs="*", default=["resnet18"],
                        help="models MetaSchedule also tunes (its search costs minutes per round here)")
    parser.add_argument("--agent", default="xgb")
    parser.add_argument("--agent-param", action="append", default=[], metavar="KEY=VALUE",
                        help="a parameter of --agent for the packed tunings (repeatable; start=analytical: an agent "
                             "with a start searches from each task's best analytical pick); the records file is named "
                             "after them")
    parser.add_argument("--round", type=int, default=None,
                        help="measurements per scheduler round (default: 16, or fewer so every task gets a round)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--winograd", action="store_true",
                        help="with --packed: also a build whose 3x3 convolutions are Winograd's F(4x4, 3x3) "
                             "(map_model(winograd=True)), its batched GEMMs tuned with the same budget per task")
    parser.add_argument("--no-residual-build", action="store_true",
                        help="with --packed: also the packed build with the residual adds left to TVM "
                             "(map_model(residual=False)), tuned with the same budget per task, timed beside")
    parser.add_argument("--max-spread", type=float, default=MAX_SPREAD,
                        help="time a model's set again when some build's median exceeds its min this much (default "
                             "pipeline.MAX_SPREAD)")
    parser.add_argument("--retime", type=int, default=RETIMES, help="at most this many more sets (0: time once)")
    parser.add_argument("--no-default", action="store_true", help="skip the unscheduled TVM build (slow on big models)")
    parser.add_argument("--no-default-sched", action="store_true",
                        help="skip TVM with default schedules too (its 7 timings take seconds each on the larger models)")
    parser.add_argument("--packed", action="store_true",
                        help="also tune and build the packed form (templates gemm-, batch_matmul-cpu-v4, dense-, "
                             "conv2d-cpu-v5)")
    parser.add_argument("--only-packed", action="store_true",
                        help="tune and build the packed form only (implies --packed; no v1 'schedule-gym' build)")
    parser.add_argument("--analytical", type=int, default=ANALYTICAL_PICKS,
                        help="analytical picks each packed task measures first (tune_model's analytical; 0: none)")
    parser.add_argument("--finalists", type=int, default=3, metavar="K",
                        help="re-time each task's K fastest configs after tuning and build the lowest median "
                             "(tune_model's finalists, default 3; 0: the fastest tuned measurement, as runs before run 29 "
                             "built); with K > 1 the build with the tuned picks is timed beside it where a pick changed")
    parser.add_argument("--fast-math", action="store_true",
                        help="with --packed, also build the packed form with fast math for the operators left to TVM "
                             "(compile_model(fast_math=True): softmax, exp, tanh, erf, GELUs), timed beside it")
    parser.add_argument("--attention", action="store_true",
                        help="also build the packed model with each attention and each layer norm one fixed "
                             "kernel, timed beside it")
    parser.add_argument("--fma-peak", action="store_true",
                        help="measure the FP32 FMA peak (fma_peak.c, with gcc) at the start and after each model's "
                             "timings, the highest so far the peak, and give each model its ceiling")
    parser.add_argument("--profile", action="store_true",
                        help="also time every kernel of our builds where it runs (models.build.profile_model): "
                             "tuned tasks, operators left to TVM, the VM's builtins")
    parser.add_argument("--records-dir", default="runs/models")
    parser.add_argument("--out", default="examples/results/models/models.json")
    args = parser.parse_args()
    args.packed = args.packed or args.only_packed
    os.environ[THREADS_ENV] = str(args.threads)  # before TVM's runtime starts
    from schedule_gym.cli.errors import CLIError
    from schedule_gym.cli.params import parse_params

    try:
        args.agent_params = parse_params(args.agent_param, "--agent-param")
    except CLIError as exc:
        parser.error(str(exc))

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.hardware import cpu_name
    from schedule_gym.models.build import compile_model, profile_model, run_model, schedule_kernels, time_model
    from schedule_gym.models.fixed import ATTENTION_FOLDS
    from schedule_gym.models.pipeline import (check_outputs, interleaved, load_model, spread, summary, torch_latency,
                                              torch_outputs)
    from schedule_gym.models.tuning import tune_model

    cpu = cpu_name()
    target = host_llvm_target(args.threads)
    print(f"CPU {cpu}, {args.threads} threads, {time.strftime('%Y-%m-%d')}; budget {args.budget_per_task} per task "
          f"(at least {args.min_budget}), agent {args.agent}",
          flush=True)
    peaks: list[dict] = []  # every FMA-peak probe of the run, in order

    def probe_peak() -> dict:
        """Measure the FMA peak again; the highest probe so far (a disturbed probe reads low)."""
        from gemm_peak import fma_peak  # the experiment beside this script

        peaks.append(fma_peak(args.threads))
        best = max(peaks, key=lambda p: p["gflops"])
        print(f"FP32 FMA peak {peaks[-1]['gflops']:.1f} GFLOP/s measured ({peaks[-1]['threads']} threads, "
              f"{peaks[-1]['isa']}); the highest of {len(peaks)} probes {best['gflops']:.1f}", flush=True)
        return best

    if args.fma_peak:
        probe_peak()

    def budget_for(model: Any) -> int:
        """``--budget-per-task`` measurements for each of ``model``'s tasks, at least ``--min-budget``."""
        return max(args.min_budget, args.budget_per_task * len(model.tasks))

    Path(args.records_dir).mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.models:
        start = time.perf_counter()
        loaded = load_model(name)
        mapped = loaded.mapped
        budget = budget_for(mapped)
        row: dict = {"model": name, "cpu": cpu, "threads": args.threads, "budget": budget, "agent": args.agent,
                     "agent_params": args.agent_params, "import_s": time.perf_counter() - start,
                     "date": time.strftime("%Y-%m-%d")}
        row["tasks"] = len(mapped.tasks)
        row["flops"] = mapped.flops
        row["mapping"] = loaded.report_lines()
        print(f"\n== {name}: {len(mapped.tasks)} tasks, {sum(t.weight for t in mapped.tasks)} kernel calls, budget {budget}, "
              f"imported and mapped in {row['import_s']:.0f} s", flush=True)
        for line in loaded.report_lines():
            print(f"   {line}")
        reference = torch_outputs(loaded.spec)

        builds, kernel_tasks = {}, {}  # our builds' kernel symbols -> task names, for the profile

        def add_build(label: str, executable: Any, tasks: dict, check_key: str) -> None:
            """Keep ``executable`` as the build ``label`` and its check against PyTorch as ``row[check_key]``."""
            builds[label], kernel_tasks[label] = executable, tasks
            wrong = check_outputs(run_model(executable, loaded.spec.inputs), reference)
            row[check_key] = wrong or "ok"
            if wrong:
                print(f"   WRONG ({label}): {wrong}", file=sys.stderr)

        def tune_packed(model: Any, budget: int) -> Any:
            """``model``'s packed tasks tuned, sharing one record file (a task two builds share is measured once)."""
            return tune_model(model, budget, agent=args.agent,
                              backend="tvm", backend_options={"num_threads": args.threads},
                              records=packed_records(args.records_dir, name, args.agent, args.analytical,
                                                     args.agent_params),
                              round_measurements=args.round, analytical=args.analytical, finalists=args.finalists,
                              agent_params=args.agent_params)

        if not args.only_packed:
            start = time.perf_counter()
            records = f"{args.records_dir}/{name}__{args.agent}__seed0.jsonl"
            tuned = tune_model(mapped, budget, agent=args.agent, backend="tvm",
                               backend_options={"num_threads": args.threads}, records=records,
                               round_measurements=args.round, finalists=args.finalists)
            row["tune_s"] = time.perf_counter() - start
            row["estimated_kernels_s"] = tuned.estimated_latency_s
            row["allocation"] = {t.name: t.measurements for t in tuned.tasks}
            print(f"   tuned {tuned.measurements} measurements in {row['tune_s']:.0f} s", flush=True)
            add_build("schedule-gym", compile_model(schedule_kernels(mapped, tuned.configs), target),
                      mapped.kernel_tasks(), "check")
        if args.packed:
            packed = mapped.packed()
            start = time.perf_counter()
            tuned_packed = tune_packed(packed, budget)
            row["tune_packed_s"] = time.perf_counter() - start
            row["packed_tasks"] = sum(t.task.name.endswith("-packed") for t in packed.tasks)
            row["estimated_kernels_packed_s"] = tuned_packed.estimated_latency_s
            print(f"   packed ({row['packed_tasks']} of {len(packed.tasks)} tasks): tuned {tuned_packed.measurements} "
                  f"measurements in {row['tune_packed_s']:.0f} s", flush=True)
            scheduled = schedule_kernels(packed, tuned_packed.configs)
            packed_tasks = packed.kernel_tasks()  # padded layers: kernels of their own
            add_build("schedule-gym-packed", compile_model(scheduled, target), packed_tasks, "check_packed")
            changed = tuned_packed.changed_picks
            if args.finalists > 1:
                row["finalists"] = {t.name: [f.to_dict() for f in t.finalists] for t in tuned_packed.tasks if t.finalists}
                row["finalists_changed"] = sorted(changed)
                print(f"   finalists re-timed: {len(changed)} of {len(packed.tasks)} picks changed", flush=True)
            plain = loaded.remap(residual=False).packed() if args.no_residual_build else None
            if plain is not None and plain.task_weights() == packed.task_weights():
                print("   no residual add to fold: no build without the fold", flush=True)
            elif plain is not None:  # the residual adds left to TVM, as before the epilogue took them
                tuned_plain = tune_packed(plain, budget_for(plain))
                add_build("schedule-gym-packed-no-residual", compile_model(
                    schedule_kernels(plain, tuned_plain.configs), target), plain.kernel_tasks(),
                    "check_packed_no_residual")
            winograd = loaded.remap(winograd=True).packed() if args.winograd else None
            if winograd is not None and not winograd.report.winograd:
                print("   winograd: no convolution to fold, no build of its own", flush=True)
            elif winograd is not None:  # the same with the 3x3 convolutions as Winograd's F(4x4, 3x3), its GEMMs tuned
                start = time.perf_counter()
                tuned_winograd = tune_packed(winograd, budget_for(winograd))
                row["tune_winograd_s"] = time.perf_counter() - start
                row["winograd"] = dict(winograd.report.winograd)
                print(f"   winograd ({sum(row['winograd'].values())} convolutions, {len(winograd.tasks)} tasks): tuned "
                      f"{tuned_winograd.measurements} measurements in {row['tune_winograd_s']:.0f} s", flush=True)
                add_build("schedule-gym-packed-winograd", compile_model(
                    schedule_kernels(winograd, tuned_winograd.configs), target), winograd.kernel_tasks(),
                    "check_packed_winograd")
            if changed:  # the model as the fastest tuned measurements would build it, timed beside
                add_build("schedule-gym-packed-tuned-picks", compile_model(
                    schedule_kernels(packed, tuned_packed.tuned_configs), target), packed_tasks,
                    "check_packed_tuned_picks")
            if args.fast_math:  # the same kernels; the operators left to TVM with fast math
                add_build("schedule-gym-packed-fast", compile_model(scheduled, target, fast_math=True), packed_tasks,
                          "check_packed_fast")
            attention = loaded.remap(fixed_kernels=ATTENTION_FOLDS).packed() if args.attention else None
            if attention is not None and not attention.report.fixed["attention"] + attention.report.fixed[
                    "causal attention"]:
                print("   attention: none to fold, no build of its own", flush=True)
            elif attention is not None:  # its tasks are the packed build's less the batch matmuls: the same picks
                picks = {t.task.name: tuned_packed.configs[t.task.name] for t in attention.tasks}
                row["attention"] = {form: n for form, n in attention.report.fixed.items() if "attention" in form}
                print(f"   attention ({sum(row['attention'].values())} folded, {len(attention.tasks)} tasks, the "
                      "packed build's picks)", flush=True)
                for fast, suffix in ((False, ""), (True, "-fast"))[:1 + args.fast_math]:
                    add_build(f"schedule-gym-packed-attention{suffix}", compile_model(
                        schedule_kernels(attention, picks), target, fast_math=fast),
                        attention.kernel_tasks(), f"check_packed_attention{suffix.replace('-', '_')}")
        if not args.no_default_sched:
            builds["tvm-default-sched"] = compile_model(loaded.canonical, target, schedule_rest=True)
        if not args.no_default:
            builds["tvm-default"] = compile_model(loaded.canonical, target, schedule_rest=False)
        if name in args.metaschedule_models:
            builds["metaschedule"], database, row["metaschedule_tune_s"], (covered, ms_tasks) = _metaschedule(
                loaded.canonical, target, budget, Path(args.records_dir) / f"ms-{name}")
            row["metaschedule_tasks"] = {"tuned": covered, "all": ms_tasks}
            # its records, and the default schedules for the functions it has none for (as our builds get)
            builds["metaschedule+default"] = compile_model(loaded.canonical, target, database=database)
            wrong = check_outputs(run_model(builds["metaschedule"], loaded.spec.inputs), reference)
            row["metaschedule_check"] = wrong or "ok"
            wrong = check_outputs(run_model(builds["metaschedule+default"], loaded.spec.inputs), reference)
            row["metaschedule+default_check"] = wrong or "ok"
            print(f"   metaschedule tuned in {row['metaschedule_tune_s']:.0f} s, a record for {covered} of its "
                  f"{ms_tasks} tasks", flush=True)
        if name.startswith("lstm"):
            from lstm_mapping import measure_lstm_mapping, speedup_line  # the experiment beside this script

            row["lstm_mapping"] = found = measure_lstm_mapping(name, args.threads, args.repeat)
            print(f"   {speedup_line(found)}", flush=True)
        # the side-by-side timings, interleaved, on a quiet machine
        timers = {"torch": lambda: torch_latency(loaded.spec, args.threads, 1)[0]}
        for label, executable in builds.items():
            if label != "tvm-default":
                timers[label] = lambda e=executable: time_model(e, loaded.spec.inputs, repeat=1, min_repeat_ms=200)[0]
        timings, row["timing_sets"] = interleaved(timers, args.repeat, args.max_spread, args.retime)
        row["timing_spread"] = {label: spread(ts) for label, ts in timings.items()}
        if max(row["timing_spread"].values()) > args.max_spread:
            print(f"   DISTURBED: after {row['timing_sets']} sets a median is still "
                  f"{max(row['timing_spread'].values()):.2f}x its min", file=sys.stderr, flush=True)
        if "tvm-default" in builds:
            timings["tvm-default"] = time_model(builds["tvm-default"], loaded.spec.inputs, repeat=3, min_repeat_ms=0)
        row["latency_s"] = {k: {"min": summary(v)[0], "median": summary(v)[1], "runs": v} for k, v in timings.items()}
        for label, stats in row["latency_s"].items():
            print(f"   {label:<18} median {stats['median'] * 1e3:10.2f} ms   min {stats['min'] * 1e3:10.2f} ms", flush=True)
        if args.fma_peak:
            peak = probe_peak()  # again after the timings: the one at the start may have met a busy machine
            row["fma_peak_gflops"] = peak["gflops"]
            row["fma_peak_probes_gflops"] = [p["gflops"] for p in peaks]
            row["ceiling"] = ceiling = row["latency_s"]["torch"]["median"] * peak["gflops"] * 1e9 / mapped.flops
            print(f"   ceiling: {mapped.flops / 1e9:.3g} GFLOP in the mapped kernels take "
                  f"{mapped.flops / peak['gflops'] / 1e6:.3g} ms at the FMA peak: a build doing these multiplications"
                  f" is at most {ceiling:.2f}x PyTorch eager's median", flush=True)
        if args.profile:
            row["profile"] = {}
            for label, tasks in kernel_tasks.items():
                kernels = profile_model(builds[label], loaded.spec.inputs, runs=args.repeat, tasks=tasks)
                row["profile"][label] = [dataclasses.asdict(k) for k in kernels]
                print_profile(label, kernels)
        results.append(row)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nwritten to {args.out}")


def packed_records(records_dir: str, model: str, agent: str, analytical: int, agent_params: dict | None = None) -> str:
    """The record file of a model's packed tasks in ``records_dir`` (tagged ``__picks`` where the run measures
    analytical picks: the agent alone keeps the untagged file; ``-start`` after it where the agent searches from
    the best pick, as ``analytical_picks.py`` names it; any other agent parameters, ``-key=value``, after that: an
    agent's records are its own decisions); ``padded_views.py`` reads the same."""
    params = dict(agent_params or {})
    tag = "__picks" if analytical else ""
    if params.get("start") == ANALYTICAL_START:
        tag += "-start"
        del params["start"]
    tag += "".join(f"-{key}={value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}"
                   for key, value in sorted(params.items()))
    return f"{records_dir}/{model}__{agent}__packed{tag}__seed0.jsonl"


def print_profile(label: str, kernels: list, top: int = 15) -> None:
    """Where a build's time goes: its totals by kind (tuned tasks, operators left to TVM, the VM's builtins, our
    fixed kernels where there are any) and its ``top`` most expensive functions (median seconds per
    run)."""
    from schedule_gym.models.fixed import SYMBOL_PREFIX

    total = sum(k.seconds for k in kernels)
    fixed = [k for k in kernels if k.symbol.startswith(SYMBOL_PREFIX)]
    kinds = {"tuned tasks": [k for k in kernels if k.task is not None],
             "left to TVM": [k for k in kernels if k.task is None and not k.symbol.startswith(("vm.", SYMBOL_PREFIX))],
             "VM builtins": [k for k in kernels if k.symbol.startswith("vm.")]}
    if fixed:
        kinds["fixed kernels"] = fixed
    print(f"   profile of {label}: {total * 1e3:.2f} ms in calls; "
          + ", ".join(f"{kind} {sum(k.seconds for k in ks) * 1e3:.2f} ms ({len(ks)} functions)"
                      for kind, ks in kinds.items()), flush=True)
    for k in kernels[:top]:
        print(f"     {k.seconds * 1e3:9.3f} ms {100 * k.seconds / total:5.1f}%  {k.calls:4d} calls  {k.symbol}"
              + (f"  [{k.task}]" if k.task else ""), flush=True)


def _metaschedule(canonical, target, trials: int, work_dir: Path):
    """MetaSchedule's tune_relax with ``trials`` in all, then compile_relax (stock settings otherwise): the
    executable, the database, the tuning's wall seconds and ``(tasks with a record, tasks)``.

    tune_relax is given the legalised, fused module (its task extraction takes TIR functions) and
    compile_relax the module before legalisation: compile_relax legalises and fuses again itself, and a
    function fused twice is annotated again, which changes its workload's hash, so given the legalised
    module it found no record for any fused function (every matmul of BERT-base) and built them with no
    schedule. A finished tuning (``work_dir/tuned.json``, same trials) is reused with its recorded wall time.
    """
    import logging

    import tvm
    from tvm.s_tir import meta_schedule as ms

    from schedule_gym.baselines.metaschedule import build_without_tensor_intrinsics, import_tensor_intrinsics
    from schedule_gym.models.build import fused_module

    tvm_target = tvm.target.Target(target)
    mod = fused_module(canonical, tvm_target)  # its task extraction takes the legalised, fused TIR functions
    done = work_dir / "tuned.json"
    previous = json.loads(done.read_text()) if done.exists() else None
    if previous is not None and previous.get("trials") == trials:
        database = ms.database.JSONDatabase(work_dir=str(work_dir))
        tune_s = previous["tune_s"]
    else:
        shutil.rmtree(work_dir, ignore_errors=True)
        work_dir.mkdir(parents=True)
        logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
        import_tensor_intrinsics()  # its tuning time is the search's, not this one-time import's
        start = time.perf_counter()
        # stock settings except the timeouts and the build function: TVM's own less its import of every
        # tensor intrinsic in each build worker, which alone can pass 120 s on 2 busy cores (every build
        # then fails; build_without_tensor_intrinsics says why)
        database = ms.relax_integration.tune_relax(
            mod, {}, tvm_target, str(work_dir), max_trials_global=trials, num_trials_per_iter=16, seed=0,
            builder=ms.builder.LocalBuilder(timeout_sec=120, f_build=build_without_tensor_intrinsics),
            runner=ms.runner.LocalRunner(timeout_sec=60))
        tune_s = time.perf_counter() - start
        done.write_text(json.dumps({"trials": trials, "tune_s": tune_s}) + "\n")
    tasks = ms.relax_integration.extract_tasks(mod, tvm_target, {})
    covered = sum(database.query_tuning_record(t.dispatched[0], tvm_target, t.task_name) is not None for t in tasks)
    return (ms.relax_integration.compile_relax(database, canonical, tvm_target, None), database, tune_s,
            (covered, len(tasks)))


if __name__ == "__main__":
    main()
