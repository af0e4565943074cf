"""``gemm-cuda-v2``: a CUDA GEMM schedule with the techniques of TVM's ``s_tir.dlight`` GPU matmul and
MetaSchedule's CUDA rules, in the same tile space as ``gemm-cuda-v1``.

Tile space. The task's splits are v1's (4, 2, 4), so every config of a v1 task is a v2 config and the
environment, the agents and the records move in one space; only the meaning of the loops changes:

=========  =====================================================================================
factor     meaning
=========  =====================================================================================
``m0 n0``  blocks: ``blockIdx.y / x``
``m1 n1``  virtual threads (dlight's ``vthread_y / x``): ``m1 x n1`` strided register sub-tiles
``m2 n2``  threads of a block: ``threadIdx.y / x``
``m3 n3``  the register micro-tile of one virtual thread (dlight's ``micro_size_y / x``)
``k0``     steps of the k loop, software-pipelined
``k1``     the k tile staged in shared memory per step (dlight's ``micro_size_k``)
=========  =====================================================================================

A block computes a ``BM x BN`` tile of ``C`` (``BM = m1*m2*m3``, ``BN = n1*n2*n3``) with ``m2*n2``
threads; each thread accumulates ``(m1*m3) x (n1*n3)`` outputs in registers. Loop order
``m0 n0 | m1 n1 | m2 n2 | k0 | k1 | m3 n3``.

What the schedule adds to v1 (each a switch of :class:`CudaV2Options`; the registered template uses
the defaults):

* vectorised global-to-shared loads: each k step, all threads of the block copy ``A[BM, k1]`` and
  ``B[k1, BN]`` into shared memory cooperatively, ``w`` floats at a time (``float4`` for ``w = 4``);
* storage alignment of the shared tiles (``storage_align``, as dlight): each row is padded so that its
  length is ``w`` modulo 8 words, which keeps vector stores aligned and shifts successive rows across
  banks;
* software pipelining of the ``k0`` loop (``software_pipeline_stage = [0, 0, 1]``,
  ``software_pipeline_order = [0, 1, 2]`` over the A copy, the B copy and the compute; TVM doubles the
  shared buffers): the tiles of step ``k0 + 1`` are loaded while step ``k0`` computes (a one-step
  ``k0`` loop is not pipelined). The copies stay synchronous loads and stores: ``cp.async`` copies need
  the build's ``PassContext`` option ``tirx.use_async_copy``, which the backend does not set;
* dlight's register tiling: the accumulators in registers (``local``), ``pragma_auto_unroll_max_step``
  (256) / ``pragma_unroll_explicit`` on the ``n2`` (``threadIdx.x``) loop, so the inner loops of up to
  256 iterations in all (the vthread and micro-tile FMAs of one ``k1`` step) are unrolled into register
  code, and the write-back of the accumulators vectorised along ``n3``.

Vector widths are derived, never a factor: an operand's width ``w`` is the largest of 4, 2, 1 (at
most ``vector_width``) dividing both the tile's contiguous extent (``k1`` for A, ``BN`` for B) and the
global row length (``k`` for A, ``n`` for B, so every vector access is aligned); the write-back's
divides ``n3`` and ``n``. A config whose tiles or rows do not divide by 4 (as in odd shapes) still
builds, with narrower or scalar copies.

Illegal configs, refused at build time with a ``ValueError`` naming the factors and the limit (a
failed build, never a crash):

* more than 1,024 threads a block (``m2 x n2``), more than 1,024 on ``threadIdx.y`` / ``x``, or more
  than 65,535 blocks on ``blockIdx.y`` (``m0``): CUDA cannot launch them (the checks of v1,
  :mod:`schedule_gym.templates.cuda`);
* more static shared memory than :data:`MAX_SHARED_BYTES` (48 KiB, what CUDA allows a block without
  opting in): ``stages x 4 x (BM x padded k1 + k1 x padded BN)`` bytes, ``stages = 2`` when pipelined
  (``k0 > 1``).

Not refused: register tiles beyond nvcc's 255 registers a thread (``m1*m3*n1*n3`` accumulators) spill
to local memory (slow); tiles of many thousands of accumulators may exceed what nvcc or the launch
accepts, a failed measurement. TVM is imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from schedule_gym.operators import get_workload
from schedule_gym.tasks.task import Task
from schedule_gym.templates.cuda import _check_launch, cuda_axes
from schedule_gym.types import Config

__all__ = [
    "MAX_SHARED_BYTES",
    "TEMPLATE_VERSION",
    "CudaV2Options",
    "GemmCudaV2Plan",
    "plan_gemm_cuda_v2",
    "schedule_gemm_cuda_v2",
]

TEMPLATE_VERSION = "gemm-cuda-v2"
#: Static shared memory a block may use without opting in to more (nvcc: "too much shared data").
MAX_SHARED_BYTES = 48 * 1024
#: The splits of a v2 GEMM task: (block, vthread, thread, register) for m and n, (steps, tile) for k.
SPLITS = (4, 2, 4)
#: ``storage_align`` factor: a shared row's length is padded to ``w`` modulo this many words (dlight's).
ALIGN_FACTOR = 8


@dataclass(frozen=True)
class CudaV2Options:
    """Switches of the v2 schedule (the registered template uses the defaults; benchmarks and tests
    build variants to compare)."""

    #: the widest global-to-shared and write-back vector, in elements (4: ``float4``)
    vector_width: int = 4
    #: pad shared rows against bank conflicts (``storage_align``)
    storage_align: bool = True
    #: double-buffer the shared tiles and pipeline the ``k0`` loop
    pipeline: bool = True
    #: ``pragma_auto_unroll_max_step`` on the ``n2`` (``threadIdx.x``) loop (0: no unroll pragma)
    unroll_max_step: int = 256

    def __post_init__(self) -> None:
        if self.vector_width not in (1, 2, 4):
            raise ValueError(f"vector_width must be 1, 2 or 4 elements, got {self.vector_width!r}")
        if self.unroll_max_step < 0:
            raise ValueError(f"unroll_max_step must be >= 0, got {self.unroll_max_step!r}")


@dataclass(frozen=True)
class GemmCudaV2Plan:
    """What a config means for the v2 schedule: tile sizes, vector widths and shared memory."""

    block_m: int  # BM = m1 * m2 * m3
    block_n: int  # BN = n1 * n2 * n3
    k_tile: int  # k1
    threads: int  # m2 * n2
    registers: int  # accumulators a thread: m1 * m3 * n1 * n3
    vector_a: int  # elements per global-to-shared copy of A
    vector_b: int  # ... of B
    vector_c: int  # elements per write-back store of C
    row_a: int  # words per row of the shared A tile (k1, padded)
    row_b: int  # words per row of the shared B tile (BN, padded)
    stages: int  # shared buffers per operand: 2 when pipelined
    shared_bytes: int


def _vector_width(widest: int, *extents: int) -> int:
    return next(w for w in (4, 2, 1) if w <= widest and all(e % w == 0 for e in extents))


def _padded(length: int, vector: int, align: bool) -> int:
    """The row length ``storage_align(factor=ALIGN_FACTOR, offset=vector)`` gives a row of ``length``."""
    if not align:
        return length
    return length + (vector - length) % ALIGN_FACTOR


def plan_gemm_cuda_v2(task: Task, config: Config, options: CudaV2Options = CudaV2Options()) -> GemmCudaV2Plan:
    """The plan of ``config`` (a valid config of ``task``); raises ``ValueError`` naming the factors and
    the limit for configs CUDA cannot launch or whose tiles do not fit in shared memory."""
    if task.op != "gemm":
        raise ValueError(f"the GEMM CUDA v2 template builds gemm tasks, not {task.op!r} ({task.name})")
    if task.splits != SPLITS:
        raise ValueError(
            f"the GEMM CUDA v2 template needs splits {SPLITS} (m and n: block, vthread, thread, register; "
            f"k: steps, tile), got {task.splits} for {task.name!r}"
        )
    _check_launch(task, config, cuda_axes(task))
    (_, m1, m2, m3), (k0, k1), (_, n1, n2, n3) = config
    k, n = task.dim("k").extent, task.dim("n").extent
    block_m, block_n = m1 * m2 * m3, n1 * n2 * n3
    vector_a = _vector_width(options.vector_width, k1, k)
    vector_b = _vector_width(options.vector_width, block_n, n)
    row_a = _padded(k1, vector_a, options.storage_align)
    row_b = _padded(block_n, vector_b, options.storage_align)
    stages = 2 if options.pipeline and k0 > 1 else 1
    shared = stages * task.dtype_bytes * (block_m * row_a + k1 * row_b)
    if shared > MAX_SHARED_BYTES:
        raise ValueError(
            f"config {config} needs {shared} bytes of shared memory a block ({stages} stage(s) x "
            f"{task.dtype_bytes} bytes x (A tile {block_m} x {row_a} + B tile {k1} x {row_b}), rows padded); "
            f"CUDA allows {MAX_SHARED_BYTES} without opting in"
        )
    return GemmCudaV2Plan(
        block_m=block_m,
        block_n=block_n,
        k_tile=k1,
        threads=m2 * n2,
        registers=m1 * m3 * n1 * n3,
        vector_a=vector_a,
        vector_b=vector_b,
        vector_c=_vector_width(options.vector_width, n3, n),
        row_a=row_a,
        row_b=row_b,
        stages=stages,
        shared_bytes=shared,
    )


def schedule_gemm_cuda_v2(task: Task, config: Config, options: CudaV2Options = CudaV2Options()) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``."""
    import tvm
    import tvm.s_tir as s_tir

    plan = plan_gemm_cuda_v2(task, config, options)
    workload = get_workload(task.op)
    factors = dict(zip(task.dim_names, config))
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    block = sch.get_sblock(workload.main_block)
    axes = zip(workload.block_dims(task), sch.get_loops(block))
    loops = {name: sch.split(loop, list(factors[name])) for name, loop in axes}
    (m0, m1, m2, m3), (n0, n1, n2, n3), (k0, k1) = loops["m"], loops["n"], loops["k"]
    sch.reorder(m0, n0, m1, n1, m2, n2, k0, k1, m3, n3)
    sch.bind(m0, "blockIdx.y")
    sch.bind(n0, "blockIdx.x")
    sch.bind(m1, "vthread.y")
    sch.bind(n1, "vthread.x")
    sch.bind(m2, "threadIdx.y")
    sch.bind(n2, "threadIdx.x")
    if options.unroll_max_step:  # dlight: unroll the register tile's FMAs
        sch.annotate(n2, ann_key="pragma_auto_unroll_max_step", ann_val=options.unroll_max_step)
        sch.annotate(n2, ann_key="pragma_unroll_explicit", ann_val=1)

    # the accumulators live in registers; their write-back is vectorised along n3
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, n2, preserve_unit_loops=True)
    if plan.vector_c > 1:
        _, vec = sch.split(sch.get_loops(local)[-1], [None, plan.vector_c])
        sch.vectorize(vec)

    # one k step's A and B tiles staged in shared memory by all threads, w elements a copy
    thread_counts = (factors["m"][2], factors["n"][2])
    for operand, vector in ((0, plan.vector_a), (1, plan.vector_b)):
        shared = sch.cache_read(block, operand, "shared")
        sch.compute_at(shared, k0, preserve_unit_loops=True)
        tile = sch.get_loops(shared)[-2:]
        _, ty, tx, vec = sch.split(sch.fuse(*tile), [None, *thread_counts, vector])  # coalesced
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(vec)
        if options.storage_align:
            sch.storage_align(shared, 0, axis=0, factor=ALIGN_FACTOR, offset=vector)

    sch.decompose_reduction(block, k0)
    if plan.stages == 2:  # A copy, B copy: stage 0 (the next step); the k1 compute: stage 1
        sch.annotate(k0, ann_key="software_pipeline_stage", ann_val=[0, 0, 1])
        sch.annotate(k0, ann_key="software_pipeline_order", ann_val=[0, 1, 2])
    return sch.mod
