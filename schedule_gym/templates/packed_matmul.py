"""``gemm-cpu-v6``, ``dense-cpu-v8``, ``batch_matmul-cpu-v4`` (and their earlier versions): a register micro-kernel
(BLIS's structure) over packed panels of ``B`` for the matrix-multiply operators.

The versions build the same micro-kernels from the same tile space (v6 and v7 nest their block loops in other
orders, v8 adds prefetches to v7):

* v2 vectorises a micro-tile row's ``NR`` columns as one ``<NR x float>`` vector; v3 and v4 write them out
  as whole vectors (:mod:`~schedule_gym.templates.vectors`), which keeps ``NR = 48`` or 96 tiles in the
  registers on AVX-512;
* v2 and v3 pack ``A`` as well as ``B``; v4 reads ``A`` where it is. Packing ``A`` (BLIS's layout for the
  ``MR`` broadcasts of a step) transposes each ``MR x KC`` sliver with shuffles, once per column block
  ``n0``: with the few rows of a model's dense layers the parallel blocks are column blocks, so ``A`` is
  packed many times over and the copies cost more than the layout saves. Read in place, the ``MR`` rows a
  micro-kernel broadcasts from are ``MR`` streams of ``KC`` consecutive values (or, ``A`` stored
  transposed, one stream of ``MR``-value groups), which the L1 cache and its prefetchers serve as well as a
  packed sliver (``docs/results/kernels.md`` has the measurements);
* dense's v5 takes its weight packed already: the kernel's ``W`` argument is ``[N/NR, K, NR]``
  (:func:`~schedule_gym.templates.layouts.tile_columns` of the ``[K, N]`` weight, :func:`tiled_inputs`), the
  layout v4 copies each ``KC x NC`` panel into at run time, so v5 has no copy at all. A model's weights are
  constants: its build packs them once (:func:`schedule_gym.models.build.schedule_kernels`), and a
  measurement gives the kernel the packed copy of the task's weight. In a model each layer's weights stream
  from memory, and there the copy's reads and writes cost more than in a warm loop;
* GEMM's v6 places the block loops in GotoBLAS's order, ``n0 k0 m0`` (BLIS's ``jc pc ic``): the ``KC x NC`` panel
  of ``B`` is packed once per ``(n0, k0)``, the threads sharing the copy (they pack its slivers in parallel),
  then the row blocks ``m0`` run in parallel, each packing its ``MC x KC`` block of ``A`` as v3 does. v4 packs
  the panel of ``B`` once per row block as well (``M / MC`` times where v6 packs it once) and reads ``A`` in place,
  ``MR`` streams ``K`` values apart, which at GEMM's sizes (rows of 4 KiB at ``K = 1024``) compete for the same
  L1 sets. The ``(n0, k0)`` loops are serial and each runs two parallel loops: the copy, then the row blocks,
  or, where there is one (``m0 = 1``), its micro-tile columns ``n1`` (BLIS's ``jr`` loop, Smith et al., IPDPS
  2014), the block of ``A`` then copied by one thread. A model's dense layers have few rows and their weight
  packed once in the build, and its batch matmuls run their batch in parallel: neither has a ``B`` to copy;
* dense's v7 is v5 with the parallel loop's blocks in the other order, ``n0 m0`` (column blocks outer). A parallel
  loop's iterations go to the threads in contiguous ranges, so in v5 (``m0 n0``) with several row blocks each
  thread sweeps every column block of the weight, once for each of its row blocks; in v7 each thread takes its
  own range of column blocks and meets each panel of the weight once, for every row block in turn, while the
  panel is in its cache. In a model each layer's weight comes from memory, once a pass: v5's row blocks read it
  several times over. With one row block the two build the same kernel;
* dense's v8 is v7 with a software prefetch of the weight's next ``KC x NR`` sliver (the next micro-tile column's,
  or at the last one, the next reduction block's first), spread over the ``MC / MR`` micro-kernel calls that use
  the current one: ``llvm.prefetch`` into L2 (locality 2, ``prefetcht1`` on x86) of a ``1 / (MC / MR)`` share of the
  sliver's cache lines before each call. A model reads each weight from memory; each sliver is ``KC x NR``
  contiguous values, a few pages, and the next one starts ``K x NR`` values further on, where the hardware
  prefetchers, which follow a stream within a page, must find it again from a miss. TVM's schedule primitives
  do not express a prefetch: the calls are put into the scheduled loop nest (``ScheduleState.replace`` of the
  loop ``m1``). With the weight in the caches (a warm measurement) the prefetches find it there and cost a few
  instructions a call.

v6 is GEMM's packed template, v8 dense's and v4 batch matmul's (``schedule_gym.templates.PACKED``); the other
versions stay selectable by name, so their records keep naming the kernels they measured.

What it builds, for ``C[m, n] = sum_k A[m, k] * B[k, n]`` in the operator's own definition (the workload's
arguments and layouts, unchanged: GEMM's ``A, B, C``; dense's ``X, W[, bias], Y`` with its bias and
activation; batch matmul's ``A, B, C`` with a batch loop ``b`` and either operand stored transposed),
from a task whose splits are **3/2/3** (and 1 for ``b``) in the loop order
``[b0] m0 n0 | k0 n1 m1 k1 m2 n2`` (the operators' packed form, :mod:`schedule_gym.operators.matmul`:
``schedule_gym.operators.packed_task`` makes one from any task of these operators) and a config
``([(b0,)], (m0, m1, m2), (k0, k1), (n0, n1, n2))``:

========  ===========  ==========================================================================
factor    BLIS name    meaning
========  ===========  ==========================================================================
``b0``    (batch)      the batch loop of a batch matmul; fused with ``m0`` and ``n0`` and run in parallel
``m0``    M / MC       blocks of ``MC = m1 * m2`` rows of ``C``; fused with ``n0`` (v7, v8: inside it), parallel
``m1``    MC / MR      micro-tiles in a row block (inside ``n1``: one ``B`` sliver meets every ``A`` one)
``m2``    MR           rows of the register micro-tile (unrolled: ``MR`` broadcasts of ``A`` a step)
``k0``    K / KC       blocks of the reduction; ``C`` is zeroed before the first and accumulated in place
``k1``    KC           reduction steps of one micro-kernel call (its packed panels are ``KC`` deep)
``n0``    N / NC       blocks of ``NC = n1 * n2`` columns; fused with ``m0`` and run in parallel
``n1``    NC / NR      micro-tiles in a column block
``n2``    NR           columns of the micro-tile, vectorised (``NR / lanes`` vector registers a row;
                       v3 and v4 write them out as whole vectors)
========  ===========  ==========================================================================

Each factor tuple multiplies to its dimension's extent (the tile space's rule), so every factor divides
it: odd and prime extents work, with the micro-tile restricted to their divisors.

The schedule, per parallel ``([b0,] m0, n0)`` block and reduction block ``k0``:

* **pack B**: the ``KC x NC`` panel of ``B`` is copied into a per-block buffer laid out
  ``[NC/NR, KC, NR]`` (``cache_read`` + ``transform_layout`` + ``compute_at`` at ``k0``), so a
  micro-kernel reads its ``KC x NR`` sliver as one contiguous stream; the copy is vectorised along ``NR``
  (a ``B`` stored transposed is gathered into the same layout);
* **pack A** (v2, v3): the ``MC x KC`` block of ``A`` is copied into ``[MC/MR, KC, MR]`` the same way, so
  the ``MR`` values broadcast at each reduction step are adjacent. Each panel is packed once per
  ``([b0,] m0, n0, k0)``: ``B`` ``M/MC`` times in all, ``A`` ``N/NC`` times. v4 broadcasts from ``A`` itself;
* **micro-kernel**: for each ``(n1, m1)`` (BLIS's ``jr``, ``ir`` loops: the ``KC x NR`` sliver of packed
  ``B`` stays in L1 while the ``MC x KC`` block of ``A`` streams past it) the ``MR x NR`` tile of
  ``C`` is updated over ``KC`` steps, ``m2`` unrolled and ``n2`` vectorised; its addresses do not depend
  on ``k1``, so LLVM keeps the tile in vector registers across the ``k1`` loop (``MR * NR / lanes``
  accumulators) and loads and stores it once per call;
* the reduction's initialisation is hoisted above ``k0`` (``decompose_reduction``, after vectorize/unroll; in
  v6 the zeroing of each column block runs on the parallel ``m0`` loop);
* **epilogue** (dense's bias and activation): applied to the ``MC x NC`` block once its reduction is
  complete (``reverse_compute_at`` the parallel block loop), vectorised along ``NR``; the accumulator
  ``C`` is then a per-block buffer.

The micro-tile that fills the registers without spilling is ``MR * NR / lanes + NR / lanes + 1 <= 16``
ymm registers on AVX2 (e.g. 4 x 16, 6 x 16, 4 x 24; 8 x 8 is load-bound) and ``<= 32`` zmm on AVX-512
(e.g. 14 x 32, 8 x 48); the tile space does not encode that, so the search (or a seed) must find it.

TVM is imported lazily: importing this module compiles nothing.
"""

