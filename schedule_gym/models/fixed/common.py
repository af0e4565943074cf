"""What the fixed kernels share: how they are marked and named, their vector width, and how a fold adds them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from schedule_gym.models.bindings import Bindings
from schedule_gym.models.symbols import OPAQUE

__all__ = ["FIXED_ATTR", "LANES", "SYMBOL_PREFIX", "KernelCache", "fold_calls", "for_each_column", "kernel_attrs"]

#: lanes of one vector piece (float32): one AVX-512 register, two AVX2 registers
LANES = 16
#: the attribute that marks a fixed kernel (its value: the kernel's kind)
FIXED_ATTR = "schedule_gym.fixed"
#: how the symbols of the fixed kernels begin (a profile tells them from the tasks' kernels by it)
SYMBOL_PREFIX = "sg_fixed_"


def kernel_attrs(kind: str) -> dict[str, Any]:
    """The function attributes of a fixed kernel of ``kind``: no aliasing, opaque to operator fusion, scheduled
    already (TVM's flag, which the default schedules and MetaSchedule leave alone), marked."""
    return {"tirx.noalias": True, "op_pattern": OPAQUE, "tirx.is_scheduled": True, FIXED_ATTR: kind}


def for_each_column(width: int, body: Callable[[Any], None]) -> None:
    """Emit ``body(col)`` for every ``col`` below ``width`` in the current IRBuilder frame: ``width // LANES`` pieces
    of a ``LANES``-wide vector, then a vector of the ``width % LANES`` left."""
    from tvm.tirx.script.builder import ir as T

    pieces, tail = divmod(width, LANES)
    if pieces:
        with T.serial(0, pieces) as piece:
            with T.vectorized(0, LANES) as lane:
                body(piece * LANES + lane)
    if tail:
        with T.vectorized(0, tail) as lane:
            body(pieces * LANES + lane)


class KernelCache:
    """The kernels a fold adds to a module, one per distinct key, under unique symbols (``SYMBOL_PREFIX``,
    the given stem and a serial number)."""

    def __init__(self, builder: Any) -> None:
        self.builder = builder
        self.added: dict[tuple, Any] = {}

    def get(self, key: tuple, stem: str, make: Any) -> Any:
        """The GlobalVar of the kernel for ``key``, made with ``make()`` (a PrimFunc) the first time."""
        if key not in self.added:
            name = f"{SYMBOL_PREFIX}{stem}_{len(self.added)}"
            self.added[key] = self.builder.add_func(make().with_attr("global_symbol", name), name)
        return self.added[key]


def fold_calls(mod: Any, pattern: Any,
               rewrite: Callable[[Any, Bindings, KernelCache, Counter], Any]) -> tuple[Any, Counter]:
    """``mod`` with every call of ``main`` that ``pattern`` (a ``relax.dpl`` pattern) matches replaced by
    ``rewrite(call, bindings, kernels, counts)`` (the call itself to leave it; ``bindings`` those of ``main``,
    ``kernels`` adds the fold's kernels, ``counts`` takes the forms replaced), dead code removed; and ``counts``."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import rewrite_call

    func = mod["main"]
    bindings = Bindings(func)
    builder = relax.BlockBuilder(mod)
    kernels = KernelCache(builder)
    counts: Counter = Counter()
    new_main = rewrite_call(pattern, lambda expr, _matched: rewrite(expr, bindings, kernels, counts), func)
    if not counts:
        return mod, counts
    out = builder.get()
    out["main"] = new_main
    return tvm.transform.Sequential([relax.transform.DeadCodeElimination(), relax.transform.Normalize()])(out), counts
