"""Tasks: tensor operators described as named loop dimensions, each split into a fixed number of loops.

A :class:`Task` is plain, hashable data (no TVM types) so it can be a dictionary key, cross process
boundaries and be written into measurement records. The tile space, the mock latency model and the
TVM templates all read the same description:

* ``dims``: the loop dimensions, each a :class:`LoopDim` with its extent, how many nested loops it is
  split into (Zhang et al., Eqs. 2-4: ``d_m, d_k, d_n``) and whether it is a reduction;
* ``operands``: which dimensions index each tensor, innermost (contiguous) index last;
* ``loop_order``: the order of the tiled loop nest, outermost first, as ``(dim, level)`` pairs.

GEMM is the first operator (:func:`gemm`); batch matmul and conv2d are new ``op`` values over the same
structure.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

__all__ = [
    "DTYPE_BYTES",
    "LoopDim",
    "Operand",
    "Task",
    "gemm",
    "get_task",
    "task_names",
    "PRESETS",
]

#: Element sizes of the dtypes a task may use.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "float32": 4, "float64": 8}


def check_positive_int(value: object, what: str) -> int:
    """Return ``value`` as an ``int`` if it is a positive integer (not a bool), else raise naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{what} must be a positive integer, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class LoopDim:
    """One loop dimension of an operator: ``extent`` iterations split into ``splits`` nested loops."""

    name: str
    extent: int
    splits: int
    reduction: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"loop dimension name must be an identifier, got {self.name!r}")
        object.__setattr__(self, "extent", check_positive_int(self.extent, f"extent of dimension {self.name!r}"))
        object.__setattr__(
            self, "splits", check_positive_int(self.splits, f"split count of dimension {self.name!r}")
        )
        if not isinstance(self.reduction, bool):
            raise TypeError(f"reduction flag of dimension {self.name!r} must be a bool, got {self.reduction!r}")


@dataclass(frozen=True)
class Operand:
    """A tensor the operator reads or writes, and the dimensions that index it (contiguous last)."""

    name: str
    dims: tuple[str, ...]
    output: bool = False


