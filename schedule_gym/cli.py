"""The ``schedule-gym`` command line: ``space``, ``tasks``, ``table``, ``tune``, ``compare``, ``calibrate``,
``benchmark`` and ``tune-model``.

Bad input (an unknown name, a malformed value), an unusable record file, an unreachable or silent RPC
tracker, a task that cannot be tuned: one line on stderr, ``schedule-gym: error: ...``, naming the value,
exit code 2 (the contract: :mod:`schedule_gym.errors`).
``tune`` exits with 130 when stopped with Ctrl-C (the result so far is printed, the records stay intact).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from schedule_gym.backends import BACKENDS
from schedule_gym.errors import USER_ERRORS
from schedule_gym.spaces import OrderSpace, Schedule, ScheduleSpace, TileSpace
from schedule_gym.tasks import PRESETS, SUITES, Task, gemm, get_suite, get_task

#: Exit codes: bad input, and a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
#: Where ``tune`` keeps the measurements of a measuring backend when ``--records`` is not given.
DEFAULT_RECORDS = "runs/{task}__{agent}__{backend}__seed{seed}.jsonl"


class CLIError(Exception):
    """Bad command-line input; the message is printed as one line and the exit code is 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is a :class:`CLIError` (one line, no usage dump, no exit)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CLIError(f"{message} (see {self.prog} --help)")


def _space(args: argparse.Namespace) -> int:
    tasks = [get_task(name, args.d_m, args.d_k, args.d_n, args.dtype) for name in args.tasks]
    if args.shape:
        m, k, n = args.shape
        tasks.append(gemm(m, k, n, args.d_m, args.d_k, args.d_n, args.dtype))
    if not tasks:
        tasks = [get_task(name, args.d_m, args.d_k, args.d_n, args.dtype) for name in ("gemm-512", "gemm-1024", "gemm-2048")]
    for task in tasks:
        space = TileSpace(task)
        sizes = " x ".join(f"{d.name}:{d.size}" for d in space.dims)
        print(f"{task.describe():<70} {space.size:>16,} configs ({sizes}), {space.n_actions} actions")
        if args.orders:
            schedules = ScheduleSpace(task, space)
            print(f"{'':<4}loop orders {schedules.orders.size:,} (levels of a dimension nested; "
                  f"{schedules.orders.n_actions} swaps); MDF tiles x orders = {schedules.mdf_size:,}, "
                  f"ADF tiles + orders = {schedules.adf_size:,}")
    return 0


def _tasks(args: argparse.Namespace) -> int:
    suites = [args.suite] if args.suite else list(SUITES)
    if not args.suite:
        print("GEMM presets (or any gemm-MxKxN):")
        for name, (m, k, n) in PRESETS.items():
            print(f"  {name:<20} m={m:<6} k={k:<6} n={n:<6}")
    for suite in suites:
        layers = get_suite(suite)
        print(f"suite {suite}: {len(layers)} distinct layers, {sum(t.weight for t in layers)} in the network")
        for entry in layers:
            space = TileSpace(entry.task)
            shape = " ".join(f"{d.name}={d.extent}" for d in entry.task.dims)
            print(f"  {entry.name:<26} x{entry.weight:<3} {entry.task.op}{entry.task.params_text()} {shape}  "
                  f"{space.size:,} configs")
    return 0


def _with_splits(task: Task, splits: list[int]) -> Task:
    """``task`` with other split counts (its loop order rebuilt for them)."""
    from dataclasses import replace

    from schedule_gym.tasks import LoopDim

    dims = tuple(LoopDim(d.name, d.extent, s, d.reduction) for d, s in zip(task.dims, splits))
    return replace(task, dims=dims, loop_order=(), name=f"{task.name}-splits{''.join(map(str, splits))}")


def _table(args: argparse.Namespace) -> int:
    from schedule_gym.tables import compress, measure_space, summarize

    if (args.shape is None) == (args.task is None):
        raise CLIError("give either --shape M K N (a GEMM) or --task NAME")
    if args.task is not None:
        task = get_task(args.task)
        if args.splits is not None:
            if len(args.splits) != len(task.dims):
                raise CLIError(f"--splits needs {len(task.dims)} counts for {task.name} ({' '.join(task.dim_names)})")
            task = _with_splits(task, args.splits)
    else:
        m, k, n = args.shape
        task = gemm(m, k, n, *(args.splits or [4, 2, 4]), dtype=args.dtype)
    protocol = {"min_repeat_ms": args.min_repeat_ms, "repeat": args.repeat}
    options = {"num_threads": args.threads, "build_workers": args.build_workers, "protocol": protocol, "runner_cpus": args.runner_cpus}
    measure_space(task, args.out, options, args.batch)
    print(summarize(args.out, task))
    if args.gzip:
        compress(args.out, args.gzip)
        print(f"compressed to {args.gzip}")
    return 0


