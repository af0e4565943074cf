"""A dense layer timed as a model calls it: many weight matrices, each used once a pass, against the same
kernel timed warm, for the packed templates and PyTorch side by side.

A tuned kernel is measured on one set of buffers, call after call (``time_evaluator``), so its weights stay in
the core's caches. In a transformer each dense layer has its own weights (BERT-base: 48 of 768x768, 113 MB),
read once a pass from the last-level cache or memory. This script times, for a dense ``M x K x N`` with bias
and each config given (default: BERT-base's 128x768x768 and a few 8x48 / 4x96 tiles):

* ``warm``: ``time_evaluator`` on one weight matrix (20 calls a repeat, best of 5);
* ``stream``: ``--layers`` distinct weight matrices called in turn, back to back, as a model's layers are
  (the mean per call of one pass; ``--passes`` passes after two untimed ones: best and median);

for ``dense-cpu-v3``, ``-v4``, ``-v5``, ``-v7`` and ``-v8`` (those of ``--versions``; v5's, v7's and v8's weights
packed once, as a model build packs them: ``schedule_gym.templates.layouts``; every kernel's output checked against
float64 first), every kernel built first, then timed in ``--rounds`` interleaved rounds (best and median over all
of them), then ``torch.nn.functional.linear`` the same two ways (``torch.set_num_threads`` = ``TVM_NUM_THREADS``).
A pass of ``--layers 1`` is the warm case through the same loop. For scale it prints how fast one thread copies the
same bytes with NumPy. ``--huge-pages`` puts the weights in one NumPy buffer, which NumPy advises the kernel to back
with 2 MB pages (Linux's transparent huge pages in ``madvise`` mode), shared with TVM through DLPack: whether
the TLB is what a stream pays for (PyTorch's weights are its own ``[N, K]`` copies, and v5's its packed copies, in
ordinary pages).

    TVM_NUM_THREADS=2 python examples/benchmarks/weight_stream.py [--layers 48] [--shape 128 768 768]
        [--configs "((1,16,8),(4,192),(16,1,48))" ...] [--versions 5] [--rounds 5] [--huge-pages]

Prints the CPU, then GFLOP/s per template and config: warm, stream best / median.
"""

from __future__ import annotations

import argparse
import ast
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import tvm

from schedule_gym.backends.tvm.targets import host_llvm_target
from schedule_gym.hardware import cpu_identity
from schedule_gym.operators import get_workload, packed_task
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import dense
from schedule_gym.templates import get_template
from schedule_gym.templates.layouts import kernel_inputs
from vector_split import build_checked, tvm_threads  # noqa: E402  (examples/benchmarks, the script's own folder)

DEFAULT_CONFIGS = ["((1,16,8),(4,192),(16,1,48))", "((1,16,8),(4,192),(2,8,48))", "((1,16,8),(1,768),(16,1,48))",
                   "((1,32,4),(12,64),(4,2,96))"]