from __future__ import annotations

from typing import Any

from schedule_gym.operators import get_operator, get_workload
from schedule_gym.tasks.task import Task
from schedule_gym.templates.layouts import PREPACKED_WEIGHTS
from schedule_gym.templates.vectors import vector_width, vectorize_columns
from schedule_gym.types import Config

__all__ = ["COLUMN_BLOCKS_OUTER", "COLUMNS_OUTER_VERSIONS", "GOTO_ORDER", "NEXT_SLIVER_PREFETCHED", "OPS",
           "PREFETCH_LINE_BYTES", "PREFETCH_LOCALITY", "VERSIONS", "WEIGHT_PACKED_VERSIONS", "check_task",
           "next_sliver", "parallel_iterations", "schedule_packed_matmul", "tiled_inputs", "versions"]

#: The operators the template builds.
OPS = ("gemm", "dense", "batch_matmul")


#: The versions this module builds for every operator of ``OPS``.
VERSIONS = (2, 3, 4)
#: GEMM's version with the block loops in GotoBLAS's order (the module docstring says why GEMM's alone).
GOTO_ORDER = 6
#: Dense's version with its weight packed (as v5) and the column blocks outer in the parallel loop.
COLUMN_BLOCKS_OUTER = 7
#: Dense's version that is v7 with the weight's next sliver prefetched into L2 while the current one is in use.
NEXT_SLIVER_PREFETCHED = 8
#: The versions whose kernels take their weight packed (dense's; :mod:`~schedule_gym.templates.layouts`).
WEIGHT_PACKED_VERSIONS = (PREPACKED_WEIGHTS, COLUMN_BLOCKS_OUTER, NEXT_SLIVER_PREFETCHED)
#: The versions whose parallel loop takes the column blocks outer, ``n0 m0`` (the others: ``m0 n0``).
COLUMNS_OUTER_VERSIONS = (COLUMN_BLOCKS_OUTER, NEXT_SLIVER_PREFETCHED)
#: Bytes a prefetch fetches (a cache line of every x86 and most Arm CPUs).
PREFETCH_LINE_BYTES = 64
#: ``llvm.prefetch``'s locality of the next sliver's prefetch: 2, the L2 cache (``prefetcht1`` on x86).
PREFETCH_LOCALITY = 2


