"""Finding the native LSTM cells of a Relax module and their layers x steps grid (the matching half of
:mod:`schedule_gym.models.lstm`; Xiao et al., "Optimization Mapping for Deep Learning", Section 2).

:data:`LSTM_CELL_SPEC` is the native cell as data (Figure 3b); :func:`find_lstm_cells` matches it from every
cell output ``h`` back to the inputs (``tvm.relax.dpl``) and :func:`lstm_grid` organises the cells into the
2-D grid of Figure 3a.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedule_gym.models.mapping import ANY, CONST, Pattern

__all__ = ["GATES", "LSTM_CELL_SPEC", "Cell", "Gate", "Grid", "GridError", "cell_pattern", "const_value",
           "find_lstm_cells", "is_const", "lstm_grid", "match_cells", "var_name"]

GATES = ("i", "f", "g", "o")  # PyTorch's (and cuDNN's) gate order in the merged weights
_ACT = {"i": "sigmoid", "f": "sigmoid", "g": "tanh", "o": "sigmoid"}


def _cell_spec() -> dict[str, Any]:
    nodes: list[dict[str, Any]] = []
    for g in GATES:
        nodes += [
            {"name": f"x{g}", "op": "matmul", "inputs": [ANY, CONST]},  # x @ W_g
            {"name": f"b{g}", "op": "add", "inputs": [f"x{g}", CONST]},  # + b_g
            {"name": f"u{g}", "op": "matmul", "inputs": [ANY, CONST]},  # h_prev @ U_g  (cell input)
            {"name": f"p{g}", "op": "add", "inputs": [f"b{g}", f"u{g}"]},
            {"name": f"a{g}", "op": _ACT[g], "inputs": [f"p{g}"]},
        ]
    nodes += [
        {"name": "fc", "op": "multiply", "inputs": ["af", ANY]},  # f * c_prev  (cell input)
        {"name": "ig", "op": "multiply", "inputs": ["ai", "ag"]},
        {"name": "c", "op": "add", "inputs": ["fc", "ig"]},
        {"name": "tc", "op": "tanh", "inputs": ["c"]},
        {"name": "h", "op": "multiply", "inputs": ["ao", "tc"]},
    ]
    return {"name": "lstm-cell", "op_type": {"type": "lstm", "gates": "".join(GATES)}, "cell": nodes,
            "cell_input": [f"u{g}" for g in GATES] + ["fc"]}


#: the native LSTM cell as plain data (the paper's Figure 3b; :meth:`Pattern.from_dict` form)
LSTM_CELL_SPEC: dict[str, Any] = _cell_spec()


@functools.cache
def cell_pattern() -> Pattern:
    """:data:`LSTM_CELL_SPEC` as a :class:`~schedule_gym.models.mapping.Pattern`, built on first use (a
    Pattern checks its operators against TVM)."""
    return Pattern.from_dict(LSTM_CELL_SPEC)



class GridError(ValueError):
    """Matched cells that do not form a complete layers x steps grid (or cannot be fused); says why."""


# ----------------------------------------------------------------------------- cells
@dataclass
class Gate:
    """One gate of a cell: ``act(x @ W + b + h_prev @ U)``; ``U`` is None where the hidden term was
    folded into the constant ``hidden_const`` (a first step with a constant state)."""

    W: np.ndarray
    b: np.ndarray
    U: np.ndarray | None
    hidden_const: np.ndarray | None


@dataclass
class Cell:
    """A matched cell: its inputs, weights, outputs (Relax vars) and the vars it binds."""

    h: Any  # the var bound to the cell's output h
    c: Any  # the var bound to the new cell state c
    x: Any  # the external or lower-layer input
    h_prev: Any | None  # None when the hidden matmuls were folded into constants
    c_prev: Any  # a var, or a constant (zeros for the first step)
    gates: dict[str, Gate]
    inner: list[Any]  # the other vars the cell binds (removed when the grid is replaced)

    @property
    def name(self) -> str:
        return var_name(self.h)

    def bound_vars(self) -> list[Any]:
        return [self.h, self.c, *self.inner]


@dataclass
class Grid:
    """Cells as ``cells[layer][step]`` (Figure 3a)."""

    layers: int
    steps: int
    cells: list[list[Cell]]


# ----------------------------------------------------------------------------- matching
def _compile(pattern: Pattern) -> tuple[Any, dict[str, Any]]:
    """The dpl pattern of the cell output and of each node; a ``cell_input`` matmul may also be a constant
    (folded from a constant first-step state)."""
    constant = [name for name, node in pattern.cell if name in pattern.cell_input and node.op == "matmul"]
    return pattern.compile(constant_nodes=constant)


def _skeleton() -> Any:
    """``h = o * tanh(a * b + d * e)``: the output side of any LSTM-like cell (near-miss candidates)."""
    from tvm.relax.dpl import is_op, wildcard

    def comm(op: str, a: Any, b: Any) -> Any:
        return is_op(f"relax.{op}")(a, b) | is_op(f"relax.{op}")(b, a)

    state = comm("add", comm("multiply", wildcard(), wildcard()), comm("multiply", wildcard(), wildcard()))
    return comm("multiply", wildcard(), is_op("relax.tanh")(state))


def _bindings(func: Any) -> tuple[dict[Any, Any], Counter, dict[Any, Any]]:
    """(value -> var, var -> number of uses, var -> value) over the function's var bindings."""
    from schedule_gym.models.bindings import Bindings

    b = Bindings(func)
    return b.bound, b.uses, b.value_of


