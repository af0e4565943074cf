"""The paper's LSTM case (Xiao et al., "Optimization Mapping for Deep Learning", Sections 2 and 3).

A multi-layer LSTM written with native operators (four ``Linear`` pairs per cell, as the PTB language
model of Section 3) imports into Relax as one cell per layer and step. :data:`LSTM_CELL_PATTERN` is the
native cell as data (Figure 3b): its ``cell`` lists the operators of one cell in the canonical form of
Figure 2a (four separate Matmul–BiasAdd pairs for the input, four Matmuls for the hidden state), its
``cell_input`` names the nodes that read another cell's ``h`` (the four hidden matmuls) and ``c`` (the
forget product), and its ``op_type`` is ``lstm``. In the canonical Relax graph a gate is::

    a = sigmoid(add(add(b, matmul(x, W)), matmul(h_prev, U)))     # tanh for the candidate gate g
    c = add(multiply(f, c_prev), multiply(i, g));  h = multiply(o, tanh(c))

``add`` and ``multiply`` match either operand order. The importer folds constants, so a first step whose
state is a constant (zeros) has each hidden matmul folded into a constant and ``c_prev`` a constant: a
``cell_input`` node may therefore be a constant (the folded first-step value).

* :func:`find_lstm_cells` matches the pattern from every cell output ``h`` back to the inputs (Section 2:
  matching from the output side back to the input side; ``tvm.relax.dpl``), and records per cell its
  input ``x``, ``h_prev``, ``c_prev``, the eight weight constants and four biases, and its outputs.
  Candidates that have the cell's output skeleton but not its gates are reported as near misses.
* :func:`lstm_grid` organises the cells into the 2-D grid of Figure 3a by following which cell's ``h``
  and ``c`` feed which: the steps per layer are the cells with external input (their ``x`` comes from no
  cell), the layers are #matched cells / #steps (Section 2); a grid that is not complete is refused.
* :func:`map_lstm` replaces the whole grid by the fused form (Figure 2b, what cuDNN's LSTM does, the
  replacement of Figure 4): per layer the four gate weights merged into one ``[in, 4H]`` and one
  ``[H, 4H]`` constant (biases summed into one ``[4H]``), the input projection of all steps in one
  ``[steps*batch, in] x [in, 4H] + b`` matmul, then per step one recurrent ``[batch, H] x [H, 4H]``
  matmul, a split into the four gates, their activations and the state update. Every former cell
  output ``h``/``c`` is rebound to the fused value, so later consumers are unchanged;
  :func:`~schedule_gym.models.mapping.map_model` then maps the merged matmuls to ``dense`` tasks.
* :func:`measure_lstm_mapping` times a zoo model compiled without and with the LSTM mapping.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedule_gym.models.mapping import ANY, COMMUTATIVE, CONST, Pattern

__all__ = [
    "LSTM_CELL_PATTERN",
    "LSTM_CELL_SPEC",
    "Cell",
    "Grid",
    "GridError",
    "LSTMReport",
    "find_lstm_cells",
    "lstm_grid",
    "map_lstm",
    "measure_lstm_mapping",
]

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
_PATTERN: Pattern | None = None


def __getattr__(name: str) -> Any:
    # LSTM_CELL_PATTERN is built on first use: a Pattern checks its operators against TVM
    if name == "LSTM_CELL_PATTERN":
        global _PATTERN
        if _PATTERN is None:
            _PATTERN = Pattern.from_dict(LSTM_CELL_SPEC)
        return _PATTERN
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        return _name(self.h)

    def bound_vars(self) -> list[Any]:
        return [self.h, self.c, *self.inner]


@dataclass
class Grid:
    """Cells as ``cells[layer][step]`` (Figure 3a)."""

    layers: int
    steps: int
    cells: list[list[Cell]]


@dataclass
class LSTMReport:
    """What the LSTM mapping found and did: cells, grid, and why it did not map (if it did not)."""

    cells: int = 0
    layers: int = 0
    steps: int = 0
    mapped: bool = False
    reason: str | None = None
    near_misses: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if self.mapped:
            out = [f"mapped {self.cells} LSTM cells as {self.layers} layers x {self.steps} steps to the fused form"]
        else:
            out = [f"not mapped ({self.cells} cells matched): {self.reason}"]
        return out + [f"near miss: {m}" for m in self.near_misses]


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
    from schedule_gym.models.mapping import Bindings

    b = Bindings(func)
    return b.bound, b.uses, b.value_of


def _name(var: Any) -> str:
    return "?" if var is None else str(getattr(var, "name", None) or getattr(var, "name_hint", "?"))


def _const(expr: Any) -> np.ndarray:
    return expr.value.numpy()


def _is_const(expr: Any) -> bool:
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
        b = next(a for a in bias_add.args if _is_const(a))
        u = by_name[f"u{g}"]
        xs.append(x)
        if _is_const(u):
            gates[g] = Gate(_const(W), _const(b), None, _const(u))
            hs.append(None)
        else:
            hs.append(u.args[0])
            gates[g] = Gate(_const(W), _const(b), _const(u.args[1]), None)
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
        if name in ("h", "c") or _is_const(call):
            continue
        var = bound.get(call)
        if var is None:
            return f"node {name} is not bound to a variable"
        if uses[var] > 1:
            return f"its inner value {_name(var)} ({name}) is also used outside the cell"
        inner.append(var)
    return Cell(h_var, c_var, xs[0], hs[0], c_prev, gates, inner)


def _match(mod: Any) -> tuple[list[Cell], list[str]]:
    from tvm.relax.dpl import rewrite_call

    from schedule_gym.models import lstm as this

    func = mod["main"]
    bound, uses, value_of = _bindings(func)
    root, nodes = _compile(this.LSTM_CELL_PATTERN)
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
            misses.append(f"cell output {_name(var)}: {cell}")
        else:
            cells.append(cell)
        return expr

    rewrite_call(root, on_cell, func)

    def on_candidate(expr: Any, matched: Mapping[Any, Any]) -> Any:
        var = bound.get(expr)
        if var not in matched_outputs:
            matched_outputs.add(var)
            misses.append(f"{_name(var)} = o * tanh(c) is not an LSTM cell: "
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
    return _match(mod)[0]


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


# ----------------------------------------------------------------------------- the fused form
def _merged(grid: Grid, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The layer's ``[in, 4H]`` input weights, ``[4H]`` bias and ``[H, 4H]`` recurrent weights; every cell
    of the layer must hold the same weights (it is one LSTM layer)."""
    row = grid.cells[layer]
    ref = row[0].gates
    H = ref["i"].W.shape[1]
    for cell in row:
        for g in GATES:
            gate = cell.gates[g]
            if gate.W.shape != ref[g].W.shape or not np.array_equal(gate.W, ref[g].W) or not np.array_equal(gate.b, ref[g].b):
                raise GridError(f"layer {layer}: cell {cell.name}'s gate {g} has other input weights than the layer's")
            if gate.b.size != H:
                raise GridError(f"layer {layer}: gate {g}'s bias of shape {gate.b.shape} is not a vector of {H}")
    W = np.concatenate([ref[g].W for g in GATES], axis=1)
    b = np.concatenate([ref[g].b.reshape(H) for g in GATES])
    U = None
    for cell in row:
        if cell.h_prev is None:
            continue
        Uc = np.concatenate([cell.gates[g].U for g in GATES], axis=1)
        if U is None:
            U = Uc
        elif not np.array_equal(U, Uc):
            raise GridError(f"layer {layer}: cell {cell.name} has other recurrent weights than the layer's")
    return W, b, U