def _stream(call, weights, passes: int) -> list[float]:
    """Seconds per call of ``passes`` timed passes over ``weights`` (after two untimed ones)."""
    times = []
    for p in range(passes + 2):
        start = time.perf_counter()
        for w in weights:
            call(w)
        if p >= 2:
            times.append((time.perf_counter() - start) / len(weights))
    return times


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs=3, type=int, default=[128, 768, 768], metavar=("M", "K", "N"))
    parser.add_argument("--layers", type=int, default=48, help="distinct weight matrices a pass calls in turn")
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of timing; each times every kernel in turn (its passes) before the next")
    parser.add_argument("--huge-pages", action="store_true", help="the weights in one buffer backed by 2 MB pages")
    parser.add_argument("--configs", nargs="+", default=None,
                        help="configs of the dense task's packed form (default: four for 128x768x768)")
    parser.add_argument("--versions", nargs="+", type=int, choices=(3, 4, 5, 7, 8), default=[3, 4, 5, 7, 8],
                        help="the dense template's versions to time (default: all five)")
    args = parser.parse_args()
    if args.layers < 1 or args.passes < 1 or args.rounds < 1:
        parser.error("--layers, --passes and --rounds must be at least 1")
    m, k, n = args.shape
    threads = tvm_threads()
    task = packed_task(dense(m, k, n, bias=True))
    space = TileSpace(task)
    try:
        configs = [space.validate(ast.literal_eval(c)) for c in (args.configs or DEFAULT_CONFIGS)]
    except (ValueError, SyntaxError) as exc:
        parser.error(f"--configs: {exc}")
    workload = get_workload(task.op)
    inputs = workload.inputs(task)
    expected, tolerance = workload.reference(task, inputs)
    dev = tvm.cpu()
    x, w0, bias = (tvm.runtime.tensor(a, dev) for a in inputs)
    out = tvm.runtime.empty(workload.output_shape(task), task.dtype, dev)
    rng = np.random.default_rng(0)
    arrays = [inputs[1]] + [rng.standard_normal((k, n)).astype(task.dtype) for _ in range(args.layers - 1)]
    if args.huge_pages:
        raw = np.empty(args.layers * k * n + 1024, dtype=task.dtype)  # over 4 MB: NumPy madvises huge pages
        start = (-raw.ctypes.data % 4096) // raw.itemsize  # DLPack needs 64-byte alignment; take a page's
        pool = raw[start:start + args.layers * k * n].reshape(args.layers, k, n)
        pool[...] = np.stack(arrays)
        weights = [tvm.runtime.from_dlpack(pool[i]) for i in range(args.layers)]
        w0 = weights[0]
        meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
        huge = next((line.split(":")[1].strip() for line in meminfo.splitlines()
                     if line.startswith("AnonHugePages")), "?")
        print(f"weights in one buffer; the process's anonymous huge pages (AnonHugePages): {huge}")
    else:
        weights = [w0] + [tvm.runtime.tensor(a, dev) for a in arrays[1:]]
    total = np.concatenate([a.ravel() for a in arrays])
    copy = np.empty_like(total)
    seconds = min(_timed(lambda: np.copyto(copy, total)) for _ in range(5))
    print(f"NumPy copies the {total.nbytes / 2**20:.0f} MiB of weights at {total.nbytes / seconds / 1e9:.1f} GB/s "
          "(bytes copied, one thread)")
    del total, copy
    target = tvm.target.Target(host_llvm_target(threads))
    flops = 2 * m * k * n / 1e9
    print(f"CPU: {cpu_identity().describe()}; {threads} threads; dense {m}x{k}x{n}+bias, {args.layers} weight matrices "
          f"({args.layers * k * n * 4 / 2**20:.0f} MiB) a pass; GFLOP/s: warm, stream best / median of {args.passes}")
    kernels = []  # per config, its (version, kernel, weights as the kernel takes them)
    with tempfile.TemporaryDirectory() as tmp:
        for i, config in enumerate(configs):
            laid_out_by_layout = {(): weights}  # versions with the same layout (v5's, v7's, v8's) share one copy
            kernels.append([])
            for version in args.versions:
                template = get_template(f"dense-cpu-v{version}")
                layout = template.input_layout(task, config)
                if layout not in laid_out_by_layout:  # each weight as the kernel takes it (its input 1)
                    laid_out_by_layout[layout] = [
                        tvm.runtime.tensor(kernel_inputs([inputs[0], w.numpy(), inputs[2]], layout)[1], dev)
                        for w in weights]
                laid_out = laid_out_by_layout[layout]
                kernel = build_checked(template.schedule(task, config), target, Path(tmp) / f"v{version}_{i}.so",
                                       [x, laid_out[0], bias, out], expected, tolerance, f"v{version} {config}")
                kernels[i].append((version, kernel, laid_out))
        warm = [[[] for _ in row] for row in kernels]  # seconds per config, version and round
        stream = [[[] for _ in row] for row in kernels]
        for _ in range(args.rounds):  # every kernel once a round, so that the machine's drift meets them all
            for i, row in enumerate(kernels):
                for j, (_, kernel, laid_out) in enumerate(row):
                    main_fn = kernel["main"]
                    warm[i][j].append(min(kernel.time_evaluator("main", dev, number=20, repeat=5)(
                        x, laid_out[0], bias, out).results))
                    stream[i][j].extend(_stream(lambda w: main_fn(x, w, bias, out), laid_out, args.passes))
        for i, config in enumerate(configs):
            cells = [f"v{version} {flops / min(warm[i][j]):4.0f}, {flops / min(stream[i][j]):4.0f} / "
                     f"{flops / statistics.median(stream[i][j]):4.0f}" for j, (version, _, _) in enumerate(kernels[i])]
            print(f"{str(config):>32}  " + "   ".join(cells), flush=True)

    import torch

    torch.set_num_threads(threads)
    tx, tb = torch.from_numpy(inputs[0]), torch.from_numpy(inputs[2])
    tws = [torch.from_numpy(w.numpy().T.copy()) for w in weights]  # F.linear takes [N, K]
    with torch.no_grad():
        warm = min(min(_stream(lambda w: torch.nn.functional.linear(tx, w, tb), tws[:1] * 20, 1)) for _ in range(5))
        stream = _stream(lambda w: torch.nn.functional.linear(tx, w, tb), tws, args.passes)
    print(f"{'torch F.linear ' + torch.__version__:>32}  {flops / warm:4.0f}, {flops / min(stream):4.0f} / "
          f"{flops / statistics.median(stream):4.0f}")


if __name__ == "__main__":
    main()