def var_name(var: Any) -> str:
    """A Relax var's name (``"?"`` for None)."""
    return "?" if var is None else str(getattr(var, "name", None) or getattr(var, "name_hint", "?"))


def const_value(expr: Any) -> np.ndarray:
    """The value of a Relax constant."""
    return expr.value.numpy()


def is_const(expr: Any) -> bool:
    """Whether ``expr`` is a Relax constant."""
    import tvm

    return isinstance(expr, tvm.ir.expr.Constant)


def _cell_of(by_name: Mapping[str, Any], bound: Mapping[Any, Any], uses: Counter) -> Cell | str:
    """The cell of one match, or why the match cannot be a cell."""
    gates: dict[str, Gate] = {}
    xs, hs = [], []
    for g in GATES:
        xw = by_name[f"x{g}"]
        x, W = xw.args
        bias_add = by_name[f"b{g}"]
        b = next(a for a in bias_add.args if is_const(a))
        u = by_name[f"u{g}"]
        xs.append(x)
        if is_const(u):
            gates[g] = Gate(const_value(W), const_value(b), None, const_value(u))
            hs.append(None)
        else:
            hs.append(u.args[0])
            gates[g] = Gate(const_value(W), const_value(b), const_value(u.args[1]), None)
    if any(not x.same_as(xs[0]) for x in xs):
        return "the four gates read different inputs x"
    if any((h is None) != (hs[0] is None) or (h is not None and not h.same_as(hs[0])) for h in hs):
        return "the four gates read different hidden states h_prev"
    fc = by_name["fc"]
    af = bound.get(by_name["af"])
    c_prev = next((a for a in fc.args if not (af is not None and a.same_as(af))), fc.args[1])
    h_var, c_var = bound.get(by_name["h"]), bound.get(by_name["c"])
    if h_var is None or c_var is None:
        return "the cell's h or c is not bound to a variable"
    inner = []
    for name, call in by_name.items():
        if name in ("h", "c") or is_const(call):
            continue
        var = bound.get(call)
        if var is None:
            return f"node {name} is not bound to a variable"
        if uses[var] > 1:
            return f"its inner value {var_name(var)} ({name}) is also used outside the cell"
        inner.append(var)
    return Cell(h_var, c_var, xs[0], hs[0], c_prev, gates, inner)


