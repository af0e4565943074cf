"""TVM MetaSchedule (``tune_tir``) on the same operator and target: the comparison's external anchor.

MetaSchedule searches its own schedule space (multi-level tiling, parallel/vectorise/unroll annotations,
cache writes...) with an evolutionary search guided by an XGBoost cost model, 64 trials a round. It does
not see our tile space, so it is not an :class:`~schedule_gym.agents.base.Agent`; it gets the same
operator (its workload's definition, :mod:`schedule_gym.operators`), the same target (this CPU, detected,
``num-cores`` = the timing threads) and the same number of trials, and it runs stock: ``tune_tir`` with
its default builder, runner, database, cost model and search strategy. Three things are added, none
changing what it does:

* the builder's build function is TVM's own (:func:`build_without_tensor_intrinsics`) less its import of
  every tensor intrinsic in each build worker: that import parses hundreds of TVMScript intrinsics and
  passed the 120 s build timeout on 2 busy cores, so that every build failed;
* a measure callback that keeps every trial's result (MetaSchedule's own ``run_secs``, or its error);
* the runner's evaluator is TVM's own ``default_run_evaluator`` wrapped to note the wall clock when each
  trial's timing ends, so the search curve has a time per trial, not one per round of 64.

The tuning process imports the tensor intrinsics (:func:`import_tensor_intrinsics`) before the clock starts:
the wall time is the search's.

After the search its best schedule (``compile_tir``) is exported and measured again the way every agent's
kernels are: in our isolated runner, checked against NumPy, timed under our
:class:`~schedule_gym.backends.tvm.protocol.MeasureProtocol` (the median of :data:`REMEASURE` runs after a
warm-up). That latency is the run's ``best_latency_s``;
the curve (``history``) keeps MetaSchedule's own measurements (its ``EvaluatorConfig``: 3 runs per
repeat, at least 100 ms), so its last point and ``best_latency_s`` can differ by timing noise.

The result has the shape of :meth:`TuneResult.to_dict() <schedule_gym.agents.base.TuneResult.to_dict>`
(agent ``"metaschedule"``), so :mod:`schedule_gym.baselines.compare` tables and plots it with the agents;
``space_size`` is our tile space's, so that "fraction explored" counts its trials in the same units.

    python -m schedule_gym.baselines.metaschedule --task gemm-1024 --trials 300 --out runs/metaschedule
    schedule-gym compare --task gemm-1024 --backend tvm --budgets 300 --metaschedule
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task, get_task

__all__ = ["REMEASURE", "build_without_tensor_intrinsics", "import_tensor_intrinsics", "run_metaschedule"]

_TIMES_ENV = "SCHEDULE_GYM_MS_TIMES"
#: Measurements of MetaSchedule's best kernel after one discarded warm-up; the median is reported. (A
#: fresh runner process times kernels slow at first: ``examples/results/library-figures.md``; the agents'
#: kernels run in a runner warmed by the run's earlier measurements.)
REMEASURE = 3


def import_tensor_intrinsics() -> None:
    """Import TVM's tensor intrinsics, as MetaSchedule's ``TuneContext`` does (once a process), before a timer starts.

    Their TVMScript parser calls ``inspect.stack()`` for each of its hundreds of intrinsics, and ``inspect``
    looks up the module of every frame on the stack; for the frames of the frozen import machinery, which
    have no file, that lookup walks all of ``sys.modules`` (about 1,900 modules with PyTorch loaded, as
    ``tvm_ffi`` does) each time, which made the import take a minute or more. Naming those frames' modules in
    ``inspect``'s own file-to-module cache for the import (which changes no lookup's answer: a frozen module
    has no source either way) makes it several times faster.
    """
    import inspect
    import sys

    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    frozen = {"<frozen importlib._bootstrap>": "_frozen_importlib",
              "<frozen importlib._bootstrap_external>": "_frozen_importlib_external"}
    added = [f for f in frozen if f not in inspect.modulesbyfile]
    inspect.modulesbyfile.update({f: frozen[f] for f in added})
    try:
        import tvm.s_tir.tensor_intrin  # noqa: F401
    finally:
        for key in added:
            inspect.modulesbyfile.pop(key, None)


def build_without_tensor_intrinsics(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's ``default_build`` without its ``import tvm.s_tir.tensor_intrin``, for ``LocalBuilder(f_build=)``.

    Runs in each build worker. The intrinsics are registered for scheduling (``tensorize``), which happens
    in the tuning process (its ``TuneContext`` imports them there); building a scheduled module looks
    none up. The import itself walks ``sys.modules`` (with PyTorch loaded, as ``tvm_ffi`` does at import,
    about 1,900 modules) for every frozen-importlib frame of every intrinsic's ``inspect.stack()`` (see
    :func:`import_tensor_intrinsics`), so a fresh worker spends tens of seconds in it before its first build.
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def _timed_run_evaluator(rt_mod: Any, device: Any, evaluator_config: Any, repeated_args: Any) -> list[float]:
    """TVM's default evaluator, then the wall clock appended to the file named by ``$SCHEDULE_GYM_MS_TIMES``.

    Runs in MetaSchedule's runner process (it inherits the environment); one line per timed trial.
    """
    from tvm.s_tir.meta_schedule.runner.local_runner import default_run_evaluator

    costs = default_run_evaluator(rt_mod, device, evaluator_config, repeated_args)
    path = os.environ.get(_TIMES_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{time.time():.6f}\n")
    return costs


def _timeline_callback() -> Any:
    """A MetaSchedule measure callback keeping, per trial, its median ``run_secs`` or its error."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    @derived_object
    class Timeline(PyMeasureCallback):
        def __init__(self) -> None:
            super().__init__()
            self.trials: list[dict[str, Any]] = []

        def apply(self, task_scheduler: Any, task_id: int, candidates: Any, builds: Any, runs: Any) -> None:
            now = time.time()
            for build, run in zip(builds, runs):
                error = build.error_msg or run.error_msg
                secs = None if error else statistics.median(float(x) for x in run.run_secs)
                self.trials.append({"latency_s": secs, "error": None if error is None else str(error)[-300:],
                                    "round_end": now})

    return Timeline()


