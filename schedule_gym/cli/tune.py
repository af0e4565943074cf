"""``schedule-gym tune``: a task tuned by a search agent with a live progress display, then compared with NumPy.

Bad input is found while setting up, before anything is measured, and is a :class:`CLIError`; a
``TypeError`` or ``ValueError`` raised later is a bug and keeps its traceback. Ctrl-C prints the result so
far and exits with :data:`EXIT_INTERRUPTED` (the records stay intact).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from schedule_gym.backends import BACKENDS
from schedule_gym.cli.errors import EXIT_INTERRUPTED, CLIError
from schedule_gym.cli.params import output_path, parse_params, write_output
from schedule_gym.cli.progress import TuneProgress, format_gflops
from schedule_gym.cli.traits import measures_remotely
from schedule_gym.errors import MissingExtraError
from schedule_gym.extras import require
from schedule_gym.spaces import OrderSpace, Schedule, ScheduleSpace, TileSpace
from schedule_gym.tasks import Task, get_task

__all__ = ["DEFAULT_RECORDS", "add_parser", "run"]

#: Where ``tune`` keeps the measurements of a measuring backend when ``--records`` is not given.
DEFAULT_RECORDS = "runs/{task}__{agent}__{backend}__seed{seed}.jsonl"

EPILOG = f"""
records: with a measuring backend ({', '.join(n for n, b in BACKENDS.items() if b.measures_hardware)}) every measurement is appended (fsync'd) to a
JSON-lines record file as soon as it is known, by default {DEFAULT_RECORDS} (--records to choose
another, --no-records for none; the mock backend keeps none unless --records is given). Running the
same command again resumes: recorded configs are served from the file, so a seeded agent replays its
decisions and measures only what is new. Records are keyed by task, target (including the thread
count), template version and config, not by the measurement protocol or the agent, so any run of the
same task on the same target may share a file.

key=value: values are parsed as JSON where they parse (1, 0.5, true, null, [0, 1], "text"), else kept as
strings; a dotted key sets a nested field (--backend-param protocol.min_repeat_ms=5).

examples:
  schedule-gym tune --task gemm-1024 --agent random --backend mock --budget 0.1%
  schedule-gym tune --task gemm-1024 --agent gbfs --backend tvm --budget 900 --export-kernel best.so
  schedule-gym tune --task gemm-128x256x512 --agent random --backend tvm --budget 15m \\
      --backend-param num_threads=1 --agent-param batch_size=8 --result out.json
"""


def add_parser(sub: Any) -> None:
    from schedule_gym.agents import AGENTS

    p = sub.add_parser(
        "tune", help="tune a task with a search agent, live progress, then compare with NumPy",
        description="Tune a task's tile sizes with a search agent; print the best config and how it compares\n"
        "with s0 and with NumPy measured in the same run, on the same machine.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", default="gemm-1024", help="a preset (schedule-gym tasks) or gemm-MxKxN (default gemm-1024)")
    p.add_argument("--agent", default="random", help=f"a registered agent: {', '.join(AGENTS)} (default random)")
    p.add_argument("--backend", default="mock", help=f"{', '.join(BACKENDS)} (default mock)")
    p.add_argument("--budget", required=True, help="measurements (900), a share of the space (0.1%%) or wall time (600s, 15m, 2h)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--orders", action="store_true",
                   help="tune the loop order too (Schedule-v0: tile moves and loop swaps; needed by csp, mdf, orders)")
    records = p.add_mutually_exclusive_group()
    records.add_argument("--records", help="JSON-lines record file to resume from and append to (see below)")
    records.add_argument("--no-records", action="store_true", help="keep no record file")
    p.add_argument("--agent-param", action="append", default=[], metavar="KEY=VALUE", help="an agent hyper-parameter (repeatable)")
    p.add_argument("--backend-param", action="append", default=[], metavar="KEY=VALUE", help="a backend option (repeatable)")
    p.add_argument("--result", help="write the result (history, best config, references) as JSON here")
    p.add_argument("--print-tvmscript", action="store_true", help="print the best schedule as TVMScript")
    p.add_argument("--export-kernel", metavar="PATH", help="write the best kernel as a shared library (tvm.runtime.load_module)")
    p.add_argument("--no-numpy", action="store_true", help="do not time NumPy for comparison")
    p.add_argument("--torch", action="store_true", help="also time torch's matmul for comparison")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.set_defaults(func=run)


def _fmt_config(config: Any) -> str:
    if isinstance(config, Schedule):
        return f"{_fmt_config(config.tiles)} in order {OrderSpace.describe(config.order)}"
    return str(tuple(tuple(int(f) for f in factors) for factors in config))


def _task_and_tiles(task: Task, config: Any) -> tuple[Task, Any]:
    """The task in the schedule's loop order and its tile config (a plain tile config: as given)."""
    if isinstance(config, Schedule):
        return task.with_order(config.order), config.tiles
    return task, config


def _setup_tune(args: argparse.Namespace) -> tuple[Task, Any, Any, Any, str | None]:
    """Check every input and build (budget, agent, env); bad input raises :class:`CLIError`."""
    from schedule_gym.agents import SCHEDULE_AGENTS, Budget, agent_class, make_agent
    from schedule_gym.envs import ScheduleEnv, TilingEnv

    try:
        budget = Budget.parse(args.budget)
        task = get_task(args.task)
        agent_params = parse_params(args.agent_param, "--agent-param")
        backend_params = parse_params(args.backend_param, "--backend-param")
        if args.backend not in BACKENDS:
            raise ValueError(f"unknown backend {args.backend!r}; known backends: {', '.join(BACKENDS)}")
        if "records" in backend_params:
            raise ValueError("give the record file with --records, not --backend-param records=...")
        output_path(args.result, "--result")
        output_path(args.export_kernel, "--export-kernel")
        needs_tvm = [flag for flag, on in (("--print-tvmscript", args.print_tvmscript),
                                           ("--export-kernel", args.export_kernel)) if on]
        if needs_tvm:
            require(" and ".join(needs_tvm), "tvm")
        if args.agent in SCHEDULE_AGENTS and not args.orders:
            raise ValueError(f"agent {args.agent!r} tunes schedules (tiles and loop order): add --orders")
        try:
            agent_class(args.agent)
        except MissingExtraError:
            raise  # it names the extra to install: printed as it is
        except ImportError as exc:
            raise CLIError(f"agent {args.agent!r} cannot be loaded: {exc}") from None
        agent = make_agent(args.agent, args.seed, **agent_params)
        records = args.records
        if records is None and not args.no_records and BACKENDS[args.backend].measures_hardware:
            records = DEFAULT_RECORDS.format(task=task.name, agent=args.agent, backend=args.backend, seed=args.seed)
        if records is not None:
            backend_params["records"] = records
        elif BACKENDS[args.backend].serves_records:
            raise ValueError("the replay backend serves a record file: give it with --records FILE")
        try:
            env_class = ScheduleEnv if args.orders else TilingEnv
            env = env_class(task=task, backend=args.backend, backend_options=backend_params)
        except MissingExtraError:
            raise
        except ImportError as exc:
            raise CLIError(f"the {args.backend} backend cannot be loaded: {exc}") from None
    except (TypeError, ValueError, ConnectionError) as exc:
        raise CLIError(str(exc)) from None
    return task, budget, agent, env, records


def run(args: argparse.Namespace) -> int:
    try:
        task, budget, agent, env, records = _setup_tune(args)
    except KeyboardInterrupt:
        print("interrupted while setting up; nothing measured", file=sys.stderr)
        return EXIT_INTERRUPTED
    limit = budget.count_limit(env.space.size)
    limit = None if limit is None else min(limit, env.space.size)
    store = env.backend.record_store
    stored_before = 0 if store is None else len(store)
    kernels = env.backend.kernel_target  # None: the backend builds no kernels (a model, records alone)
    template = kernels.template if kernels is not None else "auto"
    threads = kernels.num_threads if kernels is not None else None
    progress = TuneProgress(task.name, task.flops, limit, budget.seconds, args.quiet)
    result = None
    interrupted = False
    try:
        try:
            with progress:
                result = agent.run(env, budget, progress=progress)
        finally:
            env.close()
    except KeyboardInterrupt:
        interrupted = True
    if result is None:
        print("interrupted before the run started; nothing measured", file=sys.stderr)
        return EXIT_INTERRUPTED
    interrupted = interrupted or result.stop_reason == "interrupted"
    stored_new = None if store is None else len(store) - stored_before

    lines = _report(task, args, budget, limit, result, records, stored_new, progress.failed)
    print("\n".join(lines), flush=True)
    extra: dict[str, Any] = {"backend": args.backend, "records": records, "references": []}
    code = 0
    try:
        if interrupted:
            print(f"interrupted: stopped by Ctrl-C after {result.num_measurements} measurements"
                  + (f"; the records in {records} are intact: run the same command to resume" if records else ""))
            code = EXIT_INTERRUPTED
        elif result.best_config is None:
            print("no successful measurement: nothing to compare or export", file=sys.stderr)
            code = 1
        else:
            from schedule_gym.reference import library_references

            elsewhere = _not_comparable_here(env.backend, task)
            refs = []
            if elsewhere:
                if args.torch or not args.no_numpy:
                    print(f"vs NumPy  not measured: {elsewhere}", file=sys.stderr)
            else:
                try:
                    refs = library_references(task, threads, numpy=not args.no_numpy, torch=args.torch)
                except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:  # a comparison, not the result
                    print(f"vs NumPy  not measured: {exc}", file=sys.stderr)
            for line in _reference_lines(result, refs, args.backend):
                print(line, flush=True)
            extra["references"] = [r.to_dict() for r in refs]
            if args.print_tvmscript:
                from schedule_gym.templates import get_template, schedule_script, template_of

                best_task, tiles = _task_and_tiles(task, result.best_config)
                name = template_of(best_task, "llvm").name if template == "auto" else get_template(template).name
                print(f"\n# best schedule {_fmt_config(result.best_config)} as TVMScript (template {name})")
                print(schedule_script(best_task, tiles, name), flush=True)
            if args.export_kernel:
                code = _export(*_task_and_tiles(task, result.best_config), args.export_kernel, kernels)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    if args.result:
        write_output(Path(args.result), json.dumps({**result.to_dict(), **extra}, indent=1) + "\n", "--result")
        print(f"result written to {args.result}")
    return code


def _export(task: Task, config: Any, path: str, kernels: Any) -> int:
    """Export the best kernel as the backend builds kernels (this CPU and each task's template for a backend that
    builds none), checked against NumPy unless it runs on other machines."""
    from schedule_gym.backends.tvm.export import KernelTarget

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        kernel = (kernels or KernelTarget()).export(task, config, path)
    except RuntimeError as exc:
        print(f"schedule-gym: error: {exc}", file=sys.stderr)
        return 1
    checked = (
        f"checked against NumPy after export: max abs error {kernel.max_abs_error:.3g}"
        if kernel.max_abs_error is not None else "not checked here (built for another device)"
    )
    target_text = ", ".join(f"{k}={v}" for k, v in kernel.target.items())
    print(f"\nexported the best kernel to {kernel.path} ({kernel.template}, target {target_text}); {checked}")
    print(f"  module = tvm.runtime.load_module({kernel.path!r}); module[{kernel.function!r}](A, B, C)")
    print(f"  {kernel.signature}; A, B, C are tvm.runtime.tensor arrays, "
          "run in parallel on TVM_NUM_THREADS threads")
    return 0


def _report(
    task: Task, args: argparse.Namespace, budget: Any, limit: int | None, result: Any,
    records: str | None, stored_new: int | None, failed: int,
) -> list[str]:
    params = ", ".join(f"{k}={v!r}" for k, v in result.params.items())
    budget_text = args.budget + (f" = {limit:,} configs" if limit is not None and str(limit) != args.budget.strip() else "")
    n = result.num_measurements
    lines = [
        "",
        f"task      {task.describe()}, {result.space_size:,} configs",
        (f"agent     {args.agent} (seed {args.seed}{'; ' + params if params else ''}) on backend {args.backend}, "
         f"budget {budget_text}"),
    ]
    if records is not None and stored_new is not None:
        lines.append(f"records   {records}: {n - stored_new} reused, {stored_new} measured now")
    lines.append(f"run       {n:,} measurements ({n / result.space_size:.3%} of the space) in {result.wall_s:.1f} s, "
                 f"{failed} failed; stopped: {result.stop_reason}")
    s0 = ScheduleSpace(task).initial_config() if args.orders else TileSpace(task).initial_config()
    if result.s0_latency_s is not None:
        lines.append(f"s0        {_fmt_config(s0)}: {result.s0_latency_s * 1e3:.4g} ms = "
                     f"{format_gflops(result.flops, result.s0_latency_s)}")
    best = result.best_config
    if best is not None:
        at = next(r.n for r in result.history if r.config == best)
        lines.append(f"best      {_fmt_config(best)}: {result.best_latency_s * 1e3:.4g} ms = "
                     f"{format_gflops(result.flops, result.best_latency_s)} (measurement {at} of {n})")
        if result.speedup_over_s0 is not None:
            lines.append(f"speed-up  {result.speedup_over_s0:,.1f}x over s0")
    return lines


def _not_comparable_here(backend: Any, task: Task) -> str | None:
    """Why the tuned kernel cannot be compared with the CPU libraries timed here, or None: a kernel built
    for a GPU (measured now, or replayed from its records) is compared with the GPU's own library (cuBLAS),
    not with NumPy's or torch's CPU GEMM."""
    kind = _target_kind(backend, task)
    if kind in (None, "llvm"):
        return None
    return (f"the kernel ran on a {kind} device and NumPy and torch are timed on this CPU; "
            f"compare it with the device's own library (cuBLAS for CUDA)")


def _target_kind(backend: Any, task: Task) -> str | None:
    """The kind of target (``"llvm"``, ``"cuda"``) the backend's kernels of ``task`` run on, or None where it
    does not say (the mock, a model)."""
    kernels = backend.kernel_target
    if kernels is not None:
        target = kernels.target
        return target if isinstance(target, str) else target.get("kind")
    record_context = getattr(backend, "record_context", None)  # the replay backend: its records' target
    if record_context is None:
        return None
    from schedule_gym.backends.tvm.targets import kind_of_key

    try:
        return kind_of_key(record_context(task)[0])
    except (ValueError, LookupError):
        return None


def _reference_lines(result: Any, refs: list[Any], backend: str) -> list[str]:
    if not refs:
        return []
    spec, caveat = BACKENDS[backend], None
    if spec.serves_records:
        caveat = "the tuned latency is replayed from records"
    elif not spec.measures_hardware:
        caveat = f"the {backend}'s tuned latency is modelled, not measured"
    elif measures_remotely(backend):
        caveat = "the tuned kernel ran on the RPC device, the libraries here"
    lines = ["vs NumPy  the same GEMM, timed here after the search (GFLOP/s best / median; speed-up over the median)"]
    if caveat:
        lines.append(f"          note: {caveat}")
    width = max(len(r.label) for r in refs)
    for r in refs:
        stats = r.stats
        lines.append(f"  {r.label:<{width}}  {stats.best_gflops:8.1f} / {stats.median_gflops:8.1f}   tuned kernel "
                     f"{r.median_s / result.best_latency_s:.2f}x as fast")
    return lines
