"""``schedule-gym tune-model``: a whole model tuned, rebuilt, checked against PyTorch and timed."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from schedule_gym.backends import BACKENDS, check_backend_options
from schedule_gym.cli.errors import EXIT_INTERRUPTED, CLIError
from schedule_gym.cli.params import output_path, parse_params, write_output
from schedule_gym.models.finalists import FINALIST_ROUNDS
from schedule_gym.models.tuning import ANALYTICAL_PICKS, ROUND_MEASUREMENTS, default_round

__all__ = ["DEFAULT_RECORDS", "add_parser", "run"]

DEFAULT_RECORDS = "runs/model-{model}__{agent}__{backend}__seed{seed}.jsonl"

EPILOG = f"""
--model is a zoo model, built from its definition with random seeded weights (schedule_gym.models.zoo),
or a model of your own as package.module:factory, where factory is a callable of no arguments that
returns (module, example_inputs): a torch.nn.Module and its positional inputs, a tensor or a tuple of
tensors (float32; integer and bool inputs allowed; on the CPU). The current directory is searched
first, so mymodels.py next to you is found as mymodels:factory. The model is captured
with torch.export, imported into TVM Relax and brought to a canonical form (batch norm and constants
folded); its LSTM cells, if any, are mapped to the fused form and its conv2d / dense / batch-matmul
sub-graphs to schedule-gym tasks (the mapping report says what matched and what is left to TVM).
The task scheduler spreads --budget measurements over the tasks in rounds of --round (Ansor's
gradient scheduler; --strategy round-robin for the plain one); the agent tunes each task through the
environment. A round is {ROUND_MEASUREMENTS} measurements by default, or fewer so that the budget gives every task
a round (a task without one keeps an untuned schedule); the output says which. With a measuring
backend every measurement goes to one record file (default
runs/model-MODEL__AGENT__BACKEND__seedSEED.jsonl): the same command resumes without measuring anything
twice. Then the tuned kernels are put into the model, the model is compiled, its outputs are checked
against PyTorch's on the same inputs and its latency is timed (with --compare: next to PyTorch eager
and TVM's default build).