# ---------------------------------------------------------------------------------------------- tune
TUNE_EPILOG = f"""
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


def _add_tune_parser(sub: Any) -> None:
    from schedule_gym.agents import AGENTS

    p = sub.add_parser(
        "tune", help="tune a task with a search agent, live progress, then compare with NumPy",
        description="Tune a task's tile sizes with a search agent; print the best config and how it compares\n"
        "with s0 and with NumPy measured in the same run, on the same machine.",
        epilog=TUNE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
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
    p.set_defaults(func=_tune)


def parse_params(items: list[str], flag: str) -> dict[str, Any]:
    """``key=value`` items as a dict; values parsed as JSON where possible; dotted keys nest."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        path = key.strip().split(".")
        if not sep or not all(part.isidentifier() for part in path):
            raise CLIError(f"bad {flag} {item!r}: expected key=value with a parameter name as key")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise CLIError(f"bad {flag} {item!r}: {part!r} is already set to {node!r}")
        if path[-1] in node:
            raise CLIError(f"bad {flag} {item!r}: {key.strip()!r} is given twice")
        node[path[-1]] = value
    return out


def _fmt_config(config: Any) -> str:
    if isinstance(config, Schedule):
        return f"{_fmt_config(config.tiles)} in order {OrderSpace.describe(config.order)}"
    return str(tuple(tuple(int(f) for f in factors) for factors in config))


def _task_and_tiles(task: Task, config: Any) -> tuple[Task, Any]:
    """The task in the schedule's loop order and its tile config (a plain tile config: as given)."""
    if isinstance(config, Schedule):
        return task.with_order(config.order), config.tiles
    return task, config


def _gflops(flops: int, latency_s: float | None) -> str:
    return "-" if latency_s is None else f"{flops / latency_s * 1e-9:,.1f} GFLOP/s"


class TuneProgress:
    """The live display of a run, fed by the agent's progress callback.

    On a terminal: a rich progress bar (measurements / budget, best GFLOP/s, failures, elapsed, ETA).
    Elsewhere (a log file, a pipe), or without rich: a plain line at every tenth of the budget.
    """

    def __init__(self, title: str, flops: int, limit: int | None, seconds: float | None, quiet: bool) -> None:
        self.title, self.flops, self.limit, self.seconds, self.quiet = title, flops, limit, seconds, quiet
        self.failed = 0
        self._bar: Any = None
        self._id: Any = None
        self._next_line = 0.0

    def __enter__(self) -> TuneProgress:
        if self.quiet or not sys.stderr.isatty():
            return self
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
        except ImportError:  # the cli extra is not installed: plain lines
            return self
        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=16), TextColumn("{task.fields[count]}"),
            TextColumn("best [bold]{task.fields[best]}[/]"), TextColumn("{task.fields[failed]}"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=Console(stderr=True), transient=False,
        )
        total = self.limit if self.limit is not None else self.seconds
        self._id = self._bar.add_task(self.title, total=total, count=self._count(0, 0.0), best="-", failed="")
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _count(self, n: int, wall_s: float) -> str:
        if self.limit is not None:
            return f"{n}/{self.limit}"
        return f"{n}, {wall_s:.0f}/{self.seconds:.0f} s"

    def __call__(self, row: Any, limit: int | None) -> None:
        if row.latency_s is None:
            self.failed += 1
        if self.quiet:
            return
        best = _gflops(self.flops, row.best_latency_s)
        failed = f"{self.failed} failed" if self.failed else ""
        if self._bar is not None:
            done = row.n if self.limit is not None else min(row.wall_s, self.seconds or row.wall_s)
            self._bar.update(self._id, completed=done, count=self._count(row.n, row.wall_s), best=best, failed=failed)
            return
        share = row.n / self.limit if self.limit else row.wall_s / (self.seconds or 1.0)
        if share >= self._next_line or row.n == 1:
            self._next_line = (int(share * 10) + 1) / 10
            count = f"{row.n}/{self.limit}" if self.limit is not None else f"{row.n}"
            budget = "" if self.limit is not None else f" of {self.seconds:g}"
            print(f"[{self.title}] {count} configs after {row.wall_s:.1f}{budget} s, best {best}"
                  + (f", {failed}" if failed else ""), file=sys.stderr, flush=True)


