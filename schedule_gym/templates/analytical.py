"""Analytical picks for the packed CPU templates: BLIS's model of a machine, no measurement.

Low, Igual, Smith and Quintana-Ortí, "Analytical Modeling Is Enough for High-Performance BLIS" (ACM TOMS
43(2), 2016), derive the blocking of BLIS's GEMM from a few facts of the machine (Section 4): the
register micro-tile ``MR x NR`` from the vector registers and the FMA units' latency and throughput, the
depth ``KC`` of a micro-panel from the L1 cache, the row block ``MC`` from the L2 cache. The packed templates
(``batch_matmul-cpu-v4``, ``conv2d-cpu-v5``, ``gemm-cpu-v6``, ``dense-cpu-v8``:
:mod:`~schedule_gym.templates.packed_matmul`, :mod:`~schedule_gym.templates.packed_conv2d`) have BLIS's
structure, so the same model names good configs of their tile spaces before anything is measured.
:func:`analytical_configs` gives a few, ranked; the model tuner (:func:`~schedule_gym.models.tuning.tune_model`)
measures them first and the agent searches beside them (it does not see them), each task keeping the best of both.

What each rule is, as implemented here (``lanes`` FP32 lanes of a vector register, ``R`` vector registers):

* **micro-tile** (Section 4.1): ``NR`` a multiple of ``lanes``; the accumulators, the ``NR / lanes``
  vectors of ``B`` and one broadcast of ``A`` fit the registers, ``MR * NR / lanes + NR / lanes + 1 <= R``;
  and there are at least as many independent accumulators as FMAs in flight,
  ``MR * NR / lanes >= FMA units x FMA latency`` (relaxed when the extents' divisors leave no such tile).
  Among those, the tile with the most FMAs per load, ``(MR * NR / lanes) / (MR + NR / lanes)``, first.
  ``NR / lanes`` may be any whole number: the v3 and v4 templates write a row out as whole vectors
  (:mod:`~schedule_gym.templates.vectors`). v2 built a row as one ``<NR x float>`` vector, which LLVM keeps
  out of the registers unless ``NR / lanes`` is a power of two (a dense 128x768x768 at 9.5 GFLOP/s with
  ``4 x 24`` on a Zen 3's AVX2, 158 with ``4 x 16``), so these picks kept to powers of two while v2 was the
  packed template. A part of a vector (no whole vector divides the columns) is still a power of two.
* **KC** (Section 4.2): the ``KC x NR`` micro-panel of ``B`` stays in L1 while two ``MR x KC`` micro-panels
  of ``A`` stream through it: the largest divisor of the reduction with
  ``KC x (NR + 2 MR) x 4 bytes <= 3/4 of L1`` (a quarter left to the other ways of the set, as the
  paper's associativity argument leaves one way of ``A`` and ``C``). The matmul picks also try a **deeper**
  ``KC``: the largest divisor whose micro-panel of ``B`` alone fits L1 (``KC x NR x 4 bytes <= L1``; ``A``'s
  micro-panels then come from L2), each ``KC`` block being a pass over the accumulators of ``C``. The L1 rule
  leaves AVX-512's wide tiles shallow (``4 x 64``: ``KC = 64`` in 32 KiB), and on GEMM 1024^3 the deeper panels
  were faster on both CPUs measured: a Zen 4's ``4 x 64`` at ``KC = 128-256`` and a Zen 3's ``2 x 32`` at 256
  against the rule's 64 and 128. Each tile's deeper pick ranks third, after two block counts at the rule's ``KC``.
* **MC** (Section 4.3): the ``MC x KC`` block of ``A`` fills at most half of L2.
* **parallel blocks**: the templates run their block loops in parallel (BLIS parallelises the ``jr`` and
  ``ir`` loops instead; Smith et al., IPDPS 2014), so the blocks must keep every core busy: at least one
  per core, then a multiple of the cores with at least two per core; among those, the fewest elements copied or
  streamed again (the matmul templates read ``B`` once per row block, ``M / MC`` times: v4 packs it each time, and
  dense's v5, v7 and v8, which take their weight packed, stream it again from memory or a distant cache; ``A`` is read
  in place; conv2d's padded input window is copied ``N / NC`` times, its weight ``M / MC`` times unless v5 takes it
  packed), and a few block counts so that the first measurements differ. GEMM's v6 runs its block loops in
  GotoBLAS's order (BLIS's own): its parallel loop is the row blocks (or, with one, the micro-tile columns of a
  column block), ``B`` is packed once whatever the blocks and ``A`` ``N / NC`` times.
* **C's block** (the matmul templates but v6): a parallel block accumulates its ``MC x NC`` block of ``C`` in
  place over the ``K / KC`` reduction blocks, reading and writing it once each; where ``K / KC > 1`` the block
  fits L2 where a split allows (a GPT-2 LM head's 128 x 12,576 block of 6.4 MB went back to memory four times).

The model is a starting point, not the optimum: it knows nothing of the prefetchers, of TLB reach or of
what a parallel region costs, which is why the search still runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schedule_gym.operators.conv2d import is_depthwise
from schedule_gym.spaces.tile_space import divisors
from schedule_gym.tasks.task import Task
from schedule_gym.templates.packed_matmul import GOTO_ORDER, parallel_iterations
from schedule_gym.types import Config

__all__ = ["MicroArch", "analytical_configs", "micro_tiles"]

FLOAT_BYTES = 4
#: micro-tiles the picks are spread over (the best two by the rules; the rest of a pick varies the blocks)
TILES = 2


@dataclass(frozen=True)
class MicroArch:
    """The facts of a CPU that BLIS's analytical model reads (FP32)."""

    #: FP32 lanes of a vector register (8 with AVX2, 16 with AVX-512)
    lanes: int
    #: architectural vector registers (16 with AVX2, 32 with AVX-512)
    registers: int
    #: vector FMAs issued per cycle
    fma_units: int
    #: cycles from an FMA's inputs to its result
    fma_latency: int
    l1_bytes: int
    l2_bytes: int
    #: cores the kernel runs on (its threads)
    cores: int

    def __post_init__(self) -> None:
        for name in ("lanes", "registers", "fma_units", "fma_latency", "l1_bytes", "l2_bytes", "cores"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"MicroArch.{name} must be a positive integer, got {value!r}")

    @classmethod
    def of_host(cls, cores: int | None = None) -> MicroArch:
        """This machine's facts: its CPU generation (:mod:`schedule_gym.hardware`: vector width, FMA figures)
        and its caches as sysfs reports them (32 KiB L1 and 512 KiB L2 where it does not); ``cores``
        defaults to the cores this process may use."""
        from schedule_gym import hardware

        bits = hardware.vector_bits()
        lanes = bits // 32
        gen = hardware.generation()
        flop_per_cycle = gen.fma_flop_per_cycle if gen is not None and gen.fma_flop_per_cycle else 2 * 2 * lanes
        latency = gen.fma_latency_cycles if gen is not None and gen.fma_latency_cycles else 4
        caches = {c.level: c.size_bytes for c in hardware.cpu_caches()}
        return cls(lanes=lanes, registers=32 if bits == 512 else 16, fma_units=max(1, flop_per_cycle // (2 * lanes)),
                   fma_latency=latency, l1_bytes=caches.get(1, 32 * 1024), l2_bytes=caches.get(2, 512 * 1024),
                   cores=cores if cores is not None else hardware.usable_cores())


def _divisors(n: int) -> list[int]:
    return divisors(n).tolist()


def _vectors(arch: MicroArch, nr: int) -> int:
    """Vector registers a row of ``nr`` outputs takes (a part of one counts as one)."""
    return -(-nr // arch.lanes)


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def micro_tiles(arch: MicroArch, rows: int, cols: int) -> list[tuple[int, int]]:
    """The register micro-tiles ``(MR, NR)`` for ``rows x cols`` outputs, best first (the module's rules);
    ``MR`` divides ``rows`` and ``NR`` divides ``cols`` (the tile spaces' rule). Where no whole vector
    divides ``cols``, ``NR`` is part of one (a power of two below the lanes, 1 at worst)."""
    def fitting(widths: list[int]) -> list[tuple[int, int]]:
        return [(mr, nr) for nr in widths for mr in _divisors(rows)
                if mr * _vectors(arch, nr) + _vectors(arch, nr) + 1 <= arch.registers]

    fits = fitting([nr for nr in _divisors(cols) if nr % arch.lanes == 0])
    if not fits:  # no whole vectors divide the columns: part of one vector (a power of two of lanes), else 1
        fits = fitting([nr for nr in _divisors(cols) if nr < arch.lanes and _power_of_two(nr)])
    needed = arch.fma_units * arch.fma_latency

    def score(tile: tuple[int, int]) -> tuple:
        mr, nr = tile
        vectors = _vectors(arch, nr)
        accumulators = mr * vectors
        # the lanes an FMA uses: all of them with whole vectors; with part of one, the widest part first
        lanes_used = min(nr, arch.lanes)
        return (accumulators >= needed, lanes_used, accumulators / (mr + vectors), accumulators, mr)

    return sorted(fits, key=score, reverse=True)


def _deepest(depth: int, bytes_per_step: float, budget: float) -> int:
    """The largest divisor ``KC`` of ``depth`` with ``KC x bytes_per_step <= budget`` (1 where none fits)."""
    fitting = [d for d in _divisors(depth) if d * bytes_per_step <= budget]
    return max(fitting) if fitting else 1


def _kc(arch: MicroArch, depth: int, mr: int, nr: int, window: int = 1) -> int:
    """The largest divisor of ``depth`` whose micro-panels (``window x KC`` deep) fit 3/4 of L1."""
    return _deepest(depth, window * (nr + 2 * mr) * FLOAT_BYTES, 0.75 * arch.l1_bytes)


def _deep_kc(arch: MicroArch, depth: int, nr: int) -> int:
    """The largest divisor of ``depth`` whose ``KC x NR`` micro-panel of ``B`` alone fits L1."""
    return _deepest(depth, nr * FLOAT_BYTES, arch.l1_bytes)


def _blocks(arch: MicroArch, rows: int, cols: int, mr: int, nr: int, kc: int, batch: int,
            count: int, rows_copied: bool, columns_copied: bool, goto_order: bool = False,
            accumulated: bool = False) -> list[tuple[int, int]]:
    """Up to ``count`` ``(row blocks, column blocks)`` for the parallel loop (the module's rules), best first;
    ``goto_order``: GEMM's v6, whose parallel loop is not the fused blocks
    (:func:`~schedule_gym.templates.packed_matmul.parallel_iterations`); ``accumulated``: each parallel block
    accumulates its ``MC x NC`` block of the output over several reduction blocks, which keeps it to L2 where a
    split can."""

    max_mc = max(mr, arch.l2_bytes // 2 // (kc * FLOAT_BYTES))
    options = []
    for m0 in _divisors(rows // mr):
        mc = rows // m0
        if mc > max_mc:
            continue
        for n0 in _divisors(cols // nr):
            blocks = parallel_iterations(goto_order, batch, m0, n0, cols // (n0 * nr))
            # elements copied or streamed again per unit of depth: the columns' operand (B, a weight) once per row
            # block, the rows' operand once per column block, each where the template reads it again
            packed = rows * n0 * rows_copied + cols * m0 * columns_copied
            spills = accumulated and mc * (cols // n0) * FLOAT_BYTES > arch.l2_bytes
            # every core busy first, then C's block within L2, then a multiple of the cores and two blocks each, then
            # the fewest elements read again
            options.append((blocks < arch.cores, spills, blocks % arch.cores != 0 or blocks < 2 * arch.cores, packed,
                            blocks, m0, n0))
    options.sort()
    if any(not option[0] for option in options):  # never leave a core idle where a split can keep it busy
        options = [option for option in options if not option[0]]
    if any(not option[1] for option in options):  # nor let an accumulated block of C spill out of L2
        options = [option for option in options if not option[1]]
    chosen: list[tuple[int, int]] = []
    seen_blocks: set[int] = set()
    for *_, blocks, m0, n0 in options:  # distinct block counts first, so the first measurements differ
        if blocks not in seen_blocks:
            seen_blocks.add(blocks)
            chosen.append((m0, n0))
        if len(chosen) == count:
            return chosen
    rest = [(m0, n0) for *_, m0, n0 in options if (m0, n0) not in chosen]
    return chosen + rest[: count - len(chosen)]


def _matmul_configs(task: Task, arch: MicroArch, count: int, goto_order: bool) -> list[Config]:
    m, k, n = (task.dim(d).extent for d in ("m", "k", "n"))
    # v6 packs A once per column block and B once in all; v4, v5, v7 and v8 read A in place and read B once per row
    # block (v4 copies it each time; v5's, v7's and v8's weight is packed, but a row block still streams it from
    # memory or a distant cache: in a model each weight comes from memory)
    batch = task.dim("b").extent if "b" in task.dim_names else 1
    groups = []
    for mr, nr in micro_tiles(arch, m, n)[:TILES]:
        def configs(kc: int, blocks: int) -> list[Config]:
            return [tuple({"m": (m0, m // (m0 * mr), mr), "k": (k // kc, kc), "n": (n0, n // (n0 * nr), nr),
                           "b": (batch,)}[d] for d in task.dim_names)
                    for m0, n0 in _blocks(arch, m, n, mr, nr, kc, batch, blocks, rows_copied=goto_order,
                                          columns_copied=not goto_order, goto_order=goto_order,
                                          accumulated=not goto_order and kc < k)]

        kc, deep = _kc(arch, k, mr, nr), _deep_kc(arch, k, nr)
        group = configs(kc, count)
        if deep > kc:  # the deeper panel's best blocks third, after two block counts at the L1 rule's KC
            group[2:2] = configs(deep, 1)
        groups.append(group)
    return _interleave(groups, count)


def _conv2d_configs(task: Task, arch: MicroArch, count: int, weights_copied: bool) -> list[Config]:
    # the implicit GEMM: rows are output pixels (the micro-tile's MR = w2 output columns), columns the output
    # channels (NR = co2), the reduction the window and the input channels (KC = rc1, KH x KW deep)
    nb, h, w, co = (task.dim(d).extent for d in ("n", "h", "w", "co"))
    rh, rw, rc = (task.dim(d).extent for d in ("rh", "rw", "rc"))
    # a grouped convolution's micro-tile keeps to one group (its columns read one group's input channels); a
    # depthwise one's spans groups (its columns read adjacent input channels, one each)
    group_columns = co if is_depthwise(task) else co // int(task.param("groups"))  # type: ignore[arg-type]
    groups = []
    for mr, nr in micro_tiles(arch, w, group_columns)[:TILES]:
        kc = _kc(arch, rc, mr, nr, window=rh * rw)
        # a block is h1 whole output rows (w1 = w / w2 micro-tiles each), parallel over n, h0 and co0; the
        # L2 rule reads a block row's depth: w pixels of a KH x KW x KC window each
        groups.append([tuple({"n": (nb,), "h": (h0, h // h0), "w": (1, w // mr, mr), "co": (co0, co // (co0 * nr), nr),
                              "rh": (rh,), "rw": (rw,), "rc": (rc // kc, kc)}[d] for d in task.dim_names)
                       for h0, co0 in _blocks(arch, h, co, 1, nr, kc * rh * rw * w, nb, count, True, weights_copied)])
    return _interleave(groups, count)


def _interleave(groups: Sequence[Sequence[Config]], count: int) -> list[Config]:
    """The best config of each micro-tile, then the second of each, ...: ``count`` distinct in all."""
    out: list[Config] = []
    for rank in range(max((len(g) for g in groups), default=0)):
        for group in groups:
            if rank < len(group) and group[rank] not in out:
                out.append(group[rank])
    return out[:count]


def analytical_configs(task: Task, arch: MicroArch | None = None, count: int = 4) -> list[Config]:
    """Up to ``count`` configs of ``task`` (a packed form: ``schedule_gym.operators.packed_task``) that
    BLIS's analytical model picks for ``arch`` (default: this machine, :meth:`MicroArch.of_host`), best first;
    empty for a task without a packed template. Each is a valid config of the task's tile space."""
    from schedule_gym.spaces import TileSpace
    from schedule_gym.templates import PACKED, template_of

    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative integer, got {count!r}")
    template = template_of(task, "llvm")
    if count == 0 or template.name != PACKED.get(task.op):  # not in its packed form
        return []
    arch = arch if arch is not None else MicroArch.of_host()
    if task.op == "conv2d":  # conv2d's v5 takes its weight packed: no copy to weigh
        configs = _conv2d_configs(task, arch, count, weights_copied=template.tiled_inputs is None)
    else:
        configs = _matmul_configs(task, arch, count, template.version.endswith(f"-v{GOTO_ORDER}"))
    space = TileSpace(task)
    return [space.validate(c) for c in configs]