class _Emitter:
    """Bindings built one call at a time (each normalised, so its var carries its type)."""

    def __init__(self, dataflow: bool) -> None:
        from tvm import relax

        self.bb = relax.BlockBuilder()
        self.bindings: list[Any] = []
        self.var_type = relax.DataflowVar if dataflow else relax.Var

    def __call__(self, value: Any, name: str, var: Any = None) -> Any:
        from tvm import relax

        value = self.bb.normalize(value)
        var = var if var is not None else self.var_type(name, value.ty)
        self.bindings.append(relax.VarBinding(var, value))
        return var


def _fused_bindings(grid: Grid, emit: _Emitter) -> None:
    """Figure 2b per layer: one merged input projection for all steps, then per step one recurrent
    matmul, the gate split, activations and the state update; the last h, c of each cell are bound
    to the cell's original vars."""
    from tvm import relax

    op = relax.op
    below_h: list[Any] = [cell.x for cell in grid.cells[0]]
    for layer, row in enumerate(grid.cells):
        W, b, U = _merged(grid, layer)
        T = grid.steps
        p = f"lstm_l{layer}_"
        xs = emit(op.concat(below_h, axis=0), p + "x") if T > 1 else below_h[0]
        xw = emit(op.matmul(xs, relax.const(W)), p + "xw")
        xp = emit(op.add(xw, relax.const(b)), p + "xproj")
        parts = emit(op.split(xp, T, axis=0), p + "xproj_steps") if T > 1 else None
        Uc = relax.const(U) if U is not None else None
        outs = []
        for t, cell in enumerate(row):
            q = f"{p}t{t}_"
            pre = emit(relax.TupleGetItem(parts, t), q + "xp") if parts is not None else xp
            if cell.h_prev is not None:
                rec = emit(op.matmul(cell.h_prev, Uc), q + "hu")
                pre = emit(op.add(pre, rec), q + "pre")
            else:
                folded = [np.broadcast_to(cell.gates[g].hidden_const, _shape(cell.h)) for g in GATES]
                if any(np.any(f != 0) for f in folded):
                    pre = emit(op.add(pre, relax.const(np.concatenate(folded, axis=-1).astype(W.dtype))), q + "pre")
            split = emit(op.split(pre, 4, axis=1), q + "gates")
            act = {}
            for k, g in enumerate(GATES):
                raw = emit(relax.TupleGetItem(split, k), q + g + "_pre")
                act[g] = emit(op.tanh(raw) if g == "g" else op.sigmoid(raw), q + g)
            zero_c = _is_const(cell.c_prev) and not np.any(_const(cell.c_prev))
            if zero_c:  # a zero initial state: c = i * g
                c = emit(op.multiply(act["i"], act["g"]), q + "c", cell.c)
            else:
                fc = emit(op.multiply(act["f"], cell.c_prev), q + "fc")
                ig = emit(op.multiply(act["i"], act["g"]), q + "ig")
                c = emit(op.add(fc, ig), q + "c", cell.c)
            tc = emit(op.tanh(c), q + "tc")
            outs.append(emit(op.multiply(act["o"], tc), q + "h", cell.h))
        below_h = outs


