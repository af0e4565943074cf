"""``schedule-gym benchmark``: an agent or a trained policy through a generalisation protocol (held-out tasks),
a result row appended to a leaderboard; the benchmark is :mod:`schedule_gym.benchmark`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from schedule_gym.cli.errors import CLIError
from schedule_gym.cli.params import output_path, parse_params, write_output
from schedule_gym.extras import require

#: what --agent-param sets for a .safetensors checkpoint: the temperature its moves are drawn at, and its
#: policy-guided beam search (beam_width 0: play it)
SEARCH_PARAMS = ("temperature", "beam_width", "proposals", "random_starts", "policy_share")

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    from schedule_gym.benchmark import RAY_TIMEOUT_S
    from schedule_gym.benchmark.protocol import SPLITS

    p = sub.add_parser("benchmark", help="run an agent or a trained policy through a generalisation protocol "
                                         "(held-out tasks) and append a result row to a leaderboard")
    p.add_argument("--protocol", default="v1", help="protocol name (default v1: budget tracks, five seeds, intervals; "
                                                    "tenset-v1: TenSet's held-out networks; v0: the first protocol; "
                                                    "smoke: seconds-long)")
    p.add_argument("--budget-track", type=int, metavar="N",
                   help="measurements per task and seed: one of the protocol's budget tracks (v1: 16, 64, 256; "
                        "default: the protocol's budget)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--agent", help="a registered search agent (random, gbfs, xgb, felix, na2c...)")
    who.add_argument("--policy", help="a MaskablePPO or PPO model saved by examples/train_multitask.py (.zip), or a "
                                          "checkpoint of python -m schedule_gym.benchmark.ppo_tuner (.safetensors)")
    p.add_argument("--agent-param", action="append", default=[], metavar="KEY=VALUE",
                   help="agent hyper-parameter; with a .safetensors --policy, temperature=T draws the policy's moves "
                        "at T (1: as trained), and beam_width=W (and proposals=K, random_starts=R, policy_share=F: the "
                        "policy alone plays that share of the budget first) runs the policy-guided beam search "
                        "instead of playing the policy")
    p.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the protocol's)")
    p.add_argument("--tasks", nargs="+", help="only these held-out tasks (the row is marked partial)")
    p.add_argument("--split", choices=SPLITS, default="held_out",
                   help="the tasks to run: the held-out split (the benchmark, default), the training split, or the "
                        "protocol's validation split (to choose checkpoints or settings on); only held_out rows "
                        "go on a leaderboard")
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shlex
    import zipfile

    from schedule_gym.benchmark import RAY_TIMEOUT_S, agent_tuner, get_protocol, policy_tuner, run_protocol

    try:
        protocol = get_protocol(args.protocol).at_budget(args.budget_track)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    if args.seeds is not None and any(s < 0 for s in args.seeds):
        raise CLIError(f"--seeds must be non-negative integers, got {args.seeds}")
    for flag, value in (("--cpus-per-run", args.cpus_per_run), ("--ray-timeout", args.ray_timeout)):
        if value is not None and args.ray is None:
            raise CLIError(f"{flag} goes with --ray ADDRESS")
        if value is not None and not 0 < value < float("inf"):
            raise CLIError(f"{flag} must be a positive number, got {value:g}")
    if args.ray is not None:
        require("--ray (docs/cluster.md)", "ray")
    params = parse_params(args.agent_param, "--agent-param")
    output_path(args.out, "--out")
    output_path(args.leaderboard, "--leaderboard")
    if args.leaderboard and args.split != "held_out":
        raise CLIError(f"--leaderboard takes held-out rows only; a --split {args.split} row is no leaderboard entry "
                       "(write it with --out)")
    if args.policy is not None:
        path = Path(args.policy)
        ppo_checkpoint = path.suffix == ".safetensors"
        if not path.is_file() or not (ppo_checkpoint or zipfile.is_zipfile(path)):
            raise CLIError(f"--policy {path} is not a saved Stable-Baselines3 model (a .zip file) nor a checkpoint of "
                           "python -m schedule_gym.benchmark.ppo_tuner (a .safetensors file)")
        require("--policy", "agents" if ppo_checkpoint else "rl")
        try:
            if ppo_checkpoint:  # the vector-environment PPO's weights and their .json sidecar
                from schedule_gym.benchmark.ppo_tuner import ppo_tuner

                unknown = sorted(set(params) - set(SEARCH_PARAMS))
                if unknown:
                    raise CLIError(f"--agent-param {unknown[0]} is not a parameter of a checkpoint's tuner; it takes "
                                   f"{', '.join(SEARCH_PARAMS)} (the temperature of its moves, the policy-guided "
                                   "search)")
                tuner = ppo_tuner(path, protocol, **params)
            else:
                tuner = policy_tuner(path, protocol)  # loads the file, unpickling nothing; holds its bytes for Ray
        except ValueError as exc:  # what is wrong with the file, naming it
            raise CLIError(str(exc)) from None
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
                           split=args.split, command=shlex.join(argv), progress=progress, ray=args.ray,
                           cpus_per_run=1 if args.cpus_per_run is None else args.cpus_per_run,
                           ray_timeout_s=RAY_TIMEOUT_S if args.ray_timeout is None else args.ray_timeout)
    except ValueError as exc:
        raise CLIError(str(exc)) from None
    text = json.dumps(row, sort_keys=True)
    if args.out:
        write_output(Path(args.out), json.dumps(row, indent=1, sort_keys=True) + "\n", "--out")
    if args.leaderboard:
        path = Path(args.leaderboard)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as f:
                f.write(text + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise CLIError(f"--leaderboard {path} could not be written ({exc.strerror or exc}); the row is {text}") from None
    iqm = ""
    if "iqm_regret" in row:
        interval = row["iqm_regret_interval"]
        iqm = f", IQM {row['iqm_regret']:.4f}" + (f" [{interval[0]:.4f}, {interval[1]:.4f}]" if interval else "")
    print(f"{agent} on protocol {protocol.name}, budget {protocol.budget}: median regret {row['median_regret']:.4f}{iqm}, "
          f"mean {row['mean_regret']:.4f} over {len(row['tasks'])} {args.split.replace('_', '-')} tasks, seeds {row['seeds']}, "
          f"{row['wall_s']:.0f} s")
    return 0


def _benchmark_argv(args: argparse.Namespace) -> list[str]:
    """The command line of a ``benchmark`` call made through :func:`main` (for the row's ``command``)."""
    out = ["--protocol", args.protocol] + (["--budget-track", str(args.budget_track)] if args.budget_track else [])
    out += ["--policy", args.policy] if args.policy else ["--agent", args.agent]
    for item in args.agent_param:
        out += ["--agent-param", item]
    for flag, value in (("--seeds", args.seeds), ("--tasks", args.tasks)):
        if value:
            out += [flag, *map(str, value)]
    if args.split != "held_out":
        out += ["--split", args.split]
    for flag, value in (("--name", args.name), ("--out", args.out), ("--leaderboard", args.leaderboard),
                        ("--ray", args.ray)):
        if value:
            out += [flag, value]
    for flag, number in (("--cpus-per-run", args.cpus_per_run), ("--ray-timeout", args.ray_timeout)):
        if number is not None:
            out += [flag, f"{number:g}"]
    return out
