"""The LSTM mapping (Xiao et al., Section 2): native cells found as a layers x steps grid and replaced by
the fused form, which computes the same outputs and maps its merged matmuls to dense tasks."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tvm")

from schedule_gym.models import lstm  # noqa: E402
from schedule_gym.models.importer import import_model  # noqa: E402
from schedule_gym.models.mapping import Pattern, map_model  # noqa: E402
from schedule_gym.models.zoo import LSTMLanguageModel, NativeLSTMCell, build_model  # noqa: E402

LAYERS, STEPS, BATCH, HIDDEN = 2, 4, 3, 16  # tiny-lstm


@pytest.fixture(scope="module")
def tiny():
    spec = build_model("tiny-lstm")
    assert tuple(spec.inputs[0].shape) == (BATCH, STEPS)
    return spec, import_model(spec.module, spec.inputs, name="tiny-lstm")


@pytest.fixture(scope="module")
def tiny_mapped(tiny):
    _, mod = tiny
    return lstm.map_lstm(mod)


def test_pattern_is_data():
    pattern = lstm.LSTM_CELL_PATTERN
    assert isinstance(pattern, Pattern) and pattern.op_type == "lstm"
    assert pattern == Pattern.from_dict(lstm.LSTM_CELL_SPEC)
    assert pattern.output == "h" and set(pattern.cell_input) == {"ui", "uf", "ug", "uo", "fc"}
    ops = [node.op for _, node in pattern.cell]
    assert ops.count("matmul") == 8 and ops.count("sigmoid") == 3 and ops.count("tanh") == 2


def test_cells_form_the_grid(tiny):
    _, mod = tiny
    cells = lstm.find_lstm_cells(mod)
    assert len(cells) == LAYERS * STEPS
    grid = lstm.lstm_grid(cells)
    assert (grid.layers, grid.steps) == (LAYERS, STEPS)
    for layer, row in enumerate(grid.cells):
        assert len(row) == STEPS
        assert row[0].h_prev is None  # zero initial state: the hidden matmuls were folded into constants
        for t in range(1, STEPS):
            assert row[t].h_prev.same_as(row[t - 1].h) and row[t].c_prev.same_as(row[t - 1].c)
            assert row[t].gates["i"].U.shape == (HIDDEN, HIDDEN)
        if layer:
            assert all(cell.x.same_as(below.h) for cell, below in zip(row, grid.cells[layer - 1]))
    with pytest.raises(lstm.GridError, match="steps"):
        lstm.lstm_grid([c for c in cells if c is not grid.cells[1][2]])  # a hole in the grid


def test_mapped_model_computes_the_same(tiny, tiny_mapped):
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels

    spec, mod = tiny
    new, report = tiny_mapped
    assert report.mapped and (report.cells, report.layers, report.steps) == (LAYERS * STEPS, LAYERS, STEPS)
    assert not lstm.find_lstm_cells(new)
    with torch.no_grad():
        expected = spec.module(*spec.inputs).numpy()
    target = host_llvm_target(1)
    for graph in (mod, new):
        (out,) = run_model(compile_model(schedule_kernels(map_model(graph)), target), spec.inputs)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_merged_input_projection_is_one_dense_task_per_layer(tiny_mapped):
    new, _ = tiny_mapped
    weights = map_model(new).task_weights()
    assert weights[f"dense-{STEPS * BATCH}x{HIDDEN}x{4 * HIDDEN}+bias"] == LAYERS  # both layers have in = H
    assert weights[f"dense-{BATCH}x{HIDDEN}x{4 * HIDDEN}"] == LAYERS * (STEPS - 1)  # step 0 has h = 0
    assert not any(name.endswith(f"x{HIDDEN}x{HIDDEN}") or f"x{HIDDEN}x{HIDDEN}+" in name for name in weights)


class _ReluCandidate(NativeLSTMCell):
    def forward(self, x, h, c):
        i = torch.sigmoid(self.x_i(x) + self.h_i(h))
        f = torch.sigmoid(self.x_f(x) + self.h_f(h))
        g = torch.relu(self.x_g(x) + self.h_g(h))
        o = torch.sigmoid(self.x_o(x) + self.h_o(h))
        c = f * c + i * g
        return o * torch.tanh(c), c


class _ForgetWithoutHidden(NativeLSTMCell):
    def forward(self, x, h, c):
        i = torch.sigmoid(self.x_i(x) + self.h_i(h))
        f = torch.sigmoid(self.x_f(x))
        g = torch.tanh(self.x_g(x) + self.h_g(h))
        o = torch.sigmoid(self.x_o(x) + self.h_o(h))
        c = f * c + i * g
        return o * torch.tanh(c), c


@pytest.mark.parametrize("cell, why", [(_ReluCandidate, "gate g is nn.relu, not tanh"),
                                       (_ForgetWithoutHidden, "gate f's pre-activation")])
def test_near_miss_is_not_mapped(cell, why):
    torch.manual_seed(0)
    model = LSTMLanguageModel(vocab=20, hidden=8, num_layers=1)
    model.cells = torch.nn.ModuleList([cell(8, 8)])
    mod = import_model(model, (torch.randint(0, 20, (2, 2)),))
    new, report = lstm.map_lstm(mod)
    assert new is mod and not report.mapped and report.cells == 0
    assert "no LSTM cell matched" in report.reason
    assert len(report.near_misses) == 2 and all(why in m for m in report.near_misses)
    assert any(why in line for line in report.lines())


@pytest.mark.slow  # importing the full graph takes 30-80 s on one loaded core (mostly constant folding)
def test_lstm_ptb_grid():
    spec = build_model("lstm-ptb")
    mod = import_model(spec.module, spec.inputs, name="lstm-ptb")
    cells = lstm.find_lstm_cells(mod)
    assert len(cells) == 40
    grid = lstm.lstm_grid(cells)
    assert (grid.layers, grid.steps) == (2, 20)
    assert grid.cells[1][19].gates["o"].W.shape == (200, 200)