def run_metaschedule(
    task: Task,
    trials: int,
    work_dir: str | Path,
    seed: int = 0,
    num_threads: int | None = None,
    protocol: dict | None = None,
    log: Callable[[str], None] | None = None,
    verbose: bool = False,
    timeout_s: float = 30.0,
) -> dict[str, Any]:
    """Tune ``task`` with MetaSchedule for ``trials`` trials; returns a ``TuneResult.to_dict()``-shaped dict.

    ``work_dir`` receives MetaSchedule's database and logs (emptied first: a run cut short starts again,
    MetaSchedule has no resume that keeps its trial count). The best kernel is then checked against NumPy
    and timed under ``protocol`` (our :class:`MeasureProtocol` fields; default ours) with
    ``num_threads`` threads (default all cores), like the agents' kernels. ``log`` gets a line before
    and after; ``verbose`` shows MetaSchedule's own log (always kept in ``work_dir/logs``).
    ``timeout_s`` bounds each build and each run (MetaSchedule's default, 30 s; its builder counts the
    start of its worker processes in the first build's time, which a loaded machine can push past it).
    """
    import tvm
    import tvm.s_tir.meta_schedule as ms
    from tvm.s_tir.meta_schedule.builder import LocalBuilder
    from tvm.s_tir.meta_schedule.runner import LocalRunner

    from dataclasses import replace

    from schedule_gym.backends.tvm.backend import TVMBackend
    from schedule_gym.backends.tvm.builder import Built
    from schedule_gym.backends.tvm.targets import resolve_target
    from schedule_gym.operators import get_workload

    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"MetaSchedule needs a positive whole number of trials, got {trials!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise ValueError(f"MetaSchedule's timeout_s must be a positive number of seconds, got {timeout_s!r}")
    backend = TVMBackend(num_threads=num_threads, protocol=protocol)  # resolves and checks target and threads
    work = Path(work_dir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    times_file = work / "trial_end_times.txt"
    target = tvm.target.Target(resolve_target("llvm", backend.num_threads))
    mod = tvm.IRModule({"main": get_workload(task.op).prim_func(task)})
    timeline = _timeline_callback()
    saved_env = {k: os.environ.get(k) for k in ("TVM_NUM_THREADS", _TIMES_ENV)}
    # MetaSchedule's runner process inherits this environment: the same timing threads as our runner.
    os.environ["TVM_NUM_THREADS"] = str(backend.num_threads)
    os.environ[_TIMES_ENV] = str(times_file)
    if log:
        log(f"metaschedule: {trials} trials of {task.name} on {target}, work dir {work}")
    # MetaSchedule logs every round to its work dir and, at this logger's level, to stdout: keep the
    # console to warnings unless asked (it resets the level itself, so set it before every run).
    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.INFO if verbose else logging.WARNING)
    import_tensor_intrinsics()  # the wall time is the search's, not this one-time import's
    start = time.time()
    try:
        database = ms.tune_tir(
            mod, target, str(work), max_trials_global=trials,
            builder=LocalBuilder(timeout_sec=timeout_s, f_build=build_without_tensor_intrinsics),
            runner=LocalRunner(timeout_sec=timeout_s, f_run_evaluator=_timed_run_evaluator),
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), timeline],
            seed=seed,
        )
        wall_s = time.time() - start
        schedule = ms.tir_integration.compile_tir(database, mod, target)
    finally:
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    ends = [float(x) - start for x in times_file.read_text().split()] if times_file.exists() else []

    history: list[dict[str, Any]] = []
    best = None
    timed = iter(ends)
    last = 0.0
    for n, trial in enumerate(timeline.trials, 1):
        if trial["latency_s"] is not None:
            # the runner timed this trial: its end time, in order (a failed trial was not timed: it
            # keeps the time of the one before)
            last = next(timed, trial["round_end"] - start)
        if trial["latency_s"] is not None and (best is None or trial["latency_s"] < best):
            best = trial["latency_s"]
        history.append({"n": n, "wall_s": last, "latency_s": trial["latency_s"], "best_latency_s": best,
                        "error": trial["error"]})

    remeasured = None
    trace = None
    error = None
    latencies: list[float] = []
    if schedule is not None:
        trace = str(schedule.trace)
        with target:
            executable = tvm.compile(schedule.mod, target=target)
        latencies = []
        for i in range(1 + REMEASURE):
            path = str(work / f"best_kernel_{i}.so")
            executable.export_library(path)
            # checked against NumPy, timed like ours, never censored (its exact latency is the point)
            result = backend.run_one(task, Built((), path, 0.0), replace(backend.protocol, censor_ratio=None))
            if result.error:
                error = result.error
                break
            latencies.append(result.latency_s)
        if error is None:
            remeasured = statistics.median(latencies[1:])
    backend.close()
    ok = [t for t in timeline.trials if t["latency_s"] is not None]
    if log:
        own = "-" if best is None else f"{task.flops / best * 1e-9:.1f}"
        again = "-" if remeasured is None else f"{task.flops / remeasured * 1e-9:.1f}"
        log(f"metaschedule: {len(timeline.trials)} trials ({len(timeline.trials) - len(ok)} failed) in {wall_s:.1f} s; "
            f"best {own} GFLOP/s as it measured, {again} GFLOP/s measured again like the agents' kernels"
            + (f" ({error})" if error else ""))
    return {
        "agent": "metaschedule",
        "task": task.name,
        "backend": "tvm",
        "seed": seed,
        "params": {"trials": trials, "num_trials_per_iter": 64, "strategy": "evolutionary", "cost_model": "xgb"},
        "space_size": TileSpace(task).size,
        "flops": task.flops,
        "num_measurements": len(timeline.trials),
        "wall_s": wall_s,
        "stop_reason": "budget",
        "history": history,
        "best_config": None,
        "best_latency_s": remeasured,
        "best_gflops": None if remeasured is None else task.flops / remeasured * 1e-9,
        "metaschedule": {
            "own_best_latency_s": best,
            "remeasured_latencies_s": latencies,
            "remeasure_error": error,
            "failed_trials": len(timeline.trials) - len(ok),
            "trace": trace,
            "target": str(target),
            "work_dir": str(work),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="gemm-1024", help="a task name (schedule-gym tasks) or gemm-MxKxN (default gemm-1024)")
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="timing threads (default all cores)")
    parser.add_argument("--out", default="runs/metaschedule", help="folder for the work dir and result.json")
    parser.add_argument("--verbose", action="store_true", help="show MetaSchedule's own log")
    args = parser.parse_args(argv)
    task = get_task(args.task)
    out = Path(args.out)
    result = run_metaschedule(task, args.trials, out / f"{task.name}__seed{args.seed}", seed=args.seed,
                              num_threads=args.threads, log=print, verbose=args.verbose)
    path = out / f"{task.name}__seed{args.seed}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"result written to {path}")
    return 0 if result["best_latency_s"] is not None and math.isfinite(result["best_latency_s"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