def _shape(expr: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in expr.ty.shape.values)


def _rewritten(mod: Any, grid: Grid) -> Any:
    """``mod`` with the grid's bindings replaced by the fused form: the bindings that do not depend on
    the grid come first (in their order), then the fused form, then the rest (in their order)."""
    from tvm import relax

    func = mod["main"]
    grid_vars = {v for row in grid.cells for cell in row for v in cell.bound_vars()}
    blocks = list(func.body.blocks)
    holding = [i for i, blk in enumerate(blocks) if any(b.var in grid_vars for b in blk.bindings)]
    if len(holding) != 1:
        raise GridError(f"the cells lie in {len(holding)} binding blocks; the mapping rewrites one")
    k = holding[0]
    block = blocks[k]
    pre, post = [], []
    dependent: set = set()
    for b in block.bindings:
        if b.var in grid_vars:
            continue
        used = relax.analysis.free_vars(b.value)
        if any(u in grid_vars or u in dependent for u in used):
            dependent.add(b.var)
            post.append(b)
        else:
            pre.append(b)
    inputs = [c.x for c in grid.cells[0]] + [c.h_prev for row in grid.cells for c in row[:1] if c.h_prev is not None] + \
             [c.c_prev for row in grid.cells for c in row[:1]]
    for x in inputs:
        if x in dependent:
            raise GridError(f"the grid's input {_name(x)} depends on the cells' outputs (fed back): "
                            "the input projections of all steps cannot be batched")
    emit = _Emitter(isinstance(block, relax.DataflowBlock))
    _fused_bindings(grid, emit)
    new_block = type(block)(pre + emit.bindings + post)
    blocks[k] = new_block
    body = relax.SeqExpr(blocks, func.body.body)
    new_func = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    import tvm

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    out["main"] = new_func
    return relax.transform.Normalize()(out)


