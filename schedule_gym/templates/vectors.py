"""How the packed templates vectorise a micro-tile's columns: one vector of ``NR`` lanes (v2) or whole vectors (v3
and later).

``*-cpu-v2`` vectorises a micro-tile row's ``NR`` columns as one ``<NR x float>`` vector and leaves LLVM to split
it into registers. Where ``NR`` is not a power-of-two number of vector registers (``NR = 48`` or 96 with
AVX-512's 16 FP32 lanes, 24 with AVX2's 8) LLVM keeps the micro-tile out of the registers and the kernel runs
at a few percent of its neighbours' speed (``examples/benchmarks/vector_split.py``, results in
``docs/results/kernels.md``). ``*-cpu-v3`` writes the vectors out: ``NR`` is split
into ``NR / width`` unrolled vectors of ``width`` lanes, ``width`` the largest power of two dividing ``NR`` and
at most one 512-bit register of the task's dtype. The width depends on the task and config only, never on
the machine, so a v3 record names one kernel; on a 256-bit machine LLVM splits each power-of-two vector
into two registers, which it does well. Where ``width == NR`` (``NR`` a power of two up to 16 FP32 lanes)
v3 builds what v2 builds. The matmul templates' v4, dense's v5, v7 and v8 and GEMM's v6
(:mod:`~schedule_gym.templates.packed_matmul`) differ from v3 in their packing of ``A`` and ``B`` and the order of
their block loops, not here: they write the vectors out as v3 does.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_VECTOR_BITS", "VERSIONS", "vector_width", "vectorize_columns"]

#: the widest vector a v3 kernel writes (an AVX-512 register)
MAX_VECTOR_BITS = 512
#: the packed templates' versions: how each vectorises the columns
VERSIONS = (2, 3, 4, 5, 6, 7, 8)


def vector_width(nr: int, dtype: str, version: int) -> int:
    """The lanes of one vector of a micro-tile row of ``nr`` columns of ``dtype`` (the module's rule):
    ``nr`` itself in v2, in v3 and later the largest power of two dividing ``nr`` and fitting ``MAX_VECTOR_BITS``."""
    if version not in VERSIONS:
        raise ValueError(f"the packed templates have versions {', '.join(map(str, VERSIONS))}, not {version!r}")
    if isinstance(nr, bool) or not isinstance(nr, int) or nr < 1:
        raise ValueError(f"a micro-tile's columns must be a positive integer, got {nr!r}")
    if version == 2:
        return nr
    bits = re.match(r"[a-z]+(\d+)", dtype) if isinstance(dtype, str) else None  # float32, bfloat16, float8_e4m3fn
    if bits is None or int(bits.group(1)) < 1:
        raise ValueError(f"cannot tell the width of dtype {dtype!r}")
    cap = max(1, MAX_VECTOR_BITS // int(bits.group(1)))
    return min(nr & -nr, cap)  # nr & -nr: the largest power of two dividing nr


def vectorize_columns(sch: Any, loop: Any, width: int) -> None:
    """Vectorise ``loop`` (a micro-tile row's columns, or a copy along them) as vectors of ``width`` lanes: the
    whole loop if ``width`` is its extent, else split into unrolled vectors of ``width``."""
    if sch.get(loop).extent.value == width:
        sch.vectorize(loop)
        return
    outer, inner = sch.split(loop, [None, width])
    sch.unroll(outer)
    sch.vectorize(inner)
