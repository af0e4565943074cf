"""The LSTM optimization mapping's speed-up: a zoo model compiled from its native cells and from the fused form.

Xiao et al., "Optimization Mapping for Deep Learning" (Section 3) map the native cells of an LSTM to the
fused, merged form (``schedule_gym.models.lstm.map_lstm``). This experiment builds the zoo model
``--model`` (random seeded weights), imports it, and compiles it twice through ``map_model`` +
``schedule_kernels`` + ``compile_model(schedule_rest=True)``: from the canonical graph (native cells) and
from the LSTM-mapped graph (fused form); each once with untuned kernels (``s0``) and once with each dense
task's best config after ``--measurements`` random-search measurements on the mock backend
(``mock-best``). Every build's outputs are checked against PyTorch's, then timed (median and min of
``--repeat`` timings, each the mean over at least ``--min-repeat-ms``). Prints the speed-ups
(unmapped / mapped time) and writes the whole result as JSON to ``--out``.

Xiao et al.'s figure is cuDNN's LSTM on a GPU against TensorFlow's native LSTM in training; this is a TVM CPU
inference build, native vs fused cells: not like for like. Run it on a quiet machine.

    python examples/benchmarks/lstm_mapping.py --model lstm-ptb --threads 2 --out runs/lstm_mapping.json

``examples/benchmarks/models.py`` runs it for its LSTM models (``measure_lstm_mapping``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

THREADS_ENV = "TVM_NUM_THREADS"
#: what Xiao et al. report for the mapping (cuDNN's LSTM against TensorFlow's native cells), for the record
PAPER_SPEEDUP = 4.12
PAPER_NOTE = ("Xiao et al.'s 4.12x is cuDNN's LSTM on a GTX 1080 against TensorFlow r1.3's native LSTM in training "
              "(20 epochs); this is a TVM CPU inference build, native vs fused cells: not like for like")


def best_configs(mapped: Any, measurements: int, seed: int = 0) -> dict[str, Any]:
    """The best config of each dense task of ``mapped`` after random search on the mock backend."""
    from schedule_gym.agents import Budget, make_agent
    from schedule_gym.envs import TilingEnv

    out = {}
    for mt in mapped.tasks:
        if mt.task.op != "dense":
            continue
        env = TilingEnv(task=mt.task, backend="mock")
        try:
            result = make_agent("random", seed).run(env, Budget(measurements=measurements))
        finally:
            env.close()
        if result.best_config is not None:
            out[mt.task.name] = result.best_config
    return out


def measure_lstm_mapping(model_name: str, threads: int = 1, repeat: int = 10, min_repeat_ms: int = 200,
                         measurements: int = 200, seed: int = 0) -> dict[str, Any]:
    """Time the zoo model ``model_name`` compiled without and with the LSTM mapping (see the module docstring).

    Set ``TVM_NUM_THREADS`` before TVM starts its thread pool (before the first run) for ``threads`` to
    hold. Returns per variant the median and min seconds, the tasks, and the speed-ups (unmapped/mapped).
    """
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels, time_model
    from schedule_gym.models.importer import import_model
    from schedule_gym.models.lstm import map_lstm
    from schedule_gym.models.mapping import map_model
    from schedule_gym.models.pipeline import check_outputs, torch_outputs
    from schedule_gym.models.zoo import build_model

    spec = build_model(model_name, seed=seed)
    canonical = import_model(spec.module, spec.inputs, name=model_name)
    fused, report = map_lstm(canonical)
    target = host_llvm_target(threads)
    reference = torch_outputs(spec)
    result: dict[str, Any] = {"model": model_name, "threads": threads, "repeat": repeat, "min_repeat_ms": min_repeat_ms,
                              "lstm": report.lines(), "target": str(target.get("mcpu")), "variants": {}}
    for graph_name, graph in (("unmapped", canonical), ("mapped", fused)):
        mapped = map_model(graph)
        tuned = best_configs(mapped, measurements, seed)
        for tuning, configs in (("s0", {}), ("mock-best", tuned)):
            start = time.perf_counter()
            ex = compile_model(schedule_kernels(mapped, configs, untuned="s0"), target, schedule_rest=True)
            error = check_outputs(run_model(ex, spec.inputs), reference)
            compiled_s = time.perf_counter() - start
            times = time_model(ex, spec.inputs, repeat=repeat, min_repeat_ms=min_repeat_ms)
            result["variants"][f"{graph_name}/{tuning}"] = {
                "median_s": statistics.median(times), "min_s": min(times), "compile_s": compiled_s,
                "check": error or "ok", "tasks": {t.task.name: t.weight for t in mapped.tasks}}
    v = result["variants"]
    for tuning in ("s0", "mock-best"):
        result[f"speedup_{tuning}"] = {
            stat: v[f"unmapped/{tuning}"][f"{stat}_s"] / v[f"mapped/{tuning}"][f"{stat}_s"] for stat in ("median", "min")}
    result["paper_speedup"] = PAPER_SPEEDUP
    result["paper_note"] = PAPER_NOTE
    return result


def speedup_line(result: dict[str, Any]) -> str:
    """The speed-ups of a :func:`measure_lstm_mapping` result as one line."""
    return "lstm mapping (fused over native cells, unmapped/mapped time): " + ", ".join(
        f"{k[len('speedup_'):]} median {v['median']:.2f}x min {v['min']:.2f}x"
        for k, v in result.items() if k.startswith("speedup_")) + f" (paper: {PAPER_SPEEDUP}x, not like for like)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lstm-ptb", help="a zoo model with LSTM cells (lstm-ptb, tiny-lstm)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--min-repeat-ms", type=int, default=200)
    parser.add_argument("--measurements", type=int, default=200, help="random-search measurements per dense task")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the result here (JSON)")
    args = parser.parse_args()
    os.environ[THREADS_ENV] = str(args.threads)  # before TVM's runtime starts its thread pool

    from schedule_gym.hardware import cpu_name

    print(f"{args.model}: CPU {cpu_name()}, {args.threads} threads, {time.strftime('%Y-%m-%d')}", flush=True)
    result = measure_lstm_mapping(args.model, args.threads, args.repeat, args.min_repeat_ms, args.measurements,
                                  args.seed)
    result.update(cpu=cpu_name(), date=time.strftime("%Y-%m-%d"))
    for line in result["lstm"]:
        print(f"  {line}")
    for name, variant in result["variants"].items():
        print(f"  {name:<20} median {variant['median_s'] * 1e3:10.2f} ms   min {variant['min_s'] * 1e3:10.2f} ms   "
              f"check {variant['check']}")
    print(speedup_line(result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