def _tvm_backend(backend: Any) -> Any:
    """The TVM (or RPC) backend inside ``backend`` (through a replay wrapper), or None."""
    while backend is not None:
        if hasattr(backend, "template") and hasattr(backend, "target_kind"):
            return backend
        backend = getattr(backend, "delegate", None)
    return None


def _writable_store(backend: Any) -> Any:
    return next((s for s in getattr(backend, "stores", []) if not s.read_only), None)


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
        needs_tvm = [flag for flag, on in (("--print-tvmscript", args.print_tvmscript),
                                           ("--export-kernel", args.export_kernel)) if on]
        if needs_tvm and importlib.util.find_spec("tvm") is None:
            raise CLIError(f"{' and '.join(needs_tvm)} need TVM, which is not installed (pip install 'schedule-gym[tvm]')")
        if args.agent in SCHEDULE_AGENTS and not args.orders:
            raise ValueError(f"agent {args.agent!r} tunes schedules (tiles and loop order): add --orders")
        try:
            agent_class(args.agent)
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
        except ImportError as exc:
            raise CLIError(f"the {args.backend} backend cannot be loaded: {exc}") from None
    except (TypeError, ValueError, ConnectionError) as exc:
        raise CLIError(str(exc)) from None
    return task, budget, agent, env, records


def _tune(args: argparse.Namespace) -> int:
    try:
        task, budget, agent, env, records = _setup_tune(args)
    except KeyboardInterrupt:
        print("interrupted while setting up; nothing measured", file=sys.stderr)
        return EXIT_INTERRUPTED
    limit = budget.count_limit(env.space.size)
    limit = None if limit is None else min(limit, env.space.size)
    store = _writable_store(env.backend)
    stored_before = 0 if store is None else len(store)
    tvm_backend = _tvm_backend(env.backend)
    template = tvm_backend.template.name if tvm_backend is not None and tvm_backend.template is not None else "auto"
    target = tvm_backend.target if tvm_backend is not None else "llvm"
    threads = getattr(tvm_backend, "num_threads", None)
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

            try:
                refs = library_references(task, threads, numpy=not args.no_numpy, torch=args.torch)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:  # a comparison, not the result
                print(f"vs NumPy  not measured: {exc}", file=sys.stderr)
                refs = []
            for line in _reference_lines(result, refs, args.backend):
                print(line, flush=True)
            extra["references"] = [r.to_dict() for r in refs]
            if args.print_tvmscript:
                from schedule_gym.templates import schedule_script

                name = template if template != "auto" else "gemm-cpu"
                print(f"\n# best schedule {_fmt_config(result.best_config)} as TVMScript (template {name})")
                print(schedule_script(*_task_and_tiles(task, result.best_config), name), flush=True)
            if args.export_kernel:
                code = _export(*_task_and_tiles(task, result.best_config), args.export_kernel, template, target,
                               tvm_backend)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    if args.result:
        Path(args.result).parent.mkdir(parents=True, exist_ok=True)
        Path(args.result).write_text(json.dumps({**result.to_dict(), **extra}, indent=1) + "\n")
        print(f"result written to {args.result}")
    return code


def _export(task: Task, config: Any, path: str, template: str, target: Any, tvm_backend: Any) -> int:
    from schedule_gym.backends.tvm.export import export_kernel

    check = tvm_backend is None or tvm_backend.name == "tvm"  # an RPC target may be another machine
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        kernel = export_kernel(task, config, path, template=template, target=target, check=check)
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
                     f"{_gflops(result.flops, result.s0_latency_s)}")
    best = result.best_config
    if best is not None:
        at = next(r.n for r in result.history if r.config == best)
        lines.append(f"best      {_fmt_config(best)}: {result.best_latency_s * 1e3:.4g} ms = "
                     f"{_gflops(result.flops, result.best_latency_s)} (measurement {at} of {n})")
        if result.speedup_over_s0 is not None:
            lines.append(f"speed-up  {result.speedup_over_s0:,.1f}x over s0")
    return lines


