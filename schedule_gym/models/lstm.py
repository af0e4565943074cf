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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schedule_gym.models.lstm_match import (
    GATES,
    LSTM_CELL_SPEC,
    Cell,
    Gate,
    Grid,
    GridError,
    cell_pattern,
    find_lstm_cells,
    lstm_grid,
    match_cells,
)
from schedule_gym.models.lstm_rewrite import fused_module

__all__ = [
    "GATES",
    "LSTM_CELL_PATTERN",
    "LSTM_CELL_SPEC",
    "Cell",
    "Gate",
    "Grid",
    "GridError",
    "LSTMReport",
    "find_lstm_cells",
    "lstm_grid",
    "map_lstm",
]


def __getattr__(name: str) -> Any:
    # LSTM_CELL_PATTERN is built on first use: a Pattern checks its operators against TVM
    if name == "LSTM_CELL_PATTERN":
        return cell_pattern()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def map_lstm(mod: Any) -> tuple[Any, LSTMReport]:
    """``mod`` with its LSTM grid replaced by the fused form (Section 2, Figures 2b and 4), and the report.

    A refused mapping (no cell, an incomplete grid, layers with differing weights, inputs fed back from
    the outputs) returns ``mod`` unchanged and the report says why; near misses are listed either way.
    """
    cells, misses = match_cells(mod)
    report = LSTMReport(cells=len(cells), near_misses=misses)
    if not cells:
        report.reason = "no LSTM cell matched" + (" (see the near misses)" if misses else "")
        return mod, report
    try:
        grid = lstm_grid(cells)
        report.layers, report.steps = grid.layers, grid.steps
        new = fused_module(mod, grid)
    except GridError as why:
        report.reason = str(why)
        return mod, report
    report.mapped = True
    return new, report

