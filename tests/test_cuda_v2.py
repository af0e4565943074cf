"""The ``gemm-cuda-v2`` template: it builds for sm_90 on odd shapes too, its generated CUDA has the features
it claims (float4 global-to-shared copies, padded and double-buffered shared tiles, a pipelined k loop),
nvcc compiles it, configs it cannot run are refused with precise errors, and (where a GPU is present) its
kernels match NumPy and are timed next to v1 and cuBLAS."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import batch_matmul, gemm
from schedule_gym.templates import get_template, template_for

pytestmark = pytest.mark.tvm
tvm = pytest.importorskip("tvm")

from schedule_gym.backends.tvm.builder import compile_cuda_source  # noqa: E402
from schedule_gym.backends.tvm.targets import resolve_target  # noqa: E402
from schedule_gym.templates.cuda_v2 import (  # noqa: E402
    MAX_SHARED_BYTES,
    CudaV2Options,
    plan_gemm_cuda_v2,
    schedule_gemm_cuda_v2,
)
from schedule_gym.operators import get_workload  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}
V2 = get_template("gemm-cuda-v2")

#: 128 x 128 block tile, 256 threads, 8 x 8 accumulators a thread (2 x 2 vthreads of 4 x 4), k tile 16
BIG = (gemm(1024, 1024, 1024), ((8, 2, 16, 4), (64, 16), (8, 2, 16, 4)))
CASES = [
    BIG,
    (gemm(1024, 1024, 1024), ((16, 2, 32, 1), (64, 16), (8, 4, 16, 2))),  # v1's best on an H100
    (gemm(96, 36, 40), ((3, 2, 4, 4), (3, 12), (1, 2, 5, 4))),  # 20 threads: the last copy is predicated
    (gemm(100, 75, 60), ((5, 2, 10, 1), (5, 15), (1, 3, 10, 2))),  # A rows of 75: scalar A copies
    (gemm(127, 33, 65), ((1, 1, 127, 1), (11, 3), (13, 1, 5, 1))),  # primes: all copies scalar
    (gemm(64, 64, 64), ((1, 1, 8, 8), (1, 64), (1, 1, 8, 8))),  # one k step: nothing to pipeline
]
IDS = ["1024-128x128", "1024-v1-best", "96x36x40", "100x75x60", "127x33x65", "64-one-k-step"]


def _source(task, config, options=CudaV2Options()) -> str:
    mod = schedule_gemm_cuda_v2(task, config, options)
    return tvm.compile(mod, target=SM90).mod.imports[0].inspect_source("")


def _shared_sizes(source: str) -> dict[str, int]:
    declared = re.findall(r"__shared__ alignas\(\d+\) float (\w)_shared_ptr\[(\d+)\]", source)
    return {name: int(size) for name, size in declared}


def test_v2_is_registered_next_to_v1_and_is_not_the_default():
    assert V2.version == "gemm-cuda-v2" and V2.target_kind == "cuda" and V2.ops == ("gemm",)
    assert template_for("gemm", "cuda").version == "gemm-cuda-v1"
    assert get_template("gemm-cuda").version == "gemm-cuda-v1"


@pytest.mark.parametrize("task, config", CASES, ids=IDS)
def test_v2_builds_with_the_shared_tiles_its_plan_states(task, config):
    plan = plan_gemm_cuda_v2(task, config)
    source = tvm.compile(V2.schedule(task, config), target=SM90).mod.imports[0].inspect_source("")
    assert "__global__" in source
    assert f"__launch_bounds__({plan.threads})" in source
    # one buffer per pipeline stage, each a block tile with padded rows
    assert _shared_sizes(source) == {
        "A": plan.stages * plan.block_m * plan.row_a,
        "B": plan.stages * plan.k_tile * plan.row_b,
    }
    assert plan.shared_bytes == 4 * sum(_shared_sizes(source).values())
    for operand, width in (("A", plan.vector_a), ("B", plan.vector_b)):
        vector = rf"\*\(float{width}\*\)"
        vector_copy = re.compile(rf"{vector}\({operand}_shared_ptr \+ .*\) = {vector}\({operand}_ptr \+")
        assert (vector_copy.search(source) is not None) == (width > 1), (operand, width)
    if plan.vector_a == plan.vector_b == plan.vector_c == 1:
        assert "float4" not in source and "float2" not in source


def test_the_generated_cuda_has_float4_copies_padded_rows_and_a_pipelined_double_buffer():
    task, config = BIG
    plan = plan_gemm_cuda_v2(task, config)
    assert (plan.block_m, plan.block_n, plan.k_tile, plan.threads, plan.registers) == (128, 128, 16, 256, 64)
    assert (plan.vector_a, plan.vector_b, plan.vector_c) == (4, 4, 4)
    assert (plan.row_a, plan.row_b, plan.stages) == (20, 132, 2)  # rows of 16 and 128 floats padded by 4
    source = _source(task, config)
    assert _shared_sizes(source) == {"A": 2 * 128 * 20, "B": 2 * 16 * 132}
    # float4 global-to-shared copies of both operands, and float4 stores of C
    assert re.search(r"\*\(float4\*\)\(A_shared_ptr \+ .*\) = \*\(float4\*\)\(A_ptr \+", source)
    assert re.search(r"\*\(float4\*\)\(B_shared_ptr \+ .*\) = \*\(float4\*\)\(B_ptr \+", source)
    assert re.search(r"\*\(float4\*\)\(C_ptr \+ .*\) = \*\(float4\*\)\(C_local_ptr \+", source)
    # the pipeline: a prologue copies step 0; the loop over the other 63 steps copies step k_0 + 1 into the
    # other half of each double buffer, then computes step k_0 from the half copied before; an epilogue
    # computes the last step
    loop = source.index("for (int k_0 = 0; k_0 < 63; ++k_0)")
    prologue = source[:loop]
    assert "A_shared_ptr + " in prologue and "B_shared_ptr + " in prologue
    assert "C_local_ptr[0] = (C_local_ptr[0] +" not in prologue
    body = source[loop:]
    assert re.search(r"\*\(float4\*\)\(A_shared_ptr \+ \(*\(\(k_0 \+ 1\) & 1\) \* 2560\)", body)
    assert re.search(r"\*\(float4\*\)\(B_shared_ptr \+ \(*\(\(k_0 \+ 1\) & 1\) \* 2112\)", body)
    assert re.search(r"A_shared_ptr\[\(*\(k_0 & 1\) \* 2560\)", body)
    assert re.search(r"B_shared_ptr\[\(*\(k_0 & 1\) \* 2112\)", body)
    assert body.count("__syncthreads()") >= 2


def test_the_switches_remove_their_features():
    task, config = BIG
    plain = _source(task, config, CudaV2Options(vector_width=1, storage_align=False, pipeline=False, unroll_max_step=0))
    assert _shared_sizes(plain) == {"A": 128 * 16, "B": 16 * 128}  # one stage, unpadded
    assert "float4" not in plain and "(k_0 + 1) & 1" not in plain
    assert _shared_sizes(_source(task, config, CudaV2Options(pipeline=False))) == {"A": 128 * 20, "B": 16 * 132}
    unpadded = _source(task, config, CudaV2Options(storage_align=False))
    assert _shared_sizes(unpadded) == {"A": 2 * 128 * 16, "B": 2 * 16 * 128}
    with pytest.raises(ValueError, match="vector_width must be 1, 2 or 4 elements, got 8"):
        CudaV2Options(vector_width=8)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("task, config", [CASES[i] for i in (0, 2, 4)], ids=[IDS[i] for i in (0, 2, 4)])
def test_nvcc_compiles_v2_kernels(task, config):
    with tvm.target.Target(SM90):  # compile_cuda_source reads the arch of the current target (as the backend calls it)
        assert len(compile_cuda_source(tvm.compile(V2.schedule(task, config), target=SM90), SM90)) > 0


@pytest.mark.parametrize(
    "task, config, text",
    [
        (gemm(1024, 1024, 1024), ((8, 1, 32, 4), (64, 16), (8, 1, 64, 2)),
         "needs 2048 threads a block (m2 x n2 = 32 x 64); CUDA allows 1024"),
        (gemm(65536 * 2, 4, 4), ((131072, 1, 1, 1), (1, 4), (1, 1, 4, 1)),
         "needs 131072 blocks on blockIdx.y (m0 = 131072); CUDA allows 65535"),
        (gemm(1024, 1024, 1024), ((4, 2, 16, 8), (32, 32), (8, 2, 16, 4)),
         "needs 107520 bytes of shared memory a block (2 stage(s) x 4 bytes x (A tile 256 x 36 + B tile 32 x 132), "
         "rows padded); CUDA allows 49152 without opting in"),
        (gemm(1024, 1024, 1024), ((4, 1, 16, 16), (1, 1024), (4, 1, 16, 16)),
         "needs 2117632 bytes of shared memory a block (1 stage(s) x 4 bytes x "
         "(A tile 256 x 1028 + B tile 1024 x 260), rows padded); CUDA allows 49152 without opting in"),
    ],
    ids=["threads", "blocks", "shared-pipelined", "shared-one-step"],
)
def test_configs_v2_cannot_run_are_refused_with_precise_errors(task, config, text):
    with pytest.raises(ValueError) as info:
        V2.schedule(task, config)
    assert str(info.value) == f"config {config} {text}"


def test_other_tasks_and_splits_are_refused():
    with pytest.raises(ValueError, match=r"builds gemm tasks, not 'batch_matmul'"):
        V2.schedule(batch_matmul(2, 8, 8, 8), ((1, 1, 2, 1), (1, 1, 8, 1), (1, 8), (1, 1, 8, 1)))
    task = gemm(64, 64, 64, d_k=3)
    with pytest.raises(ValueError, match=r"needs splits \(4, 2, 4\) \(m and n: block, vthread, thread, register; "
                                         r"k: steps, tile\), got \(4, 3, 4\)"):
        V2.schedule(task, TileSpace(task).initial_config())


@pytest.mark.parametrize("task", [gemm(1024, 1024, 1024), gemm(120, 99, 200)], ids=["1024", "120x99x200"])
def test_every_sampled_config_builds_or_is_refused_with_a_stated_limit(task):
    """Never a crash: a seeded sample of the whole tile space either lowers to CUDA or is refused."""
    space, rng = TileSpace(task), np.random.default_rng(0)
    built = refused = 0
    for _ in range(15):
        config = space.sample(rng)
        try:
            mod = V2.schedule(task, config)
        except ValueError as exc:
            assert re.search(r"CUDA allows \d+", str(exc)), exc
            refused += 1
            continue
        plan = plan_gemm_cuda_v2(task, config)
        assert plan.threads <= 1024 and plan.shared_bytes <= MAX_SHARED_BYTES
        assert "__global__" in tvm.compile(mod, target=SM90).mod.imports[0].inspect_source("")
        built += 1
    assert built and refused


# ----------------------------------------------------------------------------------------------- GPU only
#: hand-picked 1024^3 configs timed on a GPU (the same as examples/benchmarks/cublas_gemm.py's)
GPU_CONFIGS = [
    CASES[0][1],
    CASES[1][1],
    ((8, 2, 16, 4), (128, 8), (8, 2, 16, 4)),
    ((16, 2, 16, 2), (64, 16), (8, 2, 16, 4)),
]


def _run(mod, task, dev):
    """The kernel's output on the workload's seeded inputs (checked against the float64 reference) and its
    median time in seconds."""
    workload = get_workload("gemm")
    inputs = workload.inputs(task)
    expected, tol = workload.reference(task, inputs)
    output = tvm.runtime.empty(workload.output_shape(task), task.dtype, dev)
    args = [tvm.runtime.tensor(x, dev) for x in inputs] + [output]
    kernel = tvm.compile(mod, target=tvm.target.Target(resolve_target("cuda"))).jit()  # this GPU's arch
    kernel["main"](*args)
    dev.sync()
    problem = workload.check(task, args[-1].numpy(), expected, tol)
    timer = kernel.time_evaluator("main", dev, number=20, repeat=5, min_repeat_ms=50)
    return problem, float(np.median(timer(*args).results))


@pytest.mark.skipif(not tvm.cuda(0).exist, reason="no CUDA GPU here (the lent GPU machines run this)")
def test_v2_kernels_are_correct_and_timed_against_v1_and_cublas_where_a_gpu_is_present(record_property):
    """Correctness is asserted; the timings are reported (``-s`` prints them; also as test properties)."""
    dev = tvm.cuda(0)
    for task, config in CASES[2:]:  # odd shapes: correctness only
        problem, _ = _run(V2.schedule(task, config), task, dev)
        assert problem is None, (task.name, config, problem)
    task = gemm(1024, 1024, 1024)
    v2 = {}
    for config in GPU_CONFIGS:
        problem, seconds = _run(V2.schedule(task, config), task, dev)
        assert problem is None, (config, problem)
        v2[config] = seconds
    _, v1_s = _run(get_template("gemm-cuda").schedule(task, CASES[1][1]), task, dev)
    best = min(v2.values())
    record_property("v2_best_gflops", task.flops / best / 1e9)
    record_property("v1_gflops", task.flops / v1_s / 1e9)
    line = f"gemm 1024^3: v2 best {task.flops / best / 1e9:.0f} GFLOP/s, v1 at its H100 best config "
    line += f"{task.flops / v1_s / 1e9:.0f}"
    try:
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            a, b = (torch.rand(1024, 1024, device="cuda") for _ in range(2))
            for _ in range(10):
                a @ b
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(100):
                a @ b
            end.record()
            torch.cuda.synchronize()
            cublas_s = start.elapsed_time(end) / 100 / 1e3
            record_property("cublas_fp32_gflops", task.flops / cublas_s / 1e9)
            line += f", cuBLAS FP32 {task.flops / cublas_s / 1e9:.0f} ({cublas_s / best:.0%} of it for v2)"
        else:
            line += " (torch without CUDA: cuBLAS not timed)"
    except ImportError:
        line += " (no torch: cuBLAS not timed)"
    print(line)
