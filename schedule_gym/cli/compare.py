"""``schedule-gym compare``: agents x seeds x budgets on a task, a results table and plots (resumable); the
harness is :mod:`schedule_gym.baselines.compare`."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from schedule_gym.backends import BACKENDS
from schedule_gym.cli.errors import EXIT_INTERRUPTED, CLIError
from schedule_gym.cli.params import parse_params
from schedule_gym.cli.traits import measures_remotely, spoken_list
from schedule_gym.extras import require
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import get_task

__all__ = ["add_parser", "run"]


def _measures_here(backend: str) -> bool:
    """Whether ``backend`` times real kernels on this machine."""
    return backend in BACKENDS and BACKENDS[backend].measures_hardware and not measures_remotely(backend)


def add_parser(sub: Any) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from schedule_gym.agents import SELF_CONTAINED, Budget
    from schedule_gym.envs import TilingEnv
    from schedule_gym.baselines.compare import CompareSpec, median_table, run_comparison, summarize, write_plots, write_tables

    agents = list(args.agents or [a for a in SELF_CONTAINED if a != "grid"])
    if not args.no_plots:  # before the runs, not after them
        require("compare's plots (or give --no-plots)", "baselines", modules=["matplotlib"])
    seeds = list(range(2 if args.quick else args.seeds))
    budgets = args.budgets or (["50"] if args.quick else ["0.1%"])
    external: dict[str, Any] = {}
    agent_seeds: dict[str, list[int]] = {}
    agent_params = parse_params(args.agent_param, "--agent-param")
    for name, params in agent_params.items():
        if not isinstance(params, dict):
            raise CLIError(f"bad --agent-param {name}={params!r}: name the agent, as AGENT.KEY=VALUE")
    if args.metaschedule is not None:
        if args.table or not _measures_here(args.backend):
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
        measuring = [n for n, spec in BACKENDS.items() if not spec.serves_records]
        if backend not in measuring:
            raise CLIError(f"compare measures with {spoken_list(measuring)} (or replays a shipped --table), got {backend!r}")
        optimum = None
        if args.ray and _measures_here(backend):
            raise CLIError(f"--ray with --backend {backend} would time kernels side by side on Ray workers: measure real "
                           "hardware through a TVM RPC device farm with --backend rpc (docs/cluster.md)")
        base_options: dict[str, Any] = {}
        if not BACKENDS[backend].measures_hardware:  # a model: its optimum is known exactly
            from schedule_gym.backends import MockBackend
            from schedule_gym.backends.mock.selection import select_profile

            # this machine's profile, also on Ray workers with another CPU: every run models one machine
            base_options["profile"] = select_profile()[0]
            optimum = float(MockBackend(**base_options).score_space(task).min())  # exact: the whole space scored
        name, records = f"{task.name}-{backend}", BACKENDS[backend].measures_hardware

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
        return EXIT_INTERRUPTED
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