def versions(op: str) -> tuple[int, ...]:
    """The versions of ``op``'s template (dense has :data:`WEIGHT_PACKED_VERSIONS`, its weight packed, and GEMM
    ``GOTO_ORDER`` besides :data:`VERSIONS`)."""
    return VERSIONS + (WEIGHT_PACKED_VERSIONS if op == "dense" else ()) + ((GOTO_ORDER,) if op == "gemm" else ())


def parallel_iterations(goto_order: bool, batch: int, row_blocks: int, column_blocks: int, column_tiles: int) -> int:
    """Iterations of a kernel's parallel loop: v6's (``goto_order``) row blocks, or, with one row block, the micro-tile
    columns of a column block (``column_tiles``, ``NC / NR``); the other versions' fused batch, row and column blocks.
    The rule :func:`_goto_order` builds, read by the analytical picks."""
    if goto_order:
        return row_blocks if row_blocks > 1 else column_tiles
    return batch * row_blocks * column_blocks


def tiled_inputs(task: Task, config: Config, version: int) -> tuple[tuple[int, int], ...]:
    """``(input index, NR)`` for each input the kernel of ``config`` takes with its columns tiled
    (:func:`~schedule_gym.templates.layouts.tile_columns`): v5's, v7's and v8's weight, nothing in the other
    versions."""
    if version not in WEIGHT_PACKED_VERSIONS:
        return ()
    return ((1, dict(zip(task.dim_names, config))["n"][2]),)