examples:
  schedule-gym tune-model --model resnet18 --budget 400 --agent xgb --backend tvm --compare
  schedule-gym tune-model --model tiny-cnn --budget 40 --agent random --backend mock
  schedule-gym tune-model --model mymodels:small_cnn --budget 64 --backend tvm
  schedule-gym tune-model --model resnet50 --budget 312 --packed --agent gbfs --agent-param start=analytical --compare
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "tune-model", help="tune every kernel of a PyTorch model, rebuild it, check it against PyTorch, time it",
        description="Tune a whole model: import, map sub-graphs to tasks, tune them under one budget, rebuild.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # the zoo's names are not listed here: reading them imports PyTorch, which --help must not need
    p.add_argument("--model", required=True,
                   help="a zoo model (resnet18, tiny-cnn...: an unknown name lists them) or package.module:factory (see below)")
    p.add_argument("--budget", required=True, type=int, help="measurements in all, over the model's tasks")
    p.add_argument("--agent", default="xgb", help="a tile agent (default xgb)")
    p.add_argument("--backend", default="tvm", choices=[n for n, spec in BACKENDS.items() if not spec.serves_records],
                   help="default tvm")
    p.add_argument("--backend-param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--agent-param", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--round", type=int, default=None,
                   help=f"measurements per scheduler round (default: {ROUND_MEASUREMENTS}, or fewer so that every task "
                        "gets a round)")
    p.add_argument("--strategy", default="gradient", choices=("gradient", "round-robin"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--packed", action="store_true",
                   help="tune GEMM, dense, batch-matmul and NHWC conv2d tasks in their packed form (templates gemm-, "
                        "batch_matmul-cpu-v4, dense-, conv2d-cpu-v5)")
    p.add_argument("--analytical", type=int, default=ANALYTICAL_PICKS, metavar="N",
                   help="with --packed: each task first measures N configs BLIS's analytical model picks for this CPU "
                        f"(at most half its first round; 0: the agent alone; default {ANALYTICAL_PICKS}); an agent "
                        "with a start searches from the best pick with --agent-param start=analytical "
                        "(e.g. --agent gbfs)")
    p.add_argument("--finalists", type=int, default=3, metavar="K",
                   help="on a backend that measures hardware, time each task's K fastest configs again after tuning, "
                        f"{FINALIST_ROUNDS} rounds over all tasks, and build the lowest median (no new config is "
                        "measured; a disturbed measurement no longer picks the kernel); 0: the fastest tuned "
                        "measurement (default 3)")
    p.add_argument("--winograd", action="store_true",
                   help="compute the 3x3 convolutions as Winograd's F(4x4, 3x3): fixed transforms around a batched "
                        "GEMM tuned as a batch-matmul task (4x fewer multiplications; best with --packed)")
    p.add_argument("--attention", action="store_true",
                   help="compute each attention, softmax(Q @ K^T * alpha) @ V, as one fixed kernel from the scores to "
                        "the output, instead of two tuned batch matmuls and the softmax between them, and each layer "
                        "norm with the residual sum before it as another")
    p.add_argument("--fast-math", action="store_true",
                   help="build the softmax, exp, tanh, erf and GELUs left to TVM with TVM's fast approximations")
    p.add_argument("--threads", type=int, default=None, help="threads of the kernels and of PyTorch (default: all cores)")
    records = p.add_mutually_exclusive_group()
    records.add_argument("--records", help="record file to resume from and append to")
    records.add_argument("--no-records", action="store_true")
    p.add_argument("--no-build", action="store_true", help="tune only: do not rebuild, check and time the model")
    p.add_argument("--compare", action="store_true", help="also time PyTorch eager and TVM's default build")
    p.add_argument("--repeat", type=int, default=10, help="timing repeats (default 10)")
    p.add_argument("--result", help="write the result as JSON here")
    p.add_argument("--quiet", action="store_true", help="no line per round")
    p.set_defaults(func=run)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _require_libraries(agent: str) -> None:
    """PyTorch (the zoo, ``torch.export``), TVM (the import, the build) and the agent's own extra, named together."""
    from schedule_gym.agents import AGENT_NEEDS, agent_class
    from schedule_gym.extras import EXTRAS, require

    extras, modules = ["agents", "tvm"], ["torch", *EXTRAS["tvm"]]
    if agent in AGENT_NEEDS:
        extra, needed = AGENT_NEEDS[agent]
        extras.append(extra)
        modules += needed or EXTRAS[extra]
    require(f"schedule-gym tune-model with agent {agent!r}", *dict.fromkeys(extras), modules=modules)
    agent_class(agent)  # an unknown agent: named before the model is imported


def run(args: argparse.Namespace) -> int:
    from schedule_gym.hardware import cpu_name

    if args.budget < 1 or (args.round is not None and args.round < 1):
        raise CLIError(f"--budget and --round must be positive, got {args.budget} and {args.round}")
    for flag, value in (("--threads", args.threads), ("--repeat", args.repeat)):
        if value is not None and value < 1:
            raise CLIError(f"{flag} must be a positive integer, got {value}")
    for flag, value in (("--analytical", args.analytical), ("--finalists", args.finalists)):
        if value < 0:
            raise CLIError(f"{flag} must be a non-negative number of configs, got {value}")
    output_path(args.result, "--result")
    _require_libraries(args.agent)
    from schedule_gym.models.zoo import MODELS

    if ":" not in args.model and args.model not in MODELS:
        raise CLIError(f"unknown model {args.model!r}; known models: {', '.join(MODELS)}, "
                       "or package.module:factory for a model of your own")
    threads = args.threads or os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))  # before TVM's runtime starts its thread pool
    backend_params = parse_params(args.backend_param, "--backend-param")
    agent_params = parse_params(args.agent_param, "--agent-param")
    if args.backend not in BACKENDS:
        raise CLIError(f"unknown backend {args.backend!r}; known backends: {', '.join(BACKENDS)}")
    spec = BACKENDS[args.backend]
    if spec.measures_hardware:
        backend_params.setdefault("num_threads", threads)
    try:
        check_backend_options(args.backend, {**backend_params, "records": None})  # before the model is imported
    except TypeError as exc:
        raise CLIError(str(exc)) from None
    records = args.records
    if records is None and not args.no_records and (spec.measures_hardware or spec.serves_records):
        model = re.sub(r"[^\w.-]", "-", args.model)  # package.module:factory -> package.module-factory
        records = DEFAULT_RECORDS.format(model=model, agent=args.agent, backend=args.backend, seed=args.seed)
    if records is not None:
        Path(records).parent.mkdir(parents=True, exist_ok=True)

    from schedule_gym.models.pipeline import load_model

    start = time.perf_counter()
    loaded = load_model(args.model, seed=args.seed, winograd=args.winograd, attention=args.attention)
    if args.packed:
        loaded = dataclasses.replace(loaded, mapped=loaded.mapped.packed())
    mapped = loaded.mapped
    print(f"model {args.model}: {loaded.spec.description} — CPU {cpu_name()}, {threads} threads", flush=True)
    for line in loaded.report_lines():
        print(f"  {line}")
    total_weight = sum(t.weight for t in mapped.tasks)
    print(f"{len(mapped.tasks)} tasks ({total_weight} kernel calls per run), imported and mapped in "
          f"{time.perf_counter() - start:.1f} s", flush=True)
    round_measurements = args.round
    if round_measurements is None:
        round_measurements = default_round(args.budget, len(mapped.tasks))
        why = ("the default" if round_measurements == ROUND_MEASUREMENTS else
               f"the default {ROUND_MEASUREMENTS} lowered so that the budget of {args.budget} gives each of the "
               f"{len(mapped.tasks)} tasks a round")
        print(f"rounds of {round_measurements} measurements ({why}; --round to choose)", flush=True)
    elif args.round * len(mapped.tasks) > args.budget:
        print(f"rounds of {args.round} measurements: the budget of {args.budget} leaves some of the {len(mapped.tasks)} "
              f"tasks without a round (at most {max(1, args.budget // len(mapped.tasks))} per round would reach all)", flush=True)

    from schedule_gym.models.tuning import tune_model

    def progress(row: dict) -> None:
        if not args.quiet:
            best = row.get("best_latency_s")
            est = row.get("estimated_latency_s")
            print(f"  round {row['round']:>4}  {row['task']:<48} +{row['measurements']:<3} best {_ms(best):>12}  "
                  f"kernels of the model {_ms(est):>12}", flush=True)

    tune_start = time.perf_counter()
    try:
        result = tune_model(mapped, args.budget, agent=args.agent, backend=args.backend, backend_options=backend_params,
                            records=records, seed=args.seed, round_measurements=round_measurements, strategy=args.strategy,
                            agent_params=agent_params, progress=progress, analytical=args.analytical,
                            finalists=args.finalists)
    except KeyboardInterrupt:
        print("interrupted" + (f": the records in {records} are intact: run the same command to resume" if records else ""),
              file=sys.stderr)
        return EXIT_INTERRUPTED
    tune_s = time.perf_counter() - tune_start
    print(f"tuned {result.measurements} measurements in {tune_s:.1f} s" + (f"; records {records}" if records else ""))
    print(f"{'task':<50} {'x':>3} {'meas':>5} {'best':>12}")
    for t in result.tasks:
        print(f"{t.name:<50} {t.weight:>3} {t.measurements:>5} {_ms(t.best_latency_s):>12}")
    retimed = [t for t in result.tasks if t.finalists]
    if retimed:
        changed = len(result.changed_picks)
        print(f"best: the lowest median of each task's {args.finalists} fastest configs timed again "
              f"({FINALIST_ROUNDS} rounds); {changed} of {len(retimed)} picks are not the fastest tuned measurement")
    print(f"kernels of the model (sum of weight x best): {_ms(result.estimated_latency_s)}")
    untuned = [t.name for t in result.tasks if t.best_config is None]
    if untuned:
        print(f"{len(untuned)} task(s) got no measurement (budget below one round per task, or every config failed): "
              f"they use the mock's pick; raise --budget or lower --round", flush=True)
    out: dict[str, Any] = {"model": args.model, "cpu": cpu_name(), "threads": threads, "agent": args.agent,
                           "backend": args.backend, "budget": args.budget, "round": round_measurements,
                           "packed": args.packed, "analytical": args.analytical, "finalists": args.finalists,
                           "tune_s": tune_s,
                           **result.to_dict()}
    code = 0
    if not args.no_build:
        code = _build_check_time(args, loaded, result, threads, out)
    if args.result:
        write_output(Path(args.result), json.dumps(out, indent=1) + "\n", "--result")
        print(f"result written to {args.result}")
    return code