@dataclass(frozen=True)
class Task:
    """A tensor operator to tune: named loop dimensions, operands and the tiled loop order.

    Build GEMM tasks with :func:`gemm` or :func:`get_task` (``"gemm-1024"``, ``"bert-base-qkv"``...).
    """

    name: str
    op: str
    dims: tuple[LoopDim, ...]
    operands: tuple[Operand, ...]
    dtype: str = "float32"
    loop_order: tuple[tuple[str, int], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if not self.dims:
            raise ValueError("a task needs at least one loop dimension")
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise ValueError(f"loop dimension names must be unique, got {names}")
        for operand in self.operands:
            unknown = [d for d in operand.dims if d not in names]
            if unknown:
                raise ValueError(f"operand {operand.name!r} is indexed by unknown dimensions {unknown}")
        if not self.loop_order:
            object.__setattr__(self, "loop_order", default_loop_order(self.dims))
        expected = {(d.name, level) for d in self.dims for level in range(d.splits)}
        if sorted(self.loop_order) != sorted(expected) or len(self.loop_order) != len(expected):
            raise ValueError(
                f"loop_order {self.loop_order} must list every (dimension, level) pair once: {sorted(expected)}"
            )
        # Tasks key caches on every step: hash the fields once, not on each look-up.
        object.__setattr__(
            self, "_hash", hash((self.name, self.op, self.dims, self.operands, self.dtype, self.loop_order))
        )

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    # ----------------------------------------------------------------------------- derived facts
    @property
    def dim_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dims)

    @property
    def extents(self) -> tuple[int, ...]:
        return tuple(d.extent for d in self.dims)

    @property
    def splits(self) -> tuple[int, ...]:
        return tuple(d.splits for d in self.dims)

    @property
    def flops(self) -> int:
        """Floating-point operations of one run: a multiply and an add per point of the iteration space."""
        return 2 * math.prod(self.extents)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def dim(self, name: str) -> LoopDim:
        for d in self.dims:
            if d.name == name:
                return d
        raise KeyError(f"task {self.name!r} has no dimension {name!r}; it has {list(self.dim_names)}")

    def to_dict(self) -> dict:
        """Plain JSON-able form (records store it); :meth:`from_dict` inverts it."""
        return {
            "name": self.name,
            "op": self.op,
            "dims": [[d.name, d.extent, d.splits, d.reduction] for d in self.dims],
            "operands": [[o.name, list(o.dims), o.output] for o in self.operands],
            "dtype": self.dtype,
            "loop_order": [[d, level] for d, level in self.loop_order],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Task:
        try:
            return cls(
                name=data["name"],
                op=data["op"],
                dims=tuple(LoopDim(n, e, s, r) for n, e, s, r in data["dims"]),
                operands=tuple(Operand(n, tuple(d), bool(o)) for n, d, o in data["operands"]),
                dtype=data["dtype"],
                loop_order=tuple((d, int(level)) for d, level in data["loop_order"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a task description: {data!r} ({exc})") from None

    @property
    def key(self) -> str:
        """A short stable identity of the computation (shape, splits, dtype, loop order), for records."""
        dims = ",".join(f"{d.name}{d.extent}/{d.splits}{'r' if d.reduction else ''}" for d in self.dims)
        order = "".join(f"{d}{level}" for d, level in self.loop_order)
        return f"{self.op}[{dims}]{self.dtype}:{order}"

    def describe(self) -> str:
        shape = " ".join(f"{d.name}={d.extent}" for d in self.dims)
        splits = "/".join(str(d.splits) for d in self.dims)
        return f"{self.name} ({self.op} {shape}, splits {splits}, {self.dtype})"


def default_loop_order(dims: tuple[LoopDim, ...]) -> tuple[tuple[str, int], ...]:
    """The multi-level tiling order used by the CPU template, outermost first.

    Levels are aligned from the innermost loop: spatial tier ``t`` holds each spatial dimension's
    ``t``-th innermost loop, and reduction tier ``t`` sits just outside spatial tier ``t``. For GEMM with
    splits (4, 2, 4) this is ``m0 n0 m1 n1 k0 m2 n2 k1 m3 n3``: outer spatial loops first (fused and run in
    parallel), the reduction inside, a register tile ``m3 x n3`` innermost with ``n3`` contiguous.
    """
    spatial = [d for d in dims if not d.reduction]
    reduce_ = [d for d in dims if d.reduction]
    tiers = max([d.splits for d in dims])
    order: list[tuple[str, int]] = []
    for tier in reversed(range(tiers)):  # outermost tier first
        for d in reduce_:
            if tier < d.splits:
                order.append((d.name, d.splits - 1 - tier))
        for d in spatial:
            if tier < d.splits:
                order.append((d.name, d.splits - 1 - tier))
    return tuple(order)


def gemm(
    m: int,
    k: int,
    n: int,
    d_m: int = 4,
    d_k: int = 2,
    d_n: int = 4,
    dtype: str = "float32",
    name: str | None = None,
) -> Task:
    """GEMM ``C[m, n] = sum_k A[m, k] * B[k, n]`` with ``d_m, d_k, d_n`` nested loops per dimension.

    The defaults (4, 2, 4) are the paper's (Zhang et al., Section 5).

    >>> gemm(1024, 1024, 1024).describe()
    'gemm-1024x1024x1024 (gemm m=1024 k=1024 n=1024, splits 4/2/4, float32)'
    """
    dims = (
        LoopDim("m", check_positive_int(m, "m"), check_positive_int(d_m, "d_m")),
        LoopDim("k", check_positive_int(k, "k"), check_positive_int(d_k, "d_k"), reduction=True),
        LoopDim("n", check_positive_int(n, "n"), check_positive_int(d_n, "d_n")),
    )
    operands = (
        Operand("A", ("m", "k")),
        Operand("B", ("k", "n")),
        Operand("C", ("m", "n"), output=True),
    )
    return Task(name=name or f"gemm-{m}x{k}x{n}", op="gemm", dims=dims, operands=operands, dtype=dtype)


#: Named tasks: (m, k, n) of GEMMs. The square ones are the paper's (Section 5); the others are the
#: matrix multiplications of well-known models at batch x sequence = 128 x ... tokens.
PRESETS: dict[str, tuple[int, int, int]] = {
    "gemm-64": (64, 64, 64),
    "gemm-128": (128, 128, 128),
    "gemm-256": (256, 256, 256),
    "gemm-512": (512, 512, 512),
    "gemm-1024": (1024, 1024, 1024),
    "gemm-2048": (2048, 2048, 2048),
    # BERT-base (hidden 768, FFN 3072), 128 tokens: fused QKV projection, attention output, FFN up/down.
    "bert-base-qkv": (128, 768, 2304),
    "bert-base-attn-out": (128, 768, 768),
    "bert-base-ffn-up": (128, 768, 3072),
    "bert-base-ffn-down": (128, 3072, 768),
    # GPT-2 small (hidden 768), 1024 tokens: the MLP's first layer; ResNet-50's classifier at batch 32.
    "gpt2-mlp-up": (1024, 768, 3072),
    "resnet50-fc": (32, 2048, 1000),
}


def task_names() -> list[str]:
    return list(PRESETS)


_GEMM_NAME = re.compile(r"^gemm-(\d+)x(\d+)x(\d+)$")


def get_task(name: str, d_m: int = 4, d_k: int = 2, d_n: int = 4, dtype: str = "float32") -> Task:
    """A preset task by name (see :data:`PRESETS`), or a GEMM named by its shape, ``gemm-MxKxN``."""
    match = _GEMM_NAME.match(name) if isinstance(name, str) else None
    if isinstance(name, str) and name in PRESETS:
        m, k, n = PRESETS[name]
    elif match is not None:
        m, k, n = (int(x) for x in match.groups())
    else:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(PRESETS)}, or gemm-MxKxN")
    return gemm(m, k, n, d_m=d_m, d_k=d_k, d_n=d_n, dtype=dtype, name=name)
