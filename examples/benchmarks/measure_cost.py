"""Wall cost of one new real measurement at 1024^3: our local path, our RPC path, stock MetaSchedule.

For each of N uniformly random configs of the GEMM 1024^3 4/2/4 space (seeded), measured one at a time
as an environment step would, and interleaved so that machine noise hits the three paths alike:

* ``local``: :class:`TVMBackend` (persistent build workers, isolated runner, early stop on bad configs,
  kernels past the censor bound stopped and reported censored);
* ``rpc``: :class:`RPCBackend` through a tracker and one server on loopback (local pre-check included);
* ``metaschedule``: TVM MetaSchedule's stock ``LocalBuilder`` + ``LocalRunner`` with their defaults, given
  batches of ``--ms-batch`` configs (its natural use: every ``build`` call starts a worker pool that
  imports TVM's tensor intrinsics, so one config at a time would cost it far more); its per-config cost
  is the batch's wall time divided by the batch size.

Prints median, p90 and mean seconds per config for each, the share of censored configs, and the best
GFLOP/s each path saw (censored results never count as a best).

    python examples/benchmarks/measure_cost.py [--configs 100] [--seed 0] [--size 1024] [--no-metaschedule]
        [--censor-ratio R] [--censor-floor S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from schedule_gym import TileSpace, gemm
from schedule_gym.backends.tvm.rpc import RPCBackend
from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.templates import get_template


def metaschedule_measurer(target: dict):
    """A function measuring one config with MetaSchedule's stock LocalBuilder and LocalRunner."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput, LocalBuilder
    from tvm.s_tir.meta_schedule.runner import LocalRunner, RunnerInput

    builder, runner = LocalBuilder(), LocalRunner()
    tvm_target = tvm.target.Target(target)
    template = get_template("gemm-cpu")

    def measure(task, configs) -> list[float | None]:
        mods = [template.schedule(task, config) for config in configs]
        built = builder.build([BuilderInput(mod, tvm_target) for mod in mods])
        out: list[float | None] = [None] * len(configs)
        ok = [i for i, b in enumerate(built) if not b.error_msg]
        futures = runner.run([RunnerInput(built[i].artifact_path, "cpu", ArgInfo.from_entry_func(mods[i])) for i in ok])
        for i, future in zip(ok, futures):
            result = future.result()
            if not result.error_msg:
                out[i] = statistics.median(float(x) for x in result.run_secs)
        return out

    return measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-metaschedule", action="store_true")
    parser.add_argument("--no-rpc", action="store_true")
    parser.add_argument("--ms-batch", type=int, default=10)
    parser.add_argument("--size", type=int, default=1024, help="GEMM size^3 (the target figures are for 1024)")
    parser.add_argument("--censor-ratio", type=float, default=None,
                        help="MeasureProtocol.censor_ratio (default: the protocol's); 0: never censor")
    parser.add_argument("--censor-floor", type=float, default=None,
                        help="MeasureProtocol.censor_floor_s in seconds (default: the protocol's)")
    args = parser.parse_args()

    task = gemm(args.size, args.size, args.size)
    space = TileSpace(task)
    rng = np.random.default_rng(args.seed)
    configs = [space.config(int(i)) for i in rng.choice(space.size, args.configs, replace=False)]

    protocol = {} if args.censor_ratio is None else {"censor_ratio": args.censor_ratio or None}
    if args.censor_floor is not None:
        protocol["censor_floor_s"] = args.censor_floor
    local = TVMBackend(protocol=protocol)
    # The RPC server and MetaSchedule's runner inherit this process's environment: give their TVM
    # runtime the same thread count as the local runner (TVM's default here is one thread).
    os.environ["TVM_NUM_THREADS"] = str(local.num_threads)
    paths: dict[str, object] = {"local": local}
    cluster = []
    if not args.no_rpc:
        from tvm.rpc.server import Server
        from tvm.rpc.tracker import Tracker

        tracker = Tracker(host="127.0.0.1", port=9190, port_end=9390, silent=True)
        server = Server(host="127.0.0.1", port=9400, port_end=9600, key="bench", tracker_addr=("127.0.0.1", tracker.port), silent=True)
        cluster = [server, tracker]
        paths["rpc"] = RPCBackend(tracker=f"127.0.0.1:{tracker.port}", key="bench", protocol=protocol)
    ms = None if args.no_metaschedule else metaschedule_measurer(local.target)
    if ms is not None:
        paths["metaschedule"] = ms

    costs: dict[str, list[float]] = {name: [] for name in paths}
    parts: dict[str, list[tuple[float, float]]] = {name: [] for name in paths if name != "metaschedule"}
    best: dict[str, float] = {name: float("inf") for name in paths}
    failures: dict[str, int] = {name: 0 for name in paths}
    censored: dict[str, int] = {name: 0 for name in paths}
    # warm up each path once (worker start-up is a one-off, not a per-measurement cost)
    for name, path in paths.items():
        if name == "metaschedule":
            path(task, [space.initial_config()])  # type: ignore[operator]
        else:
            path.measure(task, [space.initial_config()])  # type: ignore[attr-defined]

    def record(name: str, latency: float | None, was_censored: bool = False) -> None:
        if latency is None:
            failures[name] += 1
        elif was_censored:  # "slower than latency": never a best
            censored[name] += 1
        else:
            best[name] = min(best[name], latency)

    batch = args.ms_batch
    for start in range(0, len(configs), batch):  # interleave: a batch of configs through every path
        chunk = configs[start : start + batch]
        for name, path in paths.items():
            if name == "metaschedule":
                t0 = time.perf_counter()
                latencies = path(task, chunk)  # type: ignore[operator]
                costs[name].extend([(time.perf_counter() - t0) / len(chunk)] * len(chunk))
                for latency in latencies:
                    record(name, latency)
                continue
            for config in chunk:  # one at a time, as environment steps measure
                t0 = time.perf_counter()
                (result,) = path.measure(task, [config])  # type: ignore[attr-defined]
                costs[name].append(time.perf_counter() - t0)
                parts[name].append((result.build_s, result.run_s))
                record(name, result.latency_s, result.censored)
        print(f"  {min(start + batch, len(configs))}/{len(configs)} configs", flush=True)

    n = args.size
    print(f"\nWall seconds per new measurement, GEMM {n}^3 (4/2/4), {len(configs)} random configs (seed {args.seed}), "
          f"target {local.target_key}, {time.strftime('%Y-%m-%d')}")
    print(f"protocol: censor_ratio {local.protocol.censor_ratio}, censor_floor_s {local.protocol.censor_floor_s}, "
          f"warmup_s {local.protocol.warmup_s}, early_stop_ratio {local.protocol.early_stop_ratio}, "
          f"coarse_above_s {local.protocol.coarse_above_s}")
    print(f"{'path':<14}{'median':>9}{'p90':>9}{'censored':>10}{'mean':>9}{'max':>9}{'failed':>8}{'best GFLOP/s':>14}")
    for name, values in costs.items():
        v = np.array(values)
        share = "-" if name == "metaschedule" else f"{censored[name] / len(v):.0%}"
        print(f"{name:<14}{np.median(v):>9.3f}{np.percentile(v, 90):>9.3f}{share:>10}{v.mean():>9.3f}{v.max():>9.3f}"
              f"{failures[name]:>8}{task.flops / best[name] * 1e-9:>14.1f}")
    print("\nWhere the time goes (seconds per config: build in a worker, then check + time in the runner)")
    print(f"{'path':<14}{'build med':>10}{'build p90':>10}{'run med':>9}{'run p90':>9}{'other med':>10}{'other p90':>10}")
    for name, pairs in parts.items():
        build = np.array([b for b, _ in pairs])
        run = np.array([r for _, r in pairs])
        other = np.array(costs[name]) - build - run
        print(f"{name:<14}{np.median(build):>10.3f}{np.percentile(build, 90):>10.3f}{np.median(run):>9.3f}"
              f"{np.percentile(run, 90):>9.3f}{np.median(other):>10.3f}{np.percentile(other, 90):>10.3f}")
    for name, path in paths.items():
        if name != "metaschedule":
            path.close()  # type: ignore[attr-defined]
    for proc in cluster:
        proc.terminate()


if __name__ == "__main__":
    main()
