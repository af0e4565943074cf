"""The var bindings of a Relax function, read once: what each var is bound to and how often it is read (the
mapping's check that a match's inner values are not used elsewhere, the LSTM matcher's and the concatenation
kernel's walks along single-use chains)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

__all__ = ["Bindings"]


class Bindings:
    """Var bindings of a Relax function: the var each value is bound to (``bound``, by the Call's identity),
    the value of each var (``value_of``), how often each var is read (``uses``) and the vars bound to calls that
    take it as an argument (``readers``)."""

    def __init__(self, func: Any) -> None:
        from tvm import relax

        self.bound: dict[Any, Any] = {}
        self.value_of: dict[Any, Any] = {}
        self.uses: Counter = Counter()
        self.readers: dict[Any, list[Any]] = {}
        for block in func.body.blocks:
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding):
                    self.bound[binding.value] = binding.var
                    self.value_of[binding.var] = binding.value
                    for arg in binding.value.args if isinstance(binding.value, relax.Call) else ():
                        if isinstance(arg, relax.Var):
                            self.readers.setdefault(arg, []).append(binding.var)
        uses = self.uses

        @relax.expr_functor.visitor
        class Uses(relax.PyExprVisitor):  # type: ignore[misc]
            def visit_var_(self, var: Any) -> None:
                uses[var] += 1

            def visit_dataflow_var_(self, var: Any) -> None:
                uses[var] += 1

        Uses().visit_expr(func)

    def used_elsewhere(self, inner: Sequence[Any]) -> bool:
        """True if a value inside a match (not its output) is read more than once."""
        for call in inner:
            var = self.bound.get(call)
            if var is not None and self.uses[var] > 1:
                return True
        return False
