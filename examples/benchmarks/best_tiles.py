"""The best measured config of each packed matmul task in record files, with its register micro-tile.

For each task of the packed matmul templates (``*-cpu-v2``, ``-v3``, ``-v4``) in the given record files: its best
successful, uncensored measurement, the template, the micro-tile ``MR x NR`` (``NR`` in vectors of this CPU's
FP32 lanes) and GFLOP/s. Shows which tiles a tuning settled on, e.g. whether v3's tiles of three or six vectors
(which v2 builds at a few GFLOP/s) are among the winners.

    python examples/benchmarks/best_tiles.py runs/models-intel-v3/bert-base__xgb__packed__picks__seed0.jsonl
"""

from __future__ import annotations

import argparse

from schedule_gym.hardware import vector_bits
from schedule_gym.records import RecordStore
from schedule_gym.templates.packed_matmul import OPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+", help="record files")
    args = parser.parse_args()
    lanes = vector_bits() // 32
    for path in args.records:
        best = {}
        for record in RecordStore(path):
            result = record.result
            if record.task.op not in OPS or "-cpu-v" not in record.template or not result.ok or result.censored:
                continue
            held = best.get(record.task.name)
            if held is None or result.latency_s < held.result.latency_s:
                best[record.task.name] = record
        print(f"{path}: {len(best)} packed matmul tasks ({lanes} FP32 lanes)")
        for name, record in sorted(best.items()):
            factors = dict(zip(record.task.dim_names, record.result.config))
            mr, nr = factors["m"][-1], factors["n"][-1]
            print(f"  {name:<40} {record.template:<22} MR x NR {mr:>3} x {nr:<4} ({nr / lanes:g} vectors) "
                  f"{record.task.flops / record.result.latency_s * 1e-9:6.0f} GFLOP/s")


if __name__ == "__main__":
    main()