def _build_check_time(args: argparse.Namespace, loaded: Any, result: Any, threads: int, out: dict) -> int:
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels, time_model
    from schedule_gym.models.pipeline import check_outputs, summary, torch_latency, torch_outputs

    target = host_llvm_target(threads)
    build_start = time.perf_counter()
    executable = compile_model(schedule_kernels(loaded.mapped, result.configs), target, fast_math=args.fast_math)
    out["build_s"] = time.perf_counter() - build_start
    wrong = check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec))
    if wrong is not None:
        print(f"the tuned model's outputs differ from PyTorch's: {wrong}", file=sys.stderr)
        out["check"] = wrong
        return 1
    out["check"] = "ok"
    print(f"built in {out['build_s']:.1f} s; outputs equal PyTorch's (within 1e-4 of the largest output)")
    rows = [("tuned (schedule-gym)", time_model(executable, loaded.spec.inputs, args.repeat))]
    if args.compare:
        rows.append(("PyTorch eager", torch_latency(loaded.spec, threads, args.repeat)))
        default = compile_model(loaded.canonical, target, schedule_rest=False)
        rows.append(("TVM default build", time_model(default, loaded.spec.inputs, max(3, args.repeat // 3))))
    out["latency_s"] = {}
    for name, times in rows:
        lo, med = summary(times)
        out["latency_s"][name] = {"min": lo, "median": med, "runs": times}
        print(f"{name:<22} median {_ms(med):>12}  min {_ms(lo):>12}")
    return 0
