"""``conv2d-cpu-v5`` (and ``-v3``, ``-v2``): an NHWC convolution as a packed, register-blocked implicit GEMM
(BLIS's structure). The versions differ as the matmul templates' do (:mod:`~schedule_gym.templates.vectors`): v3
writes a micro-tile row's ``NR`` output channels out as whole vectors; v5 takes its weight packed already, as
dense's v5 does (:mod:`~schedule_gym.templates.layouts`; there is no v4, the matmul templates' change to ``A``,
which this template does not pack), and builds depthwise convolutions too. v5 is conv2d's packed template, v3 and v2
stay selectable by name.

Seen as a GEMM, a convolution's rows are output pixels (``w`` inside ``h``), its columns output channels
``co``, its reduction the window and input channels ``rh, rw, rc``; ``gemm-cpu-v3``
(:mod:`~schedule_gym.templates.packed_matmul`) shows the structure. From a task in the operator's own
definition (NHWC input ``I``, HWIO weights ``W``, bias, residual and activation, any stride, padding, dilation;
groups of at least ``schedule_gym.operators.conv2d.MIN_PACKED_GROUP_CHANNELS`` output channels, or depthwise: below)
whose splits are
``n 1, h 2, w 3, co 3, rh 1, rw 1, rc 2`` in the loop order
``n0 h0 w0 co0 | rc0 co1 h1 w1 rh0 rw0 rc1 w2 co2`` (conv2d's packed form, ``schedule_gym.operators.conv2d.PACKED``;
``schedule_gym.operators.packed_task`` makes one) and a config
``((n0,), (h0, h1), (w0, w1, w2), (co0, co1, co2), (rh0,), (rw0,), (rc0, rc1))``:

==========  ===========  ======================================================================
factor      GEMM name    meaning
==========  ===========  ======================================================================
``h0, w0``  M / MC       blocks of ``h1`` output rows x ``w1 * w2`` columns; with ``n0, co0`` fused and
                         run in parallel
``h1, w1``  MC / MR      micro-tiles in a block (inside ``co1``: one weight sliver meets every pixel tile)
``w2``      MR           output columns of the register micro-tile (unrolled)
``co0``     N / NC       blocks of ``NC = co1 * co2`` output channels
``co1``     NC / NR      micro-tiles in a channel block
``co2``     NR           output channels of the micro-tile, vectorised (``NR / lanes`` vector registers)
``rc0``     K / KC       blocks of input channels; the output block accumulates in place across them
``rc1``     KC           input channels of one micro-kernel call, inside the window loops ``rh0, rw0``
==========  ===========  ======================================================================

The schedule, per parallel block and channel block ``rc0``:

* **pack W**: the ``KH x KW x KC x NC`` slab of weights is copied into ``[NC/NR, KH, KW, KC, NR]``, so a
  micro-kernel reads its sliver as one contiguous stream (vectorised along ``NR``); v5's kernel takes the whole
  weight so laid out (``[CO/NR, KH, KW, CI, NR]``, :func:`tiled_inputs`) and copies nothing;
* **pad / gather the input**: the padded input window the block reads (``h1`` rows, the columns of
  ``w1 * w2`` outputs and their halo, ``KC`` channels) is computed into a per-block buffer, so the
  micro-kernel's loads carry no padding condition (v1 folds the padding into every load);
* **micro-kernel**: for each ``(co1, h1, w1)`` the ``MR x NR`` tile of outputs is updated over
  ``KH * KW * KC`` steps (``rh0 rw0 rc1``), each step ``MR`` broadcasts of the input and ``NR / lanes``
  loads of packed weights; the tile's addresses do not depend on those loops, so it stays in registers;
* the initialisation is hoisted above ``rc0``; a bias and activation run on each finished block.

A grouped convolution (ResNeXt's) is the same GEMM with a block-diagonal weight: output channel ``co`` reads the
input channels of its group, ``(co // (CO / groups)) * CI / groups + rc``, and ``rc`` runs over one group's
``CI / groups`` channels. Where ``NR`` divides a group's output channels the micro-tile keeps to one group and
each step broadcasts one input value, as with ``groups == 1``; a tile across groups reads a different channel in
each lane, which is built and correct but several times slower (the analytical picks,
:mod:`~schedule_gym.templates.analytical`, keep to one group). The weight slab is ``KH x KW x CI/groups x NC``.

A **depthwise** convolution (one input and one output channel a group: MobileNet's, EfficientNet's) is built by v5
alone. Its output channel ``co`` reads input channel ``co``, so a micro-tile's ``NR`` columns load ``NR`` adjacent
input channels as whole vectors (no broadcast: each step is ``MR * NR / lanes`` loads of the input, ``NR / lanes``
of the weight and as many FMAs), and its reduction is the window alone (``rc`` has extent 1). The same tile space
and loop nest, with two changes where the reduction is so short: the unit ``rc0`` moves below the micro-tile loops,
so that each ``MR x NR`` tile is zeroed, reduced over the ``KH x KW`` unrolled steps (LLVM can reuse an input vector
across the taps that read it) and finished (bias, activation, residual) before the next, its accumulators never
leaving the registers, where the GEMM form stores its block after every ``rc0`` step and finishes it once; and
the padded input is copied per ``NR``-channel sliver (``co1``), the window that sliver's tiles read, instead of
for the whole block at once. v2 and v3 build no depthwise convolution (their records of conv2d stay what they
measured), and the direct template ``conv2d-cpu`` still builds the task's direct form.

The micro-tile that fits the registers is as for GEMM: ``MR * NR / lanes + NR / lanes + 1 <= 16`` ymm
registers on AVX2, ``<= 32`` zmm on AVX-512. Each factor tuple multiplies to its extent, so odd extents
(7x7 feature maps) restrict the tile to their divisors.

TVM is imported lazily: importing this module compiles nothing.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.operators import get_workload
from schedule_gym.operators.conv2d import PACKED, is_depthwise
from schedule_gym.tasks.task import Task
from schedule_gym.templates.layouts import PREPACKED_WEIGHTS
from schedule_gym.templates.vectors import vector_width, vectorize_columns
from schedule_gym.types import Config

__all__ = ["VERSIONS", "WEIGHT_PACKED_VERSIONS", "check_task", "schedule_packed_conv2d", "tiled_inputs"]

#: The versions this module builds (the matmul templates' v4 changes how they treat ``A``, which this one does
#: not pack: conv2d has no v4; v5 takes its weight packed).
VERSIONS = (2, 3, PREPACKED_WEIGHTS)
#: The versions whose kernels take their weight packed (:mod:`~schedule_gym.templates.layouts`).
WEIGHT_PACKED_VERSIONS = (PREPACKED_WEIGHTS,)


def tiled_inputs(task: Task, config: Config, version: int) -> tuple[tuple[int, int], ...]:
    """``(input index, NR)`` for each input the kernel of ``config`` takes with its columns tiled
    (:func:`~schedule_gym.templates.layouts.tile_columns`): v5's weight (the input after ``I``), nothing in the
    other versions."""
    if version != PREPACKED_WEIGHTS:
        return ()
    return ((1, dict(zip(task.dim_names, config))["co"][2]),)


def check_task(task: Task, version: int = 3) -> None:
    """Raise ValueError naming what is wrong if ``task`` is not a task the template of ``version`` can build
    (conv2d's packed form; a depthwise convolution, v5 only)."""
    template = f"conv2d-cpu-v{version}"
    if version not in VERSIONS:
        raise ValueError(f"the packed conv2d template has versions {', '.join(map(str, VERSIONS))}, not {version!r}")
    if task.op != "conv2d":
        raise ValueError(f"template {template!r} builds conv2d tasks, not {task.op!r} ({task.name})")
    PACKED.check_operator(task)
    PACKED.check_form(task, template, ", ".join(task.dim_names))
    if is_depthwise(task) and version != PREPACKED_WEIGHTS:
        raise ValueError(f"template {template!r} builds no depthwise convolution ({task.name}); "
                         f"conv2d-cpu-v{PREPACKED_WEIGHTS} does")


def schedule_packed_conv2d(task: Task, config: Config, version: int = 3) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``, as the template of
    ``version`` (2, 3 or 5) builds it."""
    import tvm
    import tvm.s_tir as s_tir

    check_task(task, version)
    f = dict(zip(task.dim_names, config))
    (h0, h1), (w0, w1, w2), (co0, co1, nr), (rc0, rc1) = f["h"], f["w"], f["co"], f["rc"]
    width = vector_width(nr, task.dtype, version)
    depthwise = is_depthwise(task)
    workload = get_workload(task.op)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    block = sch.get_sblock(workload.main_block)
    axes = dict(zip(workload.block_dims(task), sch.get_loops(block)))
    lh0, lh1 = sch.split(axes["h"], [h0, h1])
    lw0, lw1, lw2 = sch.split(axes["w"], [w0, w1, w2])
    lco0, lco1, lco2 = sch.split(axes["co"], [co0, co1, nr])
    lrc0, lrc1 = sch.split(axes["rc"], [rc0, rc1])
    window = (axes["rh"], axes["rw"], lrc1, lw2, lco2)
    if depthwise:  # rc0 has extent 1: below the micro-tiles, so that each tile's reduction is whole (see above)
        sch.reorder(axes["n"], lh0, lw0, lco0, lco1, lh1, lw1, lrc0, *window)
    else:
        sch.reorder(axes["n"], lh0, lw0, lco0, lrc0, lco1, lh1, lw1, *window)

    # Pack the KH x KW x KC x NC slab of W[rh, rw, rc, co] as [NC/NR][KH][KW][KC][NR], once per block and rc0; v5's
    # W is the whole weight so laid out.
    reads = [region.source.name for region in sch.get(block).reads]  # TVM 0.27: a TensorRegion's buffer is .source
    if version == PREPACKED_WEIGHTS:
        sch.transform_layout(block, ("read", reads.index("W")), lambda a, b, c, d: (d // nr, a, b, c, d % nr))
    else:
        pack_w = sch.cache_read(block, reads.index("W"), "global")
        sch.transform_layout(pack_w, ("write", 0), lambda a, b, c, d: (d // nr, a, b, c, d % nr))
        sch.compute_at(pack_w, lrc0, preserve_unit_loops=True)
        prh, prw, prc, pco = sch.get_loops(pack_w)[-4:]
        pco_o, pco_i = sch.split(pco, [co1, nr])
        sch.reorder(pco_o, prh, prw, prc, pco_i)
        vectorize_columns(sch, pco_i, width)
    # The padded input window, computed per block and rc0 (no condition left in the kernel); a depthwise
    # convolution's per co1, the window that one NR-channel sliver's tiles read.
    if "pad" in reads:
        pad = sch.get_sblock("pad")
        sch.compute_at(pad, lco1 if depthwise else lrc0, preserve_unit_loops=True)
        sch.vectorize(sch.get_loops(pad)[-1])

    fused = sch.fuse(axes["n"], lh0, lw0, lco0)
    for name in workload.epilogues(task):  # bias, activation on each finished block (tile), vectorised along NR
        epilogue = sch.get_sblock(name)
        sch.reverse_compute_at(epilogue, lw1 if depthwise else fused, preserve_unit_loops=True)
        if depthwise:  # the MR x NR tile: MR unrolled rows of NR / width vectors, read from the registers
            rows, columns = sch.get_loops(epilogue)[-2:]
            sch.unroll(rows)
            vectorize_columns(sch, columns, width)
        else:
            sch.vectorize(sch.split(sch.get_loops(epilogue)[-1], [None, width])[1])
    sch.parallel(fused)
    sch.unroll(lw2)
    vectorize_columns(sch, lco2, width)
    if depthwise:  # the window's KH x KW steps unrolled: LLVM can reuse an input vector across the taps that read it
        sch.unroll(axes["rw"])
        sch.unroll(axes["rh"])
    sch.decompose_reduction(block, lrc0)
    return sch.mod
