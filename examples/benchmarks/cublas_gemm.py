"""GEMM 1024^3 FP32 on a CUDA GPU: cuBLAS (through torch; FP32 with TF32 off, and TF32), then TVM's
``gemm-cuda-v1`` and ``gemm-cuda-v2`` templates next to it (README, "On a GPU").

cuBLAS is CUDA-event timed (7 repeats of 100 calls). The TVM kernels are timed with ``time_evaluator``
(20 calls a repeat, 7 repeats, median) after their output is checked against the float64 reference:
v1 at its best H100 config, v2 at hand-picked configs plus ``--search`` random configs of its tile space
(the ones it does not refuse; a kernel that fails to build, launch or check is reported and skipped).
A random config is first timed for 3 single calls: one over ``--censor`` times the best v2 kernel so far is
reported with that time and not timed in full (some take 20-95 ms a call, which 7 x 20 calls make seconds).

    python examples/benchmarks/cublas_gemm.py --search 30
"""
import argparse
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--search", type=int, default=20, help="random v2 configs to time besides the hand-picked ones")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--censor", type=float, default=2.0,
                    help="a random config slower than this many times the best v2 so far is not timed in full")
args = parser.parse_args()
FLOPS = 2 * 1024**3

# --- cuBLAS through torch
cublas_fp32_s = None
try:
    import torch
except ImportError:
    torch = None
if torch is not None and torch.cuda.is_available():
    torch.manual_seed(0)
    a = torch.rand(1024, 1024, device="cuda") * 2 - 1
    b = torch.rand(1024, 1024, device="cuda") * 2 - 1
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for _ in range(20):
            a @ b
        times = []
        for rep in range(7):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(100):
                a @ b
            e.record(); torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / 100 / 1e3)
        times.sort()
        if not tf32:
            cublas_fp32_s = times[0]
        print(f"torch {torch.__version__} cuBLAS {'TF32' if tf32 else 'FP32'}: best {FLOPS/times[0]/1e9:.0f} GFLOP/s "
              f"({times[0]*1e6:.1f} us), median {FLOPS/times[3]/1e9:.0f} GFLOP/s ({times[3]*1e6:.1f} us)")
else:
    print("cuBLAS: not timed (torch with CUDA is not installed)")

# --- TVM templates v1 and v2
try:
    import numpy as np
    import tvm
except ImportError:
    raise SystemExit("TVM is not installed: v1 and v2 not timed")
if not tvm.cuda(0).exist:
    raise SystemExit("no CUDA GPU: v1 and v2 not timed")

from schedule_gym.backends.tvm.targets import resolve_target
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import gemm
from schedule_gym.templates import get_template
from schedule_gym.templates.cuda_v2 import plan_gemm_cuda_v2
from schedule_gym.operators import get_workload

task = gemm(1024, 1024, 1024)
dev = tvm.cuda(0)
target = tvm.target.Target(resolve_target("cuda"))  # this GPU's arch
workload = get_workload("gemm")
inputs = workload.inputs(task)
expected, tol = workload.reference(task, inputs)
tensors = [tvm.runtime.tensor(x, dev) for x in inputs] + [tvm.runtime.empty((1024, 1024), "float32", dev)]
print(f"TVM {tvm.__version__}, target {target}")


def time_config(template: str, config, censor_above_s: float | None = None) -> float | None:
    """Median seconds of one call of ``config``'s kernel, or None (and why) if it fails or is wrong; with
    ``censor_above_s``, a kernel whose best of 3 single calls is slower is reported and not timed in full."""
    try:
        t0 = time.perf_counter()
        kernel = tvm.compile(get_template(template).schedule(task, config), target=target).jit()
        kernel["main"](*tensors)
        dev.sync()
        build_s = time.perf_counter() - t0
        problem = workload.check(task, tensors[-1].numpy(), expected, tol)
        if problem:
            print(f"  {template} {config}: {problem}")
            return None
        if censor_above_s is not None:
            probe = min(kernel.time_evaluator("main", dev, number=1, repeat=3)(*tensors).results)
            if probe > censor_above_s:
                print(f"  {template} {config}: {FLOPS / probe / 1e9:,.0f} GFLOP/s in 3 single calls, over "
                      f"{args.censor:g}x the best so far: not timed in full")
                return None
        seconds = float(np.median(kernel.time_evaluator("main", dev, number=20, repeat=7)(*tensors).results))
    except Exception as exc:  # a failed build or launch is a result here, as in the backend
        print(f"  {template} {config}: failed: {str(exc).strip().splitlines()[-1][:200]}")
        return None
    share = f", {cublas_fp32_s / seconds:.0%} of cuBLAS FP32" if cublas_fp32_s else ""
    gflops = FLOPS / seconds / 1e9
    print(f"  {template} {config}: {gflops:,.0f} GFLOP/s ({seconds * 1e6:.1f} us{share}; build {build_s:.1f} s)")
    return seconds


V1_BEST = ((16, 2, 32, 1), (64, 16), (8, 4, 16, 2))  # v1's best on an H100 (README, "On a GPU")
V2_HAND = [
    ((8, 2, 16, 4), (64, 16), (8, 2, 16, 4)),  # 128 x 128 block tile, 256 threads, 8 x 8 accumulators
    ((8, 2, 16, 4), (128, 8), (8, 2, 16, 4)),  # ... with a k tile of 8
    ((16, 2, 16, 2), (64, 16), (8, 2, 16, 4)),  # 64 x 128, 4 x 8 accumulators
    ((8, 2, 8, 8), (128, 8), (8, 2, 16, 4)),  # 128 x 128, 128 threads, 16 x 8 accumulators
    ((8, 1, 16, 8), (128, 8), (8, 1, 16, 8)),  # 128 x 128, 256 threads, one 8 x 8 micro-tile
    V1_BEST,
]
print("gemm-cuda-v1:")
v1 = time_config("gemm-cuda", V1_BEST)
print("gemm-cuda-v2, hand-picked:")
v2 = {config: time_config("gemm-cuda-v2", config) for config in V2_HAND}
print(f"gemm-cuda-v2, {args.search} random configs it does not refuse (seed {args.seed}):")
space, rng, tried = TileSpace(task), np.random.default_rng(args.seed), 0
while tried < args.search:
    config = space.sample(rng)
    try:
        plan_gemm_cuda_v2(task, config)
    except ValueError:
        continue
    tried += 1
    so_far = [t for t in v2.values() if t is not None]
    v2[config] = time_config("gemm-cuda-v2", config, args.censor * min(so_far) if so_far else None)
timed = {c: s for c, s in v2.items() if s is not None}
if timed:
    best = min(timed, key=timed.get)
    line = f"v2 best {best}: {FLOPS / timed[best] / 1e9:,.0f} GFLOP/s"
    if v1:
        line += f", {v1 / timed[best]:.2f}x v1"
    if cublas_fp32_s:
        line += f", {cublas_fp32_s / timed[best]:.0%} of cuBLAS FP32"
    print(line)
