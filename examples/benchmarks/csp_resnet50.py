"""Composed Singular Prediction vs the Multiplicative Domain Formulation on ResNet-50's conv2d layers.

Patabandi and Hall (``shared/papers/001_*``) claim two things for loop tiling + loop permutation of conv2d:
(1) learning the two domains apart (ADF, composed at prediction: CSP) costs over 100x less training data
than learning their product (MDF), and (2) the composed predictions are as good as MDF's and ahead of
oneDNN on average (1.5x, up to 4.0x). This script tests both on this CPU, per layer, in one run:

* ``csp``: the permutation model trained on intra-tile permutations of ``--tile-schemes`` tile schemes, the
  tile model trained on schemes measured with the permutation it predicts, the prediction composed
  (``schedule_gym.agents.csp``); ``--budget`` measurements including ``s0`` and the predictions;
* ``mdf``: the same model family on uniform samples of tiles x intra-tile orders, the same budget (and
  ``--mdf-multipliers`` times it, to see how much more data MDF needs to match CSP);
* the untiled ``s0`` in the default order, the best tile-only schedule found by the XGBoost tuner with the
  same budget in the default order (``TilingEnv``), and PyTorch's conv2d (oneDNN, ``channels_last``).

With ``--backend tvm`` (real kernels, each checked against the float64 reference; records in
``--records-dir``, so a rerun resumes) the predicted and tuned schedules are re-timed side by side at the
end of each layer (median of 5 repeats of at least 50 ms) and torch is timed right after them: run it on
an idle machine. With ``--backend mock`` (the calibrated model; ``--mock-profile``) the figures are model
latencies and torch is not run.

Training-data cost is printed two ways: the measurements and backend seconds each formulation spent (equal
budgets by design), and the *coverage* view of the paper's claim: the product points that CSP's additive
data stand for (tile schemes of the tile data x intra-tile orders of the permutation data) against the
measurements CSP took to cover them; at the measured seconds per measurement, that is the data
collection time MDF would need to sample the same product.

    python examples/benchmarks/csp_resnet50.py --backend tvm --budget 100 --layers resnet50/conv2 resnet50/conv6
    python examples/benchmarks/csp_resnet50.py --backend mock --budget 200 --mdf-multipliers 1 4
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from schedule_gym.agents import make_agent
from schedule_gym.backends import MockBackend, make_backend
from schedule_gym.backends.orders import ScheduleBackend
from schedule_gym.envs import ScheduleEnv, TilingEnv
from schedule_gym.hardware import cpu_name
from schedule_gym.spaces import Schedule
from schedule_gym.tasks import get_suite


def gmean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("tvm", "mock"), default="tvm")
    parser.add_argument("--budget", type=int, default=100, help="measurements per formulation and layer")
    parser.add_argument("--layers", nargs="*", help="layer names (default: every conv2d of resnet50)")
    parser.add_argument("--tile-schemes", type=int, default=5, help="CSP's permutation data: tile schemes")
    parser.add_argument("--predict", default="5x5", help="tiles x orders measured as the prediction (the paper's CSP-5x5; CSP-1: 1x1)")
    parser.add_argument("--mdf-multipliers", type=float, nargs="*", default=[1.0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mock-profile", default=None)
    parser.add_argument("--records-dir", default="runs/csp")
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    predict_tiles, predict_orders = (int(x) for x in args.predict.split("x"))
    predict = {"predict_tiles": predict_tiles, "predict_orders": predict_orders}

    layers = [e for e in get_suite("resnet50") if e.task.op == "conv2d" and (not args.layers or e.name in args.layers)]
    if args.layers and len(layers) != len(args.layers):
        raise SystemExit(f"unknown layers in {args.layers}; see `schedule-gym tasks --suite resnet50`")
    real = args.backend == "tvm"
    retimer = None
    if real:
        from schedule_gym.backends.tvm.backend import TVMBackend

        retimer = ScheduleBackend(TVMBackend(num_threads=2, protocol={
            "repeat": 5, "min_repeat_ms": 50, "early_stop_ratio": None, "coarse_above_s": None, "censor_ratio": None}))
        Path(args.records_dir).mkdir(parents=True, exist_ok=True)
    mock = MockBackend(**({"profile": args.mock_profile} if args.mock_profile else {}))
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, CPU {cpu_name()}, 2 threads, backend "
          f"{'tvm' if real else 'mock:' + mock.profile.name}; budget {args.budget} per formulation and layer, "
          f"CSP-{args.predict} with {args.tile_schemes} tile schemes, seed {args.seed}")
    mdf_names = [f"mdf x{m:g}" for m in args.mdf_multipliers]
    print(f"{'layer':<16} {'csp':>7} " + " ".join(f"{n:>8}" for n in mdf_names)
          + f" {'untiled':>8} {'tiles':>7} {'torch':>7}   GFLOP/s; csp data perm+tile (s)")
    rows = []
    t_start = time.perf_counter()
    for entry in layers:
        task = entry.task
        if real:
            backend = make_backend("tvm", records=str(Path(args.records_dir) / f"{task.name.replace('/', '_')}.jsonl"))
        else:
            backend = mock
        row: dict = {"layer": task.name, "weight": entry.weight}
        runs = {}
        env = ScheduleEnv(task, backend=backend)
        agent = make_agent("csp", seed=args.seed, tile_schemes=args.tile_schemes, **predict)
        runs["csp"] = (agent, agent.run(env, args.budget))
        for name, mult in zip(mdf_names, args.mdf_multipliers):
            env = ScheduleEnv(task, backend=backend)
            agent = make_agent("mdf", seed=args.seed, **predict)
            runs[name] = (agent, agent.run(env, max(args.budget, round(mult * args.budget))))
        tile_env = TilingEnv(task, backend=backend)
        tiles_result = make_agent("xgb", seed=args.seed).run(tile_env, args.budget)
        s0_latency = tiles_result.s0_latency_s

        schedules = {name: agent.predicted_best[0] for name, (agent, _) in runs.items() if agent.predicted_best}
        schedules["tiles"] = Schedule(tiles_result.best_config, task.loop_order)
        if real:  # side by side, fresh kernels, then torch
            from schedule_gym.reference import library_task_times

            timed = dict(zip(schedules, retimer.measure(task, list(schedules.values()))))
            latency = {n: r.latency_s for n, r in timed.items() if r.ok}
            torch_s = library_task_times(task, "torch", threads=2).median_s
        else:
            latency = {name: agent.predicted_best[1].latency_s for name, (agent, _) in runs.items() if agent.predicted_best}
            latency["tiles"] = tiles_result.best_latency_s
            torch_s = None
        if real:
            backend.close()
        gflops = {n: task.flops / s * 1e-9 for n, s in latency.items()}
        csp_agent = runs["csp"][0]
        cost = csp_agent.data_cost
        schemes = csp_agent.tile_schemes
        perm_per_scheme = cost["perm"]["measurements"] / schemes
        covered = cost["tile"]["measurements"] * perm_per_scheme  # product points the additive data stand for
        adf_n = cost["perm"]["measurements"] + cost["tile"]["measurements"]
        adf_s = cost["perm"]["backend_s"] + cost["tile"]["backend_s"]
        mdf_cost = runs[mdf_names[0]][0].data_cost["product"]
        row.update(
            gflops=gflops, untiled_gflops=task.flops / s0_latency * 1e-9 if s0_latency else None,
            torch_gflops=task.flops / torch_s * 1e-9 if torch_s else None,
            csp_schedule=[list(map(list, schedules["csp"].tiles)), [list(x) for x in schedules["csp"].order]]
            if "csp" in schedules else None,
            adf_measurements=adf_n, adf_backend_s=adf_s, mdf_measurements=mdf_cost["measurements"],
            mdf_backend_s=mdf_cost["backend_s"], coverage_points=covered,
            coverage_mdf_s=covered * mdf_cost["backend_s"] / max(1, mdf_cost["measurements"]),
            search_s={n: r.wall_s for n, (_, r) in runs.items()} | {"tiles": tiles_result.wall_s},
        )
        rows.append(row)

        def cell(name: str, width: int) -> str:
            return f"{gflops[name]:{width}.1f}" if name in gflops else f"{'-':>{width}}"

        untiled = f"{row['untiled_gflops']:8.2f}" if row["untiled_gflops"] else f"{'-':>8}"
        torch_text = f"{row['torch_gflops']:7.1f}" if row["torch_gflops"] else f"{'-':>7}"
        print(f"{task.name:<16} {cell('csp', 7)} " + " ".join(cell(n, 8) for n in mdf_names)
              + f" {untiled} {cell('tiles', 7)} {torch_text}   {cost['perm']['measurements']}+"
              f"{cost['tile']['measurements']} ({adf_s:.0f} s)", flush=True)

    if retimer is not None:
        retimer.close()
    print()
    both = [r for r in rows if "csp" in r["gflops"]]
    for name in mdf_names:
        paired = [r["gflops"]["csp"] / r["gflops"][name] for r in both if name in r["gflops"]]
        print(f"CSP / {name}: geometric mean {gmean(paired):.3f} over {len(paired)} layers "
              f"(CSP ahead on {sum(p > 1 for p in paired)})")
    for ref in ("untiled_gflops", "torch_gflops"):
        paired = [r["gflops"]["csp"] / r[ref] for r in both if r[ref]]
        if paired:
            print(f"CSP / {ref.split('_')[0]}: geometric mean {gmean(paired):.3f}, max {max(paired):.2f} over "
                  f"{len(paired)} layers")
    paired = [r["gflops"]["tiles"] / r["torch_gflops"] for r in rows if r["torch_gflops"] and "tiles" in r["gflops"]]
    if paired:
        print(f"tile-only (xgb, default order) / torch: geometric mean {gmean(paired):.3f}")
    adf_n = sum(r["adf_measurements"] for r in rows)
    adf_s = sum(r["adf_backend_s"] for r in rows)
    mdf_n = sum(r["mdf_measurements"] for r in rows)
    mdf_s = sum(r["mdf_backend_s"] for r in rows)
    covered = sum(r["coverage_points"] for r in rows)
    covered_s = sum(r["coverage_mdf_s"] for r in rows)
    print(f"training data, equal budgets: ADF {adf_n} measurements / {adf_s:.0f} s backend, MDF {mdf_n} / {mdf_s:.0f} s")
    print(f"coverage: CSP's additive data stand for {covered:.0f} product points; sampling them costs MDF "
          f"{covered_s:.0f} s at its measured s/measurement: {covered / max(1, adf_n):.1f}x the measurements, "
          f"{covered_s / max(adf_s, 1e-9):.1f}x the seconds of ADF's data")
    n_orders = math.factorial(len(layers[0].task.dims)) if layers else 0
    print(f"the paper's count (every intra-tile order of K={args.tile_schemes} schemes for ADF, of every tile scheme "
          f"for MDF; D! = {n_orders}): per layer with T tile schemes, MDF/ADF = T*D!/(K*D! + T), e.g. "
          + ", ".join(f"T={t}: {t * n_orders / (args.tile_schemes * n_orders + t):.1f}x" for t in (100, 1000, 10000)))
    print(f"total {time.perf_counter() - t_start:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps({"cpu": cpu_name(), "backend": args.backend, "budget": args.budget,
                                              "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
