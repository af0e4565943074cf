"""Learned agents against search on real held-out layers: best GFLOP/s after 64 real TVM measurements.

The mock is the training ground; real kernels are the test. For held-out layers of protocol v0 (never in its
training split: a 3x3 and a 1x1 strided convolution of ResNet-18, two depthwise and a pointwise convolution of
MobileNet-V2, ResNet-18's classifier) and BERT-tiny's attention scores (a batch matmul no v0 training task
has), each agent tunes with the TVM backend on this CPU for ``--budget`` measurements and ``--seeds`` seeds,
every result checked against NumPy; PyTorch's own kernel of the same layer is timed in the same run.
``--policies`` adds policy checkpoints of protocol v1 (``ppo_vec`` or DAgger ``.safetensors``), each played as
the benchmark plays it (:func:`schedule_gym.benchmark.ppo_tuner.ppo_tuner`: its training game, one session from
``s0``) with the real kernels' latencies, its features describing the mock's profile of this CPU; a layer whose
computation the checkpoint trained on is refused; ``--beam-width W`` also plays each as the policy-guided beam
search (the policy proposes, the measurements decide: ``ppo_tuner``'s ``beam_width``, with ``--random-starts``),
an agent ``<name>+beam``; with ``--policy-share F`` also as the policy alone for that share of the budget, then
the beam search from the fastest configs it measured (``ppo_tuner``'s ``policy_share``), an agent
``<name>+lead``. ``--cost-models`` adds transfer agents with other pretrained cost models
(``examples/pretrain_cost_model.py --profile``, such as one labelled by the profile fitted to this CPU), each an
agent ``transfer-<file name up to its first dot>``; a layer one trained on is refused. Records go to
``runs/real-heldout-<date>-<cpu>/`` (running it again the same day resumes: nothing is measured twice; another
day's CPU starts afresh), the table and the JSON to ``examples/results/real-heldout/<date>-<cpu>.md|json``.

    python examples/benchmarks/real_heldout.py [--agents transfer random xgb] [--policies leaderboard/v1-X.safetensors]
        [--beam-width 4 [--policy-share 0.5]] [--cost-models X.json.gz] [--budget 64] [--seeds 0 1 2] [--runs DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
from pathlib import Path

from schedule_gym.agents import Budget, make_agent
from schedule_gym.agents.transfer import load_cost_model
from schedule_gym.backends import make_backend
from schedule_gym.benchmark import get_protocol
from schedule_gym.benchmark.pretrained import artefact_training_keys, checkpoint_training_tasks
from schedule_gym.benchmark.ppo_tuner import ppo_tuner
from schedule_gym.benchmark.protocol import computation_key
from schedule_gym.envs import TilingEnv
from schedule_gym.hardware import cpu_identity, usable_cores
from schedule_gym.reference import library_task_times
from schedule_gym.tasks import get_task

ROOT = Path(__file__).resolve().parent.parent.parent
#: v0's held-out layers of each kind, and one batch matmul held out from v0's training split
LAYERS = ("resnet18/conv2", "resnet18/conv4", "mobilenetv2/conv4", "mobilenetv2/conv12", "mobilenetv2/conv13",
          "resnet18/fc", "zoo-bert-tiny/bmmNT-2x128x64x128")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", nargs="+", default=["transfer", "random", "xgb"])
    parser.add_argument("--layers", nargs="+", default=list(LAYERS))
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--policies", nargs="*", type=Path, default=[],
                        help="v1 policy checkpoints, each an agent named by its file (v1-X.safetensors: X)")
    parser.add_argument("--beam-width", type=int, default=0,
                        help="also play each policy as the policy-guided beam search of this width "
                             "(an agent <name>+beam)")
    parser.add_argument("--random-starts", type=int, default=8, help="the beam search's random starts")
    parser.add_argument("--policy-share", type=float, default=0.0,
                        help="with --beam-width, also play each policy alone for this share of the budget, then the "
                             "beam search from what it found (an agent <name>+lead)")
    parser.add_argument("--cost-models", nargs="*", type=Path, default=[],
                        help="transfer cost models (XGBoost JSON with its .meta.json), each an agent "
                             "transfer-<file name up to its first dot>")
    parser.add_argument("--runs", type=Path, help="records (default: runs/real-heldout-<date>-<cpu>)")
    parser.add_argument("--out", type=Path, default=ROOT / "examples" / "results" / "real-heldout")
    args = parser.parse_args()
    if args.policy_share and not args.beam_width:
        parser.error("--policy-share hands the rest of the budget to the beam search: give --beam-width too")
    # each file is an agent named by its file (v1-X.safetensors: X; X.json.gz: transfer-X): two must not share one
    policy_names = {p: p.stem.removeprefix("v1-") for p in args.policies}
    model_names = {p: "transfer-" + p.name.split(".")[0] for p in args.cost_models}
    for flag, names in (("--policies", list(policy_names.values())), ("--cost-models", list(model_names.values()))):
        if len(set(names)) < len(names):
            parser.error(f"{flag}: two files give one agent name ({', '.join(names)}); rename one")
    held_out = {t.key for t in get_protocol("v0").held_out_tasks()}
    train = {t.key for t in get_protocol("v0").train_tasks()}
    identity = cpu_identity()
    cpu = identity.describe()
    threads = usable_cores()
    date = datetime.date.today().isoformat()
    runs = args.runs or ROOT / "runs" / f"real-heldout-{date}-{identity.name}"
    policies = {name: ppo_tuner(p, "v1") for p, name in policy_names.items()}  # loaded once, checked
    trained = {name: {computation_key(t) for t in checkpoint_training_tasks(p)} for p, name in policy_names.items()}
    if args.beam_width:
        for p, name in policy_names.items():
            policies[name + "+beam"] = ppo_tuner(p, "v1", beam_width=args.beam_width, random_starts=args.random_starts)
            if args.policy_share:
                policies[name + "+lead"] = ppo_tuner(p, "v1", beam_width=args.beam_width,
                                                     random_starts=args.random_starts, policy_share=args.policy_share)
    models = {name: p for p, name in model_names.items()}
    for label, path in models.items():
        load_cost_model(path)  # a bad file fails here, not after the first layers
        trained[label] = {computation_key(k) for k in artefact_training_keys(path)[1]}
    agents = [*args.agents, *models, *policies]
    rows = []
    for name in args.layers:
        task = get_task(name)
        assert task.key not in train, f"{name} is in v0's training split"
        for learned, keys in trained.items():
            assert computation_key(task) not in keys, f"{name} is a computation {learned} trained on"
        torch_gflops = library_task_times(task, "torch", threads=threads).stats.best_gflops
        row = {"task": name, "key": task.key, "v0_held_out": task.key in held_out, "flops": task.flops,
               "torch_best_gflops": torch_gflops, "agents": {}}
        for agent in agents:
            bests = []
            for seed in args.seeds:
                records = runs / f"{name.replace('/', '_')}__{agent}__seed{seed}.jsonl"
                records.parent.mkdir(parents=True, exist_ok=True)
                backend = make_backend("tvm", records=str(records))
                if agent in policies:
                    try:
                        latency = policies[agent](task, backend, seed, args.budget)  # any backend, not only the mock
                    finally:
                        backend.close()
                    measured = "its session"
                else:
                    env = TilingEnv(task, backend=backend)
                    try:
                        made = (make_agent("transfer", seed, cost_model=models[agent]) if agent in models
                                else make_agent(agent, seed))
                        result = made.run(env, Budget(measurements=args.budget))
                    finally:
                        env.close()
                    latency, measured = result.best_latency_s, f"{result.num_measurements} measurements"
                best = None if latency is None else task.flops / latency * 1e-9
                bests.append(best)
                print(f"{name} {agent} seed {seed}: best {best if best is None else round(best, 2)} GFLOP/s "
                      f"after {measured}", flush=True)
            ok = [b for b in bests if b is not None]
            row["agents"][agent] = {"best_gflops": bests, "median_gflops": statistics.median(ok) if ok else None}
        rows.append(row)
    out = {"command": "python examples/benchmarks/real_heldout.py " + " ".join(
        ["--agents", *args.agents] + (["--cost-models", *map(str, args.cost_models)] if models else [])
        + (["--policies", *map(str, args.policies)] if args.policies else [])
        + (["--beam-width", str(args.beam_width), "--random-starts", str(args.random_starts)]
           if args.beam_width else [])
        + (["--policy-share", str(args.policy_share)] if args.policy_share else [])
        + ["--budget", str(args.budget), "--seeds", *map(str, args.seeds)]
        + (["--runs", str(args.runs)] if args.runs else [])
        + ([] if list(args.layers) == list(LAYERS) else ["--layers", *args.layers])),
        "date": date, "cpu": cpu, "threads": threads, "budget": args.budget, "seeds": args.seeds, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"{date}-{identity.name}"  # one file a day and CPU: an Intel and an AMD run of one day both stay
    path = args.out / f"{stem}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    lines = [f"{date}, {cpu}, {threads} threads, {args.budget} real measurements per run, seeds {args.seeds}",
             "", "| layer | torch GFLOP/s | " + " | ".join(f"{a} median (min-max) | {a}/torch" for a in agents) + " |",
             "|---|---:|" + "---:|---:|" * len(agents)]
    for row in rows:
        cells = [row["task"], f"{row['torch_best_gflops']:.1f}" if row["torch_best_gflops"] else "-"]
        for agent in agents:
            a = row["agents"][agent]
            ok = [b for b in a["best_gflops"] if b is not None]
            cells.append(f"{a['median_gflops']:.1f} ({min(ok):.1f}-{max(ok):.1f})" if ok else "-")
            cells.append(f"{a['median_gflops'] / row['torch_best_gflops']:.2f}" if ok and row["torch_best_gflops"] else "-")
        lines.append("| " + " | ".join(cells) + " |")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwritten to {path}")


if __name__ == "__main__":
    main()