def _reference_lines(result: Any, refs: list[Any], backend: str) -> list[str]:
    if not refs:
        return []
    caveat = {
        "mock": "the mock's tuned latency is modelled, not measured",
        "rpc": "the tuned kernel ran on the RPC device, the libraries here",
        "replay": "the tuned latency is replayed from records",
    }.get(backend)
    lines = ["vs NumPy  the same GEMM, timed here after the search (GFLOP/s best / median; speed-up over the median)"]
    if caveat:
        lines.append(f"          note: {caveat}")
    width = max(len(r.label) for r in refs)
    for r in refs:
        stats = r.stats
        lines.append(f"  {r.label:<{width}}  {stats.best_gflops:8.1f} / {stats.median_gflops:8.1f}   tuned kernel "
                     f"{r.median_s / result.best_latency_s:.2f}x as fast")
    return lines


def _compare(args: argparse.Namespace) -> int:
    from schedule_gym.agents import SELF_CONTAINED, Budget
    from schedule_gym.envs import TilingEnv
    from schedule_gym.baselines.compare import CompareSpec, median_table, run_comparison, summarize, write_plots, write_tables

    agents = list(args.agents or [a for a in SELF_CONTAINED if a != "grid"])
    seeds = list(range(2 if args.quick else args.seeds))
    budgets = args.budgets or (["50"] if args.quick else ["0.1%"])
    external: dict[str, Any] = {}
    agent_seeds: dict[str, list[int]] = {}
    agent_params = parse_params(args.agent_param, "--agent-param")
    for name, params in agent_params.items():
        if not isinstance(params, dict):
            raise CLIError(f"bad --agent-param {name}={params!r}: name the agent, as AGENT.KEY=VALUE")
    if args.metaschedule is not None:
        if args.table or args.backend != "tvm":
            raise CLIError("--metaschedule tunes on this machine with TVM: it needs --backend tvm (not a table, mock or rpc)")
        if args.metaschedule < 1:
            raise CLIError(f"--metaschedule takes a positive number of seeds, got {args.metaschedule}")
        if any(Budget.parse(b).seconds is not None for b in budgets):
            raise CLIError(f"--metaschedule takes trial budgets (a count or a share of the space), not times: {budgets}")
        agents.append("metaschedule")
        agent_seeds["metaschedule"] = seeds[: args.metaschedule]
    if args.table:
        from schedule_gym.data import get_table
        from schedule_gym.envs import table_env

        entry = get_table(args.table)  # an unknown name: ValueError naming it
        env = table_env(args.table)
        optimum = min(r.result.latency_s for r in env.backend.stores[0] if r.result.ok)
        env.close()
        name, make_env, records = f"table-{args.table}", (lambda _records: table_env(args.table)), False
        task = entry.task
    else:
        task = get_task(args.task)
        backend = args.backend
        if backend not in ("mock", "tvm", "rpc"):
            raise CLIError(f"compare measures with mock, tvm or rpc (or replays a shipped --table), got {backend!r}")
        optimum = None
        if args.ray and backend == "tvm":
            raise CLIError("--ray with --backend tvm would time kernels side by side on Ray workers: measure real "
                           "hardware through a TVM RPC device farm with --backend rpc (docs/cluster.md)")
        base_options: dict[str, Any] = {}
        if backend == "mock":
            from schedule_gym.backends import MockBackend
            from schedule_gym.backends.mock.selection import select_profile

            # this machine's profile, also on Ray workers with another CPU: every run models one machine
            base_options["profile"] = select_profile()[0]
            optimum = float(MockBackend(**base_options).score_space(task).min())  # exact: the whole space scored
        name, records = f"{task.name}-{backend}", backend != "mock"

        def make_env(record_file: str | None) -> Any:
            options = {**base_options, "records": record_file} if record_file else base_options
            return TilingEnv(task=task, backend=backend, backend_options=options)

        if "metaschedule" in agents:
            from schedule_gym.baselines.metaschedule import run_metaschedule

            size = TileSpace(task).size

            def metaschedule(seed: int, budget: str, work_dir: Path) -> dict:
                trials = min(Budget.parse(budget).count_limit(size), size)
                return run_metaschedule(task, trials, work_dir, seed=seed, log=None if args.quiet else print)

            external["metaschedule"] = metaschedule

    out_dir = Path(args.out or f"runs/compare/{name}")
    spec = CompareSpec(name=name, make_env=make_env, agents=agents, seeds=seeds, budgets=budgets, out_dir=out_dir,
                       optimum_s=optimum, records=records, external=external, agent_seeds=agent_seeds,
                       agent_params=agent_params)
    print(f"{task.describe()}: agents {', '.join(agents)}; seeds 0-{seeds[-1]}; budgets {', '.join(budgets)}; "
          f"results in {out_dir}", flush=True)
    try:
        rows = run_comparison(spec, progress=None if args.quiet else lambda line: print(line, flush=True),
                              ray_address=args.ray)
    except KeyboardInterrupt:
        print("interrupted: finished runs are saved; run the same command again to go on", file=sys.stderr)
        return 130
    table, reference, kind = summarize(spec, rows)
    extra: dict[str, Any] = {"task": task.name, "flops": task.flops, "references": []}
    if args.references:
        from schedule_gym.reference import library_references

        print("timing the library GEMMs (NumPy with this environment's OpenBLAS kernels and with AVX-512 ones, torch)",
              flush=True)
        try:
            extra["references"] = [r.to_dict() for r in library_references(task, torch=True)]
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:  # a comparison, not the result
            print(f"library references not measured: {exc}", file=sys.stderr)
    write_tables(spec, table, reference, kind, extra)
    plots = [] if args.no_plots else write_plots(spec, rows)
    print(f"\nreference: {kind}, {reference * 1e3:.4g} ms" if reference else "\nreference: none")
    print(median_table(table, task.flops))
    for ref in extra["references"]:
        print(f"  {ref['label']}: {ref['best_gflops']:.1f} GFLOP/s best, {ref['median_gflops']:.1f} median")
    print(f"\nwrote {out_dir / 'results.csv'}, {out_dir / 'results.json'}" + "".join(f", {p.name}" for p in plots))
    return 0