def match_cells(mod: Any) -> tuple[list[Cell], list[str]]:
    """The cells of ``mod``'s ``main`` in the order their outputs are bound, and the near misses (why each
    candidate with a cell's output skeleton is not a cell)."""
    from tvm.relax.dpl import rewrite_call

    func = mod["main"]
    bound, uses, value_of = _bindings(func)
    root, nodes = _compile(cell_pattern())
    cells: list[Cell] = []
    misses: list[str] = []
    matched_outputs: set = set()

    def on_cell(expr: Any, matched: Mapping[Any, Any]) -> Any:
        var = bound.get(expr)
        if var in matched_outputs:  # rewrite_call visits a binding again until nothing changes
            return expr
        matched_outputs.add(var)
        by_name = {name: matched[pat] for name, pat in nodes.items() if pat in matched}
        cell = _cell_of(by_name, bound, uses)
        if isinstance(cell, str):
            misses.append(f"cell output {var_name(var)}: {cell}")
        else:
            cells.append(cell)
        return expr

    rewrite_call(root, on_cell, func)

    def on_candidate(expr: Any, matched: Mapping[Any, Any]) -> Any:
        var = bound.get(expr)
        if var not in matched_outputs:
            matched_outputs.add(var)
            misses.append(f"{var_name(var)} = o * tanh(c) is not an LSTM cell: "
                          + _diagnose(expr, value_of))
        return expr

    rewrite_call(_skeleton(), on_candidate, func)
    order = {v: i for i, v in enumerate(value_of)}
    cells.sort(key=lambda c: order.get(c.h, 0))
    return cells, misses


def _diagnose(h_call: Any, value_of: Mapping[Any, Any]) -> str:
    """Why an ``o * tanh(f * c_prev + i * g)`` candidate fails the cell pattern: its gates' shapes."""
    from tvm import relax

    def val(e: Any) -> Any:
        return value_of.get(e, e)

    def op(e: Any) -> str:
        e = val(e)
        return str(e.op.name).removeprefix("relax.") if isinstance(e, relax.Call) and hasattr(e.op, "name") else type(e).__name__

    def gate(e: Any, act: str, role: str) -> tuple[int, str] | None:
        """None if ``e`` is a gate ``act(x @ W + b + h_prev @ U)``, else (how far off: 1 for another
        gate-like unary op, 2 for anything else, e.g. the state; why)."""
        if op(e) != act:
            call = val(e)
            gate_like = isinstance(call, relax.Call) and len(call.args) == 1 and op(call.args[0]) == "add"
            return (1 if gate_like else 2), f"gate {role} is {op(e)}, not {act}"
        pre = val(val(e).args[0])
        if isinstance(pre, relax.TupleGetItem):
            return 1, f"gate {role} is a part of a merged projection (already the fused form)"
        terms = _sum_terms(pre, val)
        kinds = [op(t) for t in terms]
        if len(terms) != 3 or "matmul" not in kinds:  # x @ W + b + (h_prev @ U, or its folded constant)
            return 1, (f"gate {role}'s pre-activation is a sum of {len(terms)} terms ({', '.join(kinds)}), "
                       "not x @ W + b + h_prev @ U")
        return None

    call = val(h_call)
    a, b = call.args
    tc, o = (a, b) if op(a) == "tanh" else (b, a)
    c = val(val(tc).args[0])
    m1, m2 = (val(t) for t in c.args)
    best: list[tuple[int, str]] | None = None
    for ig, fc in ((m1, m2), (m2, m1)):
        for i_, g_ in ((ig.args[0], ig.args[1]), (ig.args[1], ig.args[0])):
            for f_ in fc.args:
                problems = [p for p in (gate(o, "sigmoid", "o"), gate(i_, "sigmoid", "i"), gate(g_, "tanh", "g"),
                                        gate(f_, "sigmoid", "f")) if p]
                if best is None or sum(w for w, _ in problems) < sum(w for w, _ in best):
                    best = problems
    return "; ".join([why for _, why in best or []] or ["its operands differ from the cell pattern"])


