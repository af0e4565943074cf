"""The packed matmul templates' versions side by side on today's CPU, micro-tile by micro-tile:
``dense-cpu-v2``, which vectorises a micro-tile row's ``NR`` columns as one vector, ``dense-cpu-v3``, which
writes them out as whole vectors, and ``dense-cpu-v4``, which does as v3 but reads ``A`` in place instead of
packing it once per column block.

Where ``NR / lanes`` is not a power of two (``NR = 48`` with AVX-512's 16 lanes, 24 with AVX2's 8) LLVM keeps
v2's tile out of the registers; v3 splits ``n2`` into unrolled vectors (``schedule_gym.templates.vectors``):
the same loop nest, the vectors written out.

For a dense ``M x K x N`` with bias (default BERT-base's 128 x 768 x 768) and micro-tiles ``MR x NR`` of this
CPU's vector width, it builds each version's kernel (``KC = --kc``; one row block, and ``--column-blocks``
column blocks, by default one per micro-tile column: the most ``A`` packing), checks each output against float64 with
the workload's own tolerance, and times each kernel with ``time_evaluator`` (best of ``--repeat`` x 20 calls).
Every kernel is exported to its own file: ``tvm.runtime.load_module`` of a path already loaded returns the
library first loaded there, so one reused file would time the first kernel again.

    TVM_NUM_THREADS=2 python examples/benchmarks/vector_split.py [--shape 128 768 768] [--tiles 8x48 4x64 ...]
        [--versions 2 3 4] [--column-blocks 2]

``--mcpu haswell`` builds for another LLVM CPU than this one (its vector width from LLVM's CPU features): on
an AVX-512 machine, AVX2 code with its 16 ``ymm`` registers, which shows how a tile's rows are allocated
there (not how fast an AVX2 CPU runs it).

Prints the CPU, then per tile its config and GFLOP/s of each version.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import tvm

from schedule_gym.backends.tvm.targets import host_llvm_target
from schedule_gym.hardware import cpu_identity, usable_cores, vector_bits
from schedule_gym.operators import get_workload, packed_task
from schedule_gym.tasks import dense
from schedule_gym.templates import get_template


def tvm_threads() -> int:
    """The threads TVM's pool will run: ``TVM_NUM_THREADS`` where it is set, else the cores this process may use."""
    return int(os.environ.get("TVM_NUM_THREADS", usable_cores()))


def build_checked(module, target, path: Path, buffers: list, expected, tolerance, label: str):
    """``module`` compiled for ``target``, exported to ``path`` (a path of its own: see the module docstring) and
    loaded; its output (``buffers[-1]``, filled with NaN first) checked against ``expected`` within ``tolerance``."""
    with target:
        executable = tvm.compile(module, target=target)
    executable.export_library(str(path))
    kernel = tvm.runtime.load_module(str(path))
    buffers[-1].copyfrom(np.full(tuple(buffers[-1].shape), np.nan, dtype=buffers[-1].dtype))
    kernel["main"](*buffers)
    error = np.abs(buffers[-1].numpy() - expected)
    if not (error <= tolerance).all():
        raise AssertionError(f"{label}: output off by up to {float(np.nanmax(error)):.3g}")
    return kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs=3, type=int, default=[128, 768, 768], metavar=("M", "K", "N"))
    parser.add_argument("--tiles", nargs="+", default=None,
                        help="MRxNR micro-tiles (default: 4 and 8 rows of 2, 3 and 4 vectors, and 4 rows of 6, "
                             "where they divide the shape)")
    parser.add_argument("--kc", type=int, default=48, help="reduction steps per micro-kernel call (KC)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mcpu", help="build for this LLVM CPU (default: this machine's)")
    parser.add_argument("--versions", nargs="+", type=int, default=[2, 3, 4], choices=[2, 3, 4])
    parser.add_argument("--column-blocks", type=int, default=None,
                        help="parallel column blocks n0 (default: N / NR, one micro-tile column each)")
    args = parser.parse_args()
    m, k, n = args.shape
    threads = tvm_threads()
    target = host_llvm_target(threads)
    if args.mcpu:
        if not tvm.target.codegen.llvm_is_valid_cpu(args.mcpu, target["mtriple"]):
            parser.error(f"--mcpu {args.mcpu!r} is not a CPU LLVM knows for {target['mtriple']}")
        target["mcpu"] = args.mcpu
    target = tvm.target.Target(target)
    if args.mcpu:
        has = tvm.target.codegen.llvm_cpu_has_features
        lanes = (512 if has("avx512f", target) else 256 if has("avx2", target) else 128) // 32
    else:
        lanes = vector_bits() // 32
    tiles = ([tuple(int(x) for x in t.split("x")) for t in args.tiles] if args.tiles else
             [(mr, v * lanes) for v in (2, 3, 4) for mr in (4, 8)] + [(4, 6 * lanes)])
    tiles = [(mr, nr) for mr, nr in tiles if m % mr == 0 and n % nr == 0 and nr % lanes == 0]
    if k % args.kc:
        parser.error(f"--kc {args.kc} does not divide K = {k}")
    task = packed_task(dense(m, k, n, bias=True))
    workload = get_workload(task.op)
    inputs = workload.inputs(task)
    expected, tolerance = workload.reference(task, inputs)
    dev = tvm.cpu()
    buffers = [tvm.runtime.tensor(x, dev) for x in inputs]
    buffers.append(tvm.runtime.empty(workload.output_shape(task), task.dtype, dev))
    schedules = {f"v{v}": get_template(f"dense-cpu-v{v}").schedule for v in args.versions}
    print(f"CPU: {cpu_identity().describe()}; built for {target.attrs['mcpu']}, {lanes} FP32 lanes; {threads} threads; "
          f"dense {m}x{k}x{n}+bias, KC {args.kc}; GFLOP/s, best of {args.repeat} x 20 calls")
    print(f"{'MR x NR':>8} {'vectors':>7} {'config':>34} " + " ".join(f"{name:>7}" for name in schedules))
    with tempfile.TemporaryDirectory() as tmp:
        for mr, nr in tiles:
            n0 = args.column_blocks or n // nr
            if (n // nr) % n0:
                print(f"{mr:>3} x {nr:<3} skipped: {n0} column blocks do not divide {n // nr} micro-tile columns")
                continue
            config = ((1, m // mr, mr), (k // args.kc, args.kc), (n0, n // (n0 * nr), nr))
            row = []
            for name, schedule in schedules.items():
                kernel = build_checked(schedule(task, config), target, Path(tmp) / f"{name}_{mr}x{nr}.so", buffers,
                                       expected, tolerance, f"{name} {config}")
                seconds = min(kernel.time_evaluator("main", dev, number=20, repeat=args.repeat)(*buffers).results)
                row.append(2 * m * k * n / seconds / 1e9)
            print(f"{mr:>3} x {nr:<3} {nr / lanes:>7.1f} {str(config):>34} " + " ".join(f"{x:>7.0f}" for x in row),
                  flush=True)


if __name__ == "__main__":
    main()