def _add_compare_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="agents x seeds x budgets on a task: results table and plots (resumable)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--task", default="gemm-1024", help="a preset or gemm-MxKxN (default gemm-1024)")
    where.add_argument("--table", help="a shipped exhaustive real table, replayed (exact optimum known)")
    p.add_argument("--backend", default="mock", help="mock (default), tvm or rpc; ignored with --table")
    p.add_argument("--agents", nargs="+", help="registered agent names (default: all but grid and policy)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    p.add_argument("--budgets", nargs="+", help="budgets per run, e.g. 0.1%% 1%% 900 15m (default 0.1%%)")
    p.add_argument("--out", help="output folder (default runs/compare/<task>-<backend>)")
    p.add_argument("--quick", action="store_true", help="smoke test: 2 seeds, budget 50 unless --budgets")
    p.add_argument("--agent-param", action="append", default=[], metavar="AGENT.KEY=VALUE",
                   help="an agent's hyper-parameter, e.g. policy.model=runs/sb3/x/model.zip (repeatable)")
    p.add_argument("--metaschedule", type=int, nargs="?", const=1, metavar="SEEDS",
                   help="with --backend tvm: also TVM MetaSchedule (tune_tir) with as many trials as each budget, "
                        "on the first SEEDS seeds (default 1: it costs about 4 s a trial here)")
    p.add_argument("--references", action="store_true",
                   help="after the runs, time NumPy (this environment's and AVX-512 OpenBLAS kernels) and torch")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run each agent x seed x budget as a Ray task: local (a Ray instance here), auto (this "
                        "machine's cluster) or ray://host:port; needs schedule-gym[ray] (docs/cluster.md)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_compare)


# ----------------------------------------------------------------------------------------- calibrate
#: Tasks ``calibrate`` measures by default: a small GEMM, a ResNet-50 conv2d and BERT's P @ V batch matmul
#: (three operators' loop nests, each kernel a few milliseconds at most, so sampling them is cheap).
CALIBRATE_TASKS = ("gemm-256", "resnet50/conv6", "bert-base/attn-pv")
CALIBRATE_CONFIGS = 200

CALIBRATE_EPILOG = """
The fitted profile is stored in the user cache as profiles/<cpu>.json (the cache is $SCHEDULE_GYM_CACHE,
else $XDG_CACHE_HOME/schedule-gym, else ~/.cache/schedule-gym); from then on the mock backend's default
profile="auto" uses it on this CPU instead of the shipped or nominal profile. Delete the file to go back.
The measurements go to a record file in the cache's calibration/ folder (--records to choose one; the
same --records, tasks and seed resume an interrupted run without measuring anything twice).

examples:
  schedule-gym calibrate
  schedule-gym calibrate --tasks gemm-512 bert-base/attn-qk --configs 300 --seed 1
"""


def _add_calibrate_parser(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="fit the mock's CPU profile to kernels measured on this machine (a few minutes)",
        description="Measure random configs of a few tasks with the TVM backend on this machine, fit the mock's\n"
        "CPU profile to them, report the held-out Spearman rank correlation, and store the profile in the\n"
        "user cache, where the mock's profile='auto' finds it.",
        epilog=CALIBRATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tasks", nargs="+", default=list(CALIBRATE_TASKS),
                   help=f"tasks to measure (schedule-gym tasks; default {' '.join(CALIBRATE_TASKS)})")
    p.add_argument("--configs", type=int, default=CALIBRATE_CONFIGS,
                   help=f"random configs measured per task (default {CALIBRATE_CONFIGS})")
    p.add_argument("--seed", type=int, default=0, help="seed of the configs drawn (default 0)")
    p.add_argument("--held-out", type=float, default=0.5,
                   help="share of each task's configs kept out of the fit and used to score it (default 0.5)")
    p.add_argument("--threads", type=int, default=None, help="TVM runtime threads (default: all cores)")
    p.add_argument("--records", help="record file to measure into or resume (default: a new file in the cache)")
    p.add_argument("--out", help="write the fitted profile here instead of the user cache "
                                 "(then profile='auto' does not pick it up)")
    p.add_argument("--batch", type=int, default=25, help="configs measured per batch (default 25)")
    p.set_defaults(func=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    import os
    import time

    from schedule_gym import cache, hardware
    from schedule_gym.backends.mock.profile import write_profile
    from schedule_gym.backends.mock.selection import select_profile
    from schedule_gym.calibration import MIN_CONFIGS, calibrate

    # every input is checked before anything is measured
    tasks = [get_task(name) for name in args.tasks]  # an unknown name: ValueError naming it
    if len({t.name for t in tasks}) < len(tasks):
        raise CLIError(f"--tasks names a task twice: {' '.join(args.tasks)}")
    if args.configs < MIN_CONFIGS:
        raise CLIError(f"--configs must be at least {MIN_CONFIGS} (two to fit on, two to hold out), got {args.configs}")
    if not 0.0 < args.held_out < 1.0:
        raise CLIError(f"--held-out must be a share strictly between 0 and 1, got {args.held_out}")
    if args.threads is not None and args.threads < 1:
        raise CLIError(f"--threads must be a positive integer, got {args.threads}")
    if args.batch < 1:
        raise CLIError(f"--batch must be a positive integer, got {args.batch}")
    cpu = hardware.cpu_name()
    start, origin = select_profile(cpu)  # a malformed cached profile: ValueError naming the file and field
    out = Path(args.out) if args.out else cache.profile_path(cpu)
    if out.is_dir():
        raise CLIError(f"--out {out} is a directory; give a file name such as {out / (cpu + '.json')}")
    records = Path(args.records or cache.calibration_dir() / f"{cpu}-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    if records.is_dir():
        raise CLIError(f"--records {records} is a directory, not a record file")
    if importlib.util.find_spec("tvm") is None:
        raise CLIError("calibrate measures kernels with TVM, which is not installed (pip install 'schedule-gym[tvm]')")
    threads = args.threads or os.cpu_count() or 1
    print(f"CPU {cpu} (AVX-512: {'yes' if hardware.cpu_has_avx512(cpu) else 'no'}), {threads} threads; "
          f"starting profile {start.name} ({origin}); {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"measuring {len(tasks)} tasks x {args.configs} random configs (seed {args.seed}) with the TVM backend "
          f"into {records}", flush=True)
    records.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # no kernel is censored: the slowest configs' ranks are part of what the profile must model
    try:
        result = calibrate(tasks, args.configs, records, start, name=f"{cpu}-{threads}core-calibrated",
                           seed=args.seed, held_out=args.held_out, cores=threads,
                           backend_options={"num_threads": threads, "protocol": {"censor_ratio": None}},
                           batch=args.batch)
    except KeyboardInterrupt:
        print(f"interrupted: nothing fitted; the measurements so far are in {records} (give --records {records} "
              "with the same tasks and seed to resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"\nmeasured and fitted in {time.perf_counter() - t0:.0f} s; fit: {result.fit}")
    print(result.table())
    written = write_profile(result.profile, out)
    print(f"\nheld-out Spearman {result.spearman_fitted:.3f} (mean over {len(tasks)} tasks; starting profile "
          f"{start.name}: {result.spearman_start:.3f})")
    if result.spearman_fitted < result.spearman_start:
        print(f"note: the fitted profile ranks the held-out configs worse than {start.name} does "
              f"(more --configs may help; delete {written} to stop using it)")
    cached = cache.profile_path(cpu)
    where = ("the mock's profile='auto' uses it on this CPU from now on" if written.resolve() == cached.resolve()
             else f"profile='auto' does not read it (its file for this CPU is {cached})")
    print(f"wrote profile {result.profile.name} to {written}: {where}")
    return 0


# ----------------------------------------------------------------------------------------- benchmark
def _add_benchmark_parser(sub: Any) -> None:
    from schedule_gym.benchmark import RAY_TIMEOUT_S

    p = sub.add_parser("benchmark", help="run an agent or a trained policy through a generalisation protocol "
                                         "(held-out tasks) and append a result row to a leaderboard")
    p.add_argument("--protocol", default="v0", help="protocol name (default v0; smoke: seconds-long)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--agent", help="a registered search agent (random, gbfs, xgb, felix, na2c...)")
    who.add_argument("--policy", help="a MaskablePPO or PPO model saved by examples/train_multitask.py (.zip)")
    p.add_argument("--agent-param", action="append", default=[], metavar="KEY=VALUE", help="agent hyper-parameter")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the protocol's)")
    p.add_argument("--tasks", nargs="+", help="only these held-out tasks (the row is marked partial)")
    p.add_argument("--name", help="the row's agent name (default: the agent, or policy:<file name>)")
    p.add_argument("--out", help="also write the row here (JSON)")
    p.add_argument("--leaderboard", help="append the row to this JSON-lines file")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run each held-out task x seed as a Ray task: local (a Ray instance here), auto (this "
                        "machine's cluster), HOST:PORT or ray://HOST:PORT; needs schedule-gym[ray] (docs/cluster.md)")
    p.add_argument("--cpus-per-run", type=float, metavar="N", help="with --ray: CPUs each run asks Ray for (default 1)")
    p.add_argument("--ray-timeout", type=float, metavar="SECONDS",
                   help="with --ray: give up (cancelling every run) when no run has finished for this long "
                        f"(default {RAY_TIMEOUT_S:g})")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_benchmark)


def _benchmark(args: argparse.Namespace) -> int:
    import shlex
    import zipfile

    from schedule_gym.benchmark import RAY_TIMEOUT_S, agent_tuner, get_protocol, policy_tuner, run_protocol

    try:
        protocol = get_protocol(args.protocol)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if args.seeds is not None and any(s < 0 for s in args.seeds):
        raise CLIError(f"--seeds must be non-negative integers, got {args.seeds}")
    for flag, value in (("--cpus-per-run", args.cpus_per_run), ("--ray-timeout", args.ray_timeout)):
        if value is not None and args.ray is None:
            raise CLIError(f"{flag} goes with --ray ADDRESS")
        if value is not None and not 0 < value < float("inf"):
            raise CLIError(f"{flag} must be a positive number, got {value:g}")
    if args.ray is not None and importlib.util.find_spec("ray") is None:
        raise CLIError("--ray needs Ray: pip install 'schedule-gym[ray]' (docs/cluster.md)")
    params = parse_params(args.agent_param, "--agent-param")
    if args.policy is not None:
        path = Path(args.policy)
        if not path.is_file() or not zipfile.is_zipfile(path):
            raise CLIError(f"--policy {path} is not a saved Stable-Baselines3 model (a .zip file)")
        if importlib.util.find_spec("sb3_contrib") is None:
            raise CLIError("--policy needs sb3-contrib (pip install 'schedule-gym[rl]')")
        try:
            tuner = policy_tuner(path, protocol)  # loads the file, unpickling nothing; holds its bytes for Ray
        except ValueError as exc:
            raise CLIError(f"--policy {path}: {exc}") from None
        agent = args.name or f"policy:{path.stem}"
        params = {"policy": str(path), **params}
    else:
        from schedule_gym.agents import SELF_CONTAINED

        if args.agent not in SELF_CONTAINED:
            raise CLIError(f"unknown agent {args.agent!r} for the benchmark; tile agents: {', '.join(SELF_CONTAINED)} "
                           "(or --policy MODEL.zip)")
        try:
            tuner = agent_tuner(args.agent, params)
        except (TypeError, ValueError, ImportError) as exc:
            raise CLIError(f"agent {args.agent!r} cannot be made: {exc}") from None
        agent = args.name or args.agent
    argv = ["schedule-gym", "benchmark"] + (sys.argv[2:] if len(sys.argv) > 1 and sys.argv[1] == "benchmark"
                                            else _benchmark_argv(args))
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        row = run_protocol(tuner, protocol, agent, params=params, seeds=args.seeds, tasks=args.tasks,
                           command=shlex.join(argv), progress=progress, ray=args.ray,
                           cpus_per_run=1 if args.cpus_per_run is None else args.cpus_per_run,
                           ray_timeout_s=RAY_TIMEOUT_S if args.ray_timeout is None else args.ray_timeout)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    text = json.dumps(row, sort_keys=True)
    if args.out:
        Path(args.out).write_text(json.dumps(row, indent=1, sort_keys=True) + "\n")
    if args.leaderboard:
        path = Path(args.leaderboard)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
    print(f"{agent} on protocol {protocol.name}: median regret {row['median_regret']:.4f}, mean {row['mean_regret']:.4f} "
          f"over {len(row['tasks'])} held-out tasks, seeds {row['seeds']}, {row['wall_s']:.0f} s")
    return 0


def _benchmark_argv(args: argparse.Namespace) -> list[str]:
    """The command line of a ``benchmark`` call made through :func:`main` (for the row's ``command``)."""
    out = ["--protocol", args.protocol]
    out += ["--policy", args.policy] if args.policy else ["--agent", args.agent]
    for item in args.agent_param:
        out += ["--agent-param", item]
    for flag, value in (("--seeds", args.seeds), ("--tasks", args.tasks)):
        if value:
            out += [flag, *map(str, value)]
    for flag, value in (("--name", args.name), ("--out", args.out), ("--leaderboard", args.leaderboard),
                        ("--ray", args.ray)):
        if value:
            out += [flag, value]
    for flag, number in (("--cpus-per-run", args.cpus_per_run), ("--ray-timeout", args.ray_timeout)):
        if number is not None:
            out += [flag, f"{number:g}"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="schedule-gym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("space", help="print the exact size of tile spaces (default: the paper's three)")
    p.add_argument("tasks", nargs="*", help="task names (schedule-gym tasks lists them)")
    p.add_argument("--shape", nargs=3, type=int, metavar=("M", "K", "N"), help="a GEMM shape")
    p.add_argument("--d-m", type=int, default=4)
    p.add_argument("--d-k", type=int, default=2)
    p.add_argument("--d-n", type=int, default=4)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--orders", action="store_true",
                   help="also the loop orders and the schedule space sizes: MDF (tiles x orders) and ADF (tiles + orders)")
    p.set_defaults(func=_space)
    p = sub.add_parser("tasks", help="list the named tasks: GEMM presets and the suites' layers with their weights")
    p.add_argument("--suite", choices=SUITES, help="list this suite only")
    p.set_defaults(func=_tasks)
    p = sub.add_parser("table", help="measure every config of a task with the TVM backend (resumable)")
    p.add_argument("--shape", nargs=3, type=int, metavar=("M", "K", "N"), help="a GEMM shape")
    p.add_argument("--task", help="or a named task (schedule-gym tasks)")
    p.add_argument("--splits", nargs="+", type=int, help="split count per dimension (GEMM default 4 2 4)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", required=True, help="record file (JSON lines); resumes if it exists")
    p.add_argument("--gzip", help="also write a compressed copy here")
    p.add_argument("--threads", type=int, default=None, help="TVM runtime threads (default: all cores)")
    p.add_argument("--build-workers", type=int, default=None)
    p.add_argument("--runner-cpus", type=int, nargs="+", default=None, help="pin the kernel runner to these CPUs")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--min-repeat-ms", type=float, default=10.0)
    p.add_argument("--batch", type=int, default=64)
    p.set_defaults(func=_table)
    _add_tune_parser(sub)
    _add_compare_parser(sub)
    _add_calibrate_parser(sub)
    _add_benchmark_parser(sub)
    from schedule_gym.models.command import add_parser as add_tune_model_parser

    add_tune_model_parser(sub)
    args = None
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except (CLIError, *USER_ERRORS) as exc:
        print(f"schedule-gym: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (TypeError, ValueError) as exc:
        if getattr(args, "command", None) == "tune":
            raise  # tune turns bad input into CLIError while setting up; anything later is a bug
        print(f"schedule-gym: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