def check_task(task: Task, version: int = 4) -> None:
    """Raise ValueError naming what is wrong if ``task`` is not a task the template of ``version`` can build (its
    operator's packed form)."""
    if task.op not in OPS:
        raise ValueError(f"the packed matmul templates build {', '.join(OPS)} tasks, not {task.op!r} ({task.name})")
    if version not in versions(task.op):
        raise ValueError(f"the packed {task.op} template has versions {', '.join(map(str, versions(task.op)))}, "
                         f"not {version!r}")
    meaning = "m: M/MC, MC/MR, MR; k: K/KC, KC; n: N/NC, NC/NR, NR" + ("; b: 1" if task.op == "batch_matmul" else "")
    get_operator(task.op).packed.check_form(task, f"{task.op}-cpu-v{version}", meaning)


def schedule_packed_matmul(task: Task, config: Config, version: int = 4) -> Any:
    """The scheduled IRModule (its kernel is ``main``) of ``config``, a valid config of ``task``, as the template of
    ``version`` (2, 3, 4; 5 and 7 for dense, 6 for GEMM) builds it."""
    import tvm
    import tvm.s_tir as s_tir

    check_task(task, version)
    factors = dict(zip(task.dim_names, config))
    (mo, mi, mr), (ko, kc), (no, ni, nr) = factors["m"], factors["k"], factors["n"]
    width = vector_width(nr, task.dtype, version)
    workload = get_workload(task.op)
    sch = s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(task)}))
    block = sch.get_sblock(workload.main_block)
    axes = dict(zip(workload.block_dims(task), sch.get_loops(block)))
    batch = [axes["b"]] if "b" in axes else []
    m0, m1, m2 = sch.split(axes["m"], [mo, mi, mr])
    n0, n1, n2 = sch.split(axes["n"], [no, ni, nr])
    k0, k1 = sch.split(axes["k"], [ko, kc])
    if version == GOTO_ORDER:
        return _goto_order(sch, block, (m0, m1, m2), (k0, k1), (n0, n1, n2), (mo, mi, mr), (ni, nr), width)
    blocks = (n0, m0) if version in COLUMNS_OUTER_VERSIONS else (m0, n0)  # the parallel loop's order, outer first
    sch.reorder(*batch, *blocks, k0, n1, m1, k1, m2, n2)

    # Pack the KC x NC panel of B as [NC/NR][KC][NR] (vectorised along NR), once per block and k0; v2 and v3 also
    # the MC x KC block of A as [MC/MR][KC][MR] (unrolled along MR). B is stored [b,] k, n (n, k transposed), A
    # [b,] m, k (k, m transposed).
    if version in WEIGHT_PACKED_VERSIONS:  # the kernel's W is [N/NR, K, NR]: its slivers are read where they are
        sch.transform_layout(block, ("read", 1), lambda k, n: (n // nr, k, n % nr))
    else:
        vectorize_columns(sch, _pack(sch, block, 1, bool(task.param("transpose_b", False)), bool(batch), k0, ni, nr)[1],
                          width)
    if version < 4:
        sch.unroll(_pack(sch, block, 0, not task.param("transpose_a", False), bool(batch), k0, mi, mr)[1])

    fused = sch.fuse(*batch, *blocks)
    # The epilogue (bias, activation) on each finished MC x NC block, vectorised along NR (v3, v4: its vectors).
    for name in workload.epilogues(task):
        epilogue = sch.get_sblock(name)
        sch.reverse_compute_at(epilogue, fused, preserve_unit_loops=True)
        last = sch.get_loops(epilogue)[-1]
        sch.vectorize(sch.split(last, [None, width])[1])
    sch.parallel(fused)
    sch.unroll(m2)
    vectorize_columns(sch, n2, width)
    sch.decompose_reduction(block, k0)
    if version == NEXT_SLIVER_PREFETCHED:
        (weight, _), = tiled_inputs(task, config, version)
        _prefetch_next_sliver(sch, block, task.operands[weight].name, (fused, k0, n1, m1), (mo, mi), (ko, kc),
                              (ni, nr), task.dtype)
    return sch.mod


def next_sliver(block: tuple[Any, Any], k0: Any, n1: Any, extents: tuple[int, int, int],
                select: Any = None) -> tuple[Any, Any]:
    """The weight's sliver a v8 kernel prefetches during the calls of the column block and row block ``block =
    (n0, m0)``, reduction block ``k0`` and micro-tile column ``n1``, as ``(micro-tile column of the weight, reduction
    block)``: the one its thread uses next if its range of blocks goes on. The next micro-tile column's at this
    reduction block; after the block's last, the first column's at the next reduction block; after the last of
    those, the first of the next block (``n0``'s next row block, or after its last the next column block's first).
    ``extents``: ``(M/MC, K/KC, NC/NR)``. ``select(cond, a, b)`` picks between expressions (``tirx.Select`` for loop
    variables; by default Python's conditional, for integers)."""
    select = select or (lambda cond, a, b: a if cond else b)
    (n0, m0), (mo, ko, ni) = block, extents
    last_column, last_depth = n1 == ni - 1, k0 == ko - 1
    next_block = select(m0 == mo - 1, n0 + 1, n0) * ni
    tile = select(last_column, select(last_depth, next_block, n0 * ni), n0 * ni + n1 + 1)
    return tile, select(last_column, select(last_depth, 0, k0 + 1), k0)


def _prefetch_next_sliver(sch: Any, block: Any, weight_name: str, loops: tuple, rows: tuple[int, int],
                          depth: tuple[int, int], columns: tuple[int, int], dtype: str) -> None:
    """v8's prefetch (the module docstring): at the top of the loop ``m1``, before each micro-kernel call, prefetch
    into L2 the call's share, ``ceil(lines / (MC / MR))`` cache lines, of the weight's :func:`next_sliver`, whose
    ``KC x NR`` values are contiguous in the weight ``weight_name``, ``[N/NR, K, NR]`` (the input
    :func:`tiled_inputs` names). ``loops``: v7's fused ``(n0, m0)`` block loop, ``k0``, ``n1`` and ``m1``; a
    prefetch past the buffer's end (after the last block) never faults."""
    import tvm
    from tvm import tirx

    (mo, mi), (ko, kc), (ni, nr) = rows, depth, columns
    fused, k0, n1, m1 = (sch.get(loop).loop_var for loop in loops)
    weight = next(region.source for region in sch.get(block).reads if region.source.name == weight_name)
    per_line = PREFETCH_LINE_BYTES * 8 // tvm.DataType(dtype).bits
    lines = -(-kc * nr // per_line)
    share = -(-lines // mi)
    tile, step = next_sliver((tirx.floordiv(fused, mo), tirx.floormod(fused, mo)), k0, n1, (mo, ko, ni), tirx.Select)
    p = tirx.Var("p", "int32")
    line = m1 * share + p
    offset = line * per_line  # in the sliver
    address = tirx.address_of(tirx.BufferLoad(weight, [tile, step * kc + tirx.floordiv(offset, nr),
                                                       tirx.floormod(offset, nr)]))
    prefetch = tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, 0, PREFETCH_LOCALITY, 1))
    calls = tirx.For(p, 0, share, tirx.ForKind.SERIAL, tirx.IfThenElse(line < lines, prefetch, None))
    loop = sch.get(loops[3])
    sch.state.replace(sch.get_sref(loops[3]), tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind,
                                                       tirx.SeqStmt([calls, loop.body]), loop.thread_binding,
                                                       loop.annotations))


def _goto_order(sch: Any, block: Any, m: tuple, k: tuple, n: tuple, rows: tuple[int, int, int],
                b_tiles: tuple[int, int], width: int) -> Any:
    """v6's schedule of GEMM's ``block`` from its split loops and its row factors ``(M/MC, MC/MR, MR)`` (the module
    docstring): ``n0 k0 | pack B | m0 | pack A | n1 m1 k1 m2 n2``, the copy of ``B`` parallel over its slivers, the
    row blocks ``m0`` parallel; with one row block, its micro-tile columns ``n1`` (BLIS's ``jr`` loop)."""
    (m0, m1, m2), (k0, k1), (n0, n1, n2) = m, k, n
    sch.reorder(n0, k0, m0, n1, m1, k1, m2, n2)
    slivers, lanes = _pack(sch, block, 1, False, False, k0, *b_tiles)
    sch.parallel(slivers)
    vectorize_columns(sch, lanes, width)
    sch.unroll(_pack(sch, block, 0, True, False, m0, *rows[1:])[1])
    one_row_block = rows[0] == 1  # parallel_iterations' rule: then the micro-tile columns run in parallel
    sch.parallel(n1 if one_row_block else m0)
    sch.unroll(m2)
    vectorize_columns(sch, n2, width)
    init = sch.decompose_reduction(block, k0)  # C's column block zeroed under n0: loops n0, m0, n1, m1, m2, n2
    sch.parallel(sch.get_loops(init)[2 if one_row_block else 1])
    return sch.mod


def _pack(sch: Any, block: Any, operand: int, tiled_first: bool, batched: bool, at: Any, tiles: int,
          tile: int) -> tuple[Any, Any]:
    """Copy ``operand`` of ``block`` into a buffer laid out ``[b,] tiles, KC, tile`` at the loop ``at`` (one copy
    per iteration of it): its tiled axis (rows of A, columns of B) split into ``tiles`` tiles of ``tile``, the
    reduction between them, so a micro-kernel reads its sliver as one stream. ``tiled_first``: the operand stores
    the tiled axis before the reduction; a leading batch index is kept. Returns the copy's loop over the tiles and
    its innermost loop (the ``tile`` lanes)."""
    packed = sch.cache_read(block, operand, "global")

    def layout(x: Any, y: Any) -> tuple:
        t, kk = (x, y) if tiled_first else (y, x)
        return t // tile, kk, t % tile

    sch.transform_layout(packed, ("write", 0), (lambda z, x, y: (z, *layout(x, y))) if batched else layout)
    sch.compute_at(packed, at, preserve_unit_loops=True)
    outer, inner = sch.get_loops(packed)[-2:]
    tiled, depth = (outer, inner) if tiled_first else (inner, outer)
    blocks, lanes = sch.split(tiled, [tiles, tile])
    sch.reorder(blocks, depth, lanes)
    return blocks, lanes