def map_lstm(mod: Any) -> tuple[Any, LSTMReport]:
    """``mod`` with its LSTM grid replaced by the fused form (Section 2, Figures 2b and 4), and the report.

    A refused mapping (no cell, an incomplete grid, layers with differing weights, inputs fed back from
    the outputs) returns ``mod`` unchanged and the report says why; near misses are listed either way.
    """
    cells, misses = _match(mod)
    report = LSTMReport(cells=len(cells), near_misses=misses)
    if not cells:
        report.reason = "no LSTM cell matched" + (" (see the near misses)" if misses else "")
        return mod, report
    try:
        grid = lstm_grid(cells)
        report.layers, report.steps = grid.layers, grid.steps
        new = _rewritten(mod, grid)
    except GridError as why:
        report.reason = str(why)
        return mod, report
    report.mapped = True
    return new, report


# ----------------------------------------------------------------------------- measuring
def _best_configs(mapped: Any, measurements: int, seed: int = 0) -> dict[str, Any]:
    """The best config of each dense task after random search on the mock backend."""
    from schedule_gym.agents import Budget, make_agent
    from schedule_gym.envs import TilingEnv

    out = {}
    for mt in mapped.tasks:
        if mt.task.op != "dense":
            continue
        result = make_agent("random", seed).run(TilingEnv(task=mt.task, backend="mock"), Budget(measurements=measurements))
        if result.best_config is not None:
            out[mt.task.name] = result.best_config
    return out


def measure_lstm_mapping(model_name: str, threads: int = 1, repeat: int = 10, min_repeat_ms: int = 200,
                         measurements: int = 200, seed: int = 0) -> dict[str, Any]:
    """Time the zoo model ``model_name`` compiled from its canonical graph (native cells) and from its
    LSTM-mapped graph (fused form), both through ``map_model`` + ``schedule_kernels`` +
    ``compile_model(schedule_rest=True)``: once with untuned kernels (``s0``) and once with each dense
    task's best config from ``measurements`` random-search measurements on the mock backend.

    Set ``TVM_NUM_THREADS`` before TVM starts its thread pool (before the first run) for ``threads`` to
    hold. Returns per variant the median and min seconds, the tasks, and the speed-ups (unmapped/mapped).
    """
    import time

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels, time_model
    from schedule_gym.models.importer import import_model
    from schedule_gym.models.mapping import map_model
    from schedule_gym.models.pipeline import check_outputs, torch_outputs
    from schedule_gym.models.zoo import build_model

    spec = build_model(model_name, seed=seed)
    canonical = import_model(spec.module, spec.inputs, name=model_name)
    fused, report = map_lstm(canonical)
    target = host_llvm_target(threads)
    reference = torch_outputs(spec)
    result: dict[str, Any] = {"model": model_name, "threads": threads, "repeat": repeat, "min_repeat_ms": min_repeat_ms,
                              "lstm": report.lines(), "target": str(target.get("mcpu")), "variants": {}}
    for graph_name, graph in (("unmapped", canonical), ("mapped", fused)):
        mapped = map_model(graph)
        tuned = _best_configs(mapped, measurements, seed)
        for tuning, configs in (("s0", {}), ("mock-best", tuned)):
            start = time.perf_counter()
            ex = compile_model(schedule_kernels(mapped, configs, untuned="s0"), target, schedule_rest=True)
            error = check_outputs(run_model(ex, spec.inputs), reference)
            compiled_s = time.perf_counter() - start
            times = time_model(ex, spec.inputs, repeat=repeat, min_repeat_ms=min_repeat_ms)
            result["variants"][f"{graph_name}/{tuning}"] = {
                "median_s": statistics.median(times), "min_s": min(times), "compile_s": compiled_s,
                "check": error or "ok", "tasks": {t.task.name: t.weight for t in mapped.tasks}}
    v = result["variants"]
    for tuning in ("s0", "mock-best"):
        result[f"speedup_{tuning}"] = {
            stat: v[f"unmapped/{tuning}"][f"{stat}_s"] / v[f"mapped/{tuning}"][f"{stat}_s"] for stat in ("median", "min")}
    result["paper_speedup"] = 4.12
    result["paper_note"] = ("Xiao et al.'s 4.12x is cuDNN's LSTM on a GTX 1080 against TensorFlow r1.3's native LSTM "
                            "in training (20 epochs); this is a TVM CPU inference build, native vs fused cells: "
                            "not like for like")
    return result