def _sum_terms(expr: Any, val: Any) -> list[Any]:
    from tvm import relax

    if isinstance(expr, relax.Call) and getattr(expr.op, "name", "") == "relax.add":
        return [t for a in expr.args for t in _sum_terms(val(a), val)]
    return [expr]


def find_lstm_cells(mod: Any) -> list[Cell]:
    """Every native LSTM cell of ``mod``'s ``main`` (Section 2: matched from each output ``h`` back to
    its inputs), in the order their outputs are bound."""
    return match_cells(mod)[0]


# ----------------------------------------------------------------------------- the grid
def lstm_grid(cells: Sequence[Cell]) -> Grid:
    """The cells as ``layers x steps`` (Section 2, Figure 3a): steps per layer = cells with external input
    (``x`` from no cell), layers = #cells / #steps. Raises :class:`GridError` (saying why) unless every
    cell has one predecessor in time (the cell whose ``h`` and ``c`` it reads; none for the first step)
    and one below it (the cell whose ``h`` is its ``x``; none in the first layer), and they form a
    complete rectangle."""
    cells = list(cells)
    if not cells:
        raise GridError("no LSTM cell matched")
    by_h = {c.h: c for c in cells}
    by_c = {c.c: c for c in cells}
    prev: dict[int, Cell | None] = {}
    below: dict[int, Cell | None] = {}
    for cell in cells:
        ph = by_h.get(cell.h_prev) if cell.h_prev is not None else None
        pc = by_c.get(cell.c_prev)
        if ph is not pc:
            raise GridError(f"cell {cell.name} reads h_prev and c_prev from different cells")
        prev[id(cell)] = ph
        below[id(cell)] = by_h.get(cell.x)
    external = [c for c in cells if below[id(c)] is None]
    steps = len(external)
    if len(cells) % steps:
        raise GridError(f"{len(cells)} cells are not a whole number of layers of {steps} steps "
                        f"(the cells with external input)")
    layers = len(cells) // steps
    nxt: dict[int, Cell] = {}
    for cell in cells:
        p = prev[id(cell)]
        if p is not None:
            if id(p) in nxt:
                raise GridError(f"cell {p.name} feeds two cells in time")
            nxt[id(p)] = cell
    chains = []
    for first in (c for c in cells if prev[id(c)] is None):
        chain = [first]
        while id(chain[-1]) in nxt:
            chain.append(nxt[id(chain[-1])])
        if len(chain) != steps:
            raise GridError(f"a layer starting at cell {first.name} has {len(chain)} steps, not {steps}")
        chains.append(chain)
    if len(chains) != layers:
        raise GridError(f"{len(chains)} chains of cells in time, but {len(cells)} cells / {steps} steps = {layers} layers")
    layer_of = {}
    ordered: list[list[Cell]] = []
    level = [ch for ch in chains if below[id(ch[0])] is None]
    if len(level) != 1:
        raise GridError(f"{len(level)} layers take external input; a grid has one first layer")
    while level:
        chain = level[0]
        for t, cell in enumerate(chain):
            b = below[id(cell)]
            expect = ordered[-1][t] if ordered else None
            if b is not expect:
                raise GridError(f"cell {cell.name} (layer {len(ordered)}, step {t}) does not read the h of the cell below it")
        layer_of[id(chain[0])] = len(ordered)
        ordered.append(chain)
        level = [ch for ch in chains if below[id(ch[0])] is chain[0]]
        if len(level) > 1:
            raise GridError(f"{len(level)} layers read layer {len(ordered) - 1}")
    if len(ordered) != layers:
        raise GridError(f"only {len(ordered)} of {layers} layers stack on the first")
    return Grid(layers, steps, ordered)

