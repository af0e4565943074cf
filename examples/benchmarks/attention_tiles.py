"""The attention kernel alone, for each register tile: which ``ROWS x KEY_TILE`` this CPU runs fastest.

``schedule_gym.models.fixed.attention`` computes ``Q @ K^T`` and ``P @ V`` in register tiles of ``ROWS`` query rows
by ``KEY_TILE`` columns (``register_tile`` picks one for the CPU). This script builds the kernel for each tile of
``--tiles`` and for the transformers' shapes (BERT-base's 12 heads of 128 tokens, GPT-2's causal 128, ViT-B/16's 197;
depth 64), checks each build's output, filled with NaN first, against float64 (``vector_split.build_checked``, with
the tolerance of the kernel's tests: ``1e-5`` of the largest output), then times every build in ``--rounds``
interleaved rounds (``time_evaluator``, ``--number`` calls a timing) and prints the best and the median time a call
and GFLOP/s (both matmuls counted, the causal ones' skipped keys too). With AVX2 a 6 x 16 tile is 12 accumulator
registers; with AVX-512 it is 6, 6 x 32 is 12 and 12 x 32 is 24.

``--operands in-place`` builds each kernel as the models call it instead: its heads read in place from the
projections (BERT-base's three ``tokens x 768`` projections; GPT-2's and ViT-B/16's one ``tokens x 2,304``
projection whose thirds are ``Q``, ``K`` and ``V``) and its result written where the heads are joined (``tokens x
768``), so that each head's ``K^T`` and ``V`` are copied into buffers of the thread first (``attention_kernel``'s
``views``); ``--operands own in-place`` times both forms, interleaved, side by side::

    TVM_NUM_THREADS=2 python examples/benchmarks/attention_tiles.py [--tiles 6x16 6x32 4x32 8x32 12x16 12x32]
        [--rounds 7] [--number 50] [--operands own in-place]

Prints the CPU, the date and a row per shape and tile.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import tempfile
from pathlib import Path

import numpy as np
import tvm

from schedule_gym.backends.tvm.targets import host_llvm_target
from schedule_gym.hardware import cpu_identity
from schedule_gym.models.fixed import attention
from schedule_gym.models.fixed.views import Strided
from schedule_gym.reference import gflops_stats
from vector_split import build_checked, tvm_threads  # noqa: E402  (examples/benchmarks, the script's own folder)

#: the forms of the kernel's operands ``--operands`` names, and how the table says each
OPERANDS = {"own": "operands own", "in-place": "operands in place"}

#: (label, heads, rows = keys, depth, causal, one projection: Q, K and V the thirds of one projection's columns)
SHAPES = [("bert-base", 12, 128, 64, False, False), ("gpt2 (causal)", 12, 128, 64, True, True),
          ("vit-b16", 12, 197, 64, False, True)]


def _reference(q: np.ndarray, kt: np.ndarray, v: np.ndarray, alpha: float, causal: bool) -> np.ndarray:
    s = (q.astype(np.float64) @ kt.astype(np.float64)) * alpha
    if causal:
        s = np.where(np.tri(s.shape[-2], s.shape[-1], dtype=bool), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _in_place(heads: int, tokens: int, depth: int, one_projection: bool, rng) -> tuple[list, list, tuple]:
    """The views a model passes the kernel, its arguments, and ``(q, kt, v)`` as arrays of their own: the heads
    of ``Q``, ``K`` and ``V`` read from one ``tokens x 3 * heads * depth`` projection (``one_projection``) or from
    three of ``heads * depth`` columns, the result joined into ``tokens x heads * depth``."""
    width = heads * depth
    if one_projection:
        qkv = rng.standard_normal((tokens, 3 * width), dtype=np.float32)
        parts = [qkv[:, i * width:(i + 1) * width] for i in range(3)]
        size, row, offsets = qkv.size, 3 * width, (0, width, 2 * width)
        arrays = [qkv.ravel()] * 3
    else:
        parts = [rng.standard_normal((tokens, width), dtype=np.float32) for _ in range(3)]
        size, row, offsets = tokens * width, width, (0, 0, 0)
        arrays = [part.ravel() for part in parts]
    views = [Strided(size, offsets[0], (depth, row, 1)), Strided(size, offsets[1], (depth, 1, row)),
             Strided(size, offsets[2], (depth, row, 1)), Strided(tokens * width, 0, (depth, width, 1))]
    heads_of = [part.reshape(tokens, heads, depth).transpose(1, 0, 2) for part in parts]
    buffers = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.empty((tokens * width,), "float32")]
    return views, buffers, (heads_of[0], heads_of[1].transpose(0, 2, 1), heads_of[2])


def _build(rows_tile: int, key_tile: int, heads: int, tokens: int, depth: int, causal: bool, one_projection: bool,
           in_place: bool, target, folder: Path):
    """The kernel with a ``rows_tile x key_tile`` register tile (its operands in place, as a model's, where
    ``in_place``), built into ``folder``, checked, and its buffers."""
    alpha = 1 / math.sqrt(depth)
    rng = np.random.default_rng(tokens)
    if in_place:
        views, buffers, (q, kt, v) = _in_place(heads, tokens, depth, one_projection, rng)
    else:
        views = None
        q = rng.standard_normal((heads, tokens, depth), dtype=np.float32)
        kt = rng.standard_normal((heads, depth, tokens), dtype=np.float32)
        v = rng.standard_normal((heads, tokens, depth), dtype=np.float32)
        buffers = [tvm.runtime.tensor(a) for a in (q, kt, v)] + [tvm.runtime.empty((heads, tokens, depth), "float32")]
    func = attention.attention_kernel(heads, tokens, tokens, depth, depth, alpha, causal, views=views,
                                      tile=(rows_tile, key_tile))
    expected = _reference(q, kt, v, alpha, causal)
    if in_place:
        expected = expected.transpose(1, 0, 2).reshape(-1)
    name = f"{'causal' if causal else 'full'}_{tokens}_{rows_tile}x{key_tile}{'_in_place' if in_place else ''}"
    kernel = build_checked(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target,
                           folder / f"{name}.so", buffers, expected, 1e-5 * np.abs(expected).max(),
                           f"tile {rows_tile}x{key_tile}, {heads}x{tokens}")
    return kernel, buffers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", nargs="+", default=["6x16", "6x32", "4x32", "8x32", "12x16", "12x32"],
                        help="register tiles ROWSxKEY_TILE")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--number", type=int, default=50, help="calls a timing")
    parser.add_argument("--operands", nargs="+", choices=list(OPERANDS), default=["own"],
                        help="own: q, kt, v and o tensors of their own; in-place: the heads read from the projections "
                             "and written where they are joined, as the models pass them (default: own)")
    args = parser.parse_args()
    tiles = []
    for text in args.tiles:
        try:
            rows_tile, key_tile = (int(part) for part in text.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--tiles takes ROWSxKEY_TILE (6x16), got {text!r}") from None
        if rows_tile < 1 or key_tile < 1:
            raise SystemExit(f"--tiles needs positive rows and columns, got {text!r}")
        tiles.append((rows_tile, key_tile))
    threads = tvm_threads()
    target = tvm.target.Target(host_llvm_target(threads))
    with tempfile.TemporaryDirectory() as tmp:
        builds = {(label, tile, form): _build(*tile, heads, tokens, depth, causal, one, form == "in-place", target,
                                              Path(tmp))
                  for label, heads, tokens, depth, causal, one in SHAPES for tile in tiles for form in args.operands}
    keys = list(builds)
    times: dict = {key: [] for key in keys}
    for r in range(args.rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            kernel, buffers = builds[key]
            timer = kernel.time_evaluator("main", tvm.cpu(), number=args.number, repeat=1)
            times[key].append(timer(*buffers).mean)
    identity = cpu_identity()
    print(f"CPU: {identity.name} ({identity}); {threads} threads; {datetime.date.today()}; "
          f"{args.rounds} rounds of {args.number} calls; ms a call best / median, GFLOP/s by the best")
    for label, heads, tokens, depth, causal, _ in SHAPES:
        flops = 2 * 2 * heads * tokens * tokens * depth
        for tile in tiles:
            for form in args.operands:
                runs = times[label, tile, form]
                print(f"{label:14s} {tile[0]:2d} x {tile[1]:2d}  {OPERANDS[form]:18s} {min(runs) * 1e3:6.3f} / "
                      f"{statistics.median(runs) * 1e3:6.3f} ms  {gflops_stats(runs, flops).best_gflops:6.1f}")


if __name__ == "__main__":
    main()
