"""Rewriting an LSTM grid into the fused form (the rewriting half of :mod:`schedule_gym.models.lstm`; Xiao
et al., "Optimization Mapping for Deep Learning", Figures 2b and 4): per layer the four gate weights merged,
the input projection of all steps in one matmul, then per step one recurrent matmul, the gate split, the
activations and the state update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from schedule_gym.models.lstm_match import GATES, Grid, GridError, const_value, is_const, var_name

__all__ = ["fused_module"]


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
            zero_c = is_const(cell.c_prev) and not np.any(const_value(cell.c_prev))
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


def fused_module(mod: Any, grid: Grid) -> Any:
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
            raise GridError(f"the grid's input {var_name(x)} depends on the cells' outputs (fed back): "
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

