"""Any PyTorch model in: ``compile_torch`` (one call), ``tune-model --model package.module:factory`` and the
``torch.compile`` backend, on models defined here. Tuning uses the mock backend (quick); the check is a real
TVM build whose outputs must equal PyTorch's within ``RELATIVE_TOLERANCE`` of the largest output."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from schedule_gym.cli import main  # noqa: E402
from schedule_gym.models import compile_torch  # noqa: E402
from schedule_gym.models.importer import ModelImportError  # noqa: E402
from schedule_gym.models.pipeline import RELATIVE_TOLERANCE, OutputMismatchError  # noqa: E402

MOCK = {"backend": "mock", "agent": "random", "round_measurements": 4}


class SmallCNN(nn.Module):
    """conv-bn-relu, max pool, a second conv with ReLU, Linear; two outputs in a dict (the layout transforms
    around the convolutions are left to TVM)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        y = self.pool(torch.relu(self.bn(self.conv(x))))
        y = torch.relu(self.conv2(y))
        return {"logits": self.fc(y.flatten(1)), "features": y}


class SmallMLP(nn.Module):
    """Linear, LayerNorm, tanh, Linear, softmax: layer norm, tanh and softmax are left to TVM."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.norm, self.b = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x):
        return torch.softmax(self.b(torch.tanh(self.norm(self.a(x)))), -1)


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    model = SmallCNN()
    with torch.no_grad():  # non-trivial statistics, so folding batch norm is exercised
        model.bn.running_mean.normal_(0, 0.1)
        model.bn.running_var.uniform_(0.5, 1.5)
        model.bn.weight.uniform_(0.5, 1.5)
    return model.eval()


def small_mlp() -> nn.Module:
    torch.manual_seed(1)
    return SmallMLP().eval()


def assert_close(actual, expected) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected.detach())
    assert actual.shape == expected.shape
    assert np.max(np.abs(actual - expected)) <= RELATIVE_TOLERANCE * np.max(np.abs(expected))


# ----------------------------------------------------------------------------- compile_torch
@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return tmp_path_factory.mktemp("compile") / "cnn.jsonl"


@pytest.fixture(scope="module")
def compiled_cnn(records):
    return compile_torch(small_cnn(), torch.randn(1, 3, 8, 8), budget=16, records=records, **MOCK)


@pytest.mark.tvm
def test_compiled_cnn_equals_pytorch_on_new_inputs_in_the_modules_output_structure(compiled_cnn) -> None:
    model = small_cnn()
    for seed in (1, 2):
        x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
        out, ref = compiled_cnn(x), model(x)
        assert isinstance(out, dict) and set(out) == {"logits", "features"}
        assert all(isinstance(v, torch.Tensor) for v in out.values())
        for key in ref:
            assert_close(out[key], ref[key])
    arrays = compiled_cnn(x.numpy())  # NumPy in, NumPy out
    assert isinstance(arrays["logits"], np.ndarray)
    assert_close(arrays["logits"], ref["logits"])


@pytest.mark.tvm
def test_report_names_tasks_weights_measurements_what_is_left_to_tvm_and_the_error(compiled_cnn, records) -> None:
    report = compiled_cnn.report
    assert {t.name for t in report.tasks} == {t.task.name for t in compiled_cnn.mapped.tasks}
    kinds = [t.name.split("-")[0] for t in report.tasks]
    assert kinds.count("conv2d") == 2 and kinds.count("dense") == 1  # bn folded, relu fused into the convolutions
    assert any(t.name.startswith("conv2d") and t.name.endswith("+bias+relu") for t in report.tasks)
    assert all(t.weight == 1 for t in report.tasks)
    assert report.measurements == 16 and report.new_measurement_count == 16
    assert report.new_measurements == {t.name: t.measurements for t in report.tasks}
    assert len(records.read_text().splitlines()) == 16
    assert all(t.measurements >= 4 and t.best_latency_s is not None for t in report.tasks)
    assert report.left_to_tvm == dict(compiled_cnn.mapped.report.left) and report.left_to_tvm
    for op in report.left_to_tvm:
        assert any(line.startswith("left") and op in line for line in report.mapping)
    assert 0 <= report.max_relative_error <= report.tolerance and report.max_abs_error >= 0
    assert report.latency_s == {}  # not asked
    assert json.loads(json.dumps(report.to_dict()))["new_measurement_count"] == 16
    assert any("outputs equal PyTorch's" in line for line in report.lines())


@pytest.mark.tvm
def test_a_second_call_with_the_records_measures_nothing_new(compiled_cnn, records) -> None:
    lines = records.read_text().splitlines()
    again = compile_torch(small_cnn(), torch.randn(1, 3, 8, 8), budget=16, records=records, **MOCK)
    assert records.read_text().splitlines() == lines
    assert again.report.new_measurement_count == 0 and again.report.measurements == 16
    first = {t.name: t.best_latency_s for t in compiled_cnn.report.tasks}
    assert {t.name: t.best_latency_s for t in again.report.tasks} == first


@pytest.mark.tvm
def test_ops_the_mapping_leaves_to_tvm_are_compiled_and_checked_with_packed_kernels(tmp_path) -> None:
    model = small_mlp()
    compiled = compile_torch(model, (torch.randn(4, 16),), budget=8, packed=True, compare=True, repeat=1, **MOCK)
    assert set(compiled.report.latency_s) == {"compiled", "torch eager"}  # asked for: both timed (values not checked)
    left = compiled.report.left_to_tvm
    assert {"relax.nn.layer_norm", "relax.tanh", "relax.nn.softmax"} <= set(left)
    names = [t.name for t in compiled.report.tasks]
    assert [n.split("-")[0] for n in names] == ["dense", "dense"] and all(n.endswith("-packed") for n in names)
    x = torch.randn(4, 16)
    assert_close(compiled(x), model(x))
    with pytest.raises(ValueError, match=r"input 0 is float32\[2, 16\]; the model was compiled for float32\[4, 16\]"):
        compiled(torch.randn(2, 16))
    with pytest.raises(TypeError, match="compiled for 1 inputs, got 2"):
        compiled(x, x)


@pytest.mark.tvm
def test_fast_math_reaches_the_build_and_the_model_still_equals_pytorch(monkeypatch) -> None:
    """``fast_math=True`` builds the softmax, tanh and layer norm's neighbours left to TVM with the approximations
    (tests/test_fast_math.py bounds them) and the outputs pass the same check."""
    from schedule_gym.models import build

    asked, real = [], build.compile_model

    def spy(*args, **kwargs):
        asked.append(kwargs.get("fast_math"))
        return real(*args, **kwargs)

    monkeypatch.setattr(build, "compile_model", spy)
    model = small_mlp()
    compiled = compile_torch(model, (torch.randn(4, 16),), budget=0, fast_math=True, **MOCK)
    assert asked == [True]
    x = torch.randn(4, 16)
    assert_close(compiled(x), model(x))


@pytest.mark.tvm
def test_a_build_whose_outputs_differ_raises_naming_the_largest_error(monkeypatch) -> None:
    from schedule_gym.models.compiled import CompiledModel

    run = CompiledModel.run
    monkeypatch.setattr(CompiledModel, "run", lambda self, *xs: [a + 0.5 for a in run(self, *xs)])
    with pytest.raises(OutputMismatchError, match=r"model 'SmallMLP'.*output 0: max \|error\| 0\.5"):
        compile_torch(small_mlp(), torch.randn(4, 16), budget=0, **MOCK)


def test_a_module_torch_export_cannot_capture_is_named_in_one_line() -> None:
    class DataDependent(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x

    with pytest.raises(ModelImportError, match="model 'DataDependent': torch.export cannot capture it: .*data-dependent") as info:
        compile_torch(DataDependent(), torch.randn(3), budget=0, backend="mock")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: (small_mlp(), (torch.randn(4, 16), 3)), r"example_inputs\[1\] is a int, not a torch.Tensor"),
        (lambda: (small_mlp(), [[1.0] * 16]), r"example_inputs\[0\] is a list"),
        (lambda: (small_mlp(), {"x": torch.randn(4, 16)}), "a tensor or a tuple of tensors"),
        (lambda: (lambda x: x, torch.randn(4, 16)), "module must be a torch.nn.Module"),
    ],
)
def test_inputs_that_are_not_tensors_are_named(make, message) -> None:
    module, inputs = make()
    with pytest.raises(TypeError, match=message):
        compile_torch(module, inputs, budget=0, backend="mock")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: (small_mlp(), torch.randn(4, 16, dtype=torch.float64)), "input 0 has dtype float64"),
        (lambda: (small_mlp().half(), torch.randn(4, 16)), "parameter 'a.weight' has dtype float16"),
        (lambda: (small_mlp(), torch.randn(4, 16).to_sparse()), "input 0 is a torch.sparse_coo"),
    ],
)
def test_unsupported_dtypes_and_layouts_are_named(make, message) -> None:
    module, inputs = make()
    with pytest.raises(ModelImportError, match=message):
        compile_torch(module, inputs, budget=0, backend="mock")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"budget": -1}, "budget must be"),
        ({"budget": 4, "backend": "replay"}, "backend must be one of"),
        ({"budget": 4, "agent": "csp"}, "agent must be a tile agent"),
        ({"budget": 4, "threads": 0}, "threads must be"),
    ],
)
def test_bad_options_are_named_before_anything_is_imported(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        compile_torch(small_mlp(), torch.randn(4, 16), **kwargs)


# ----------------------------------------------------------------------------- the command line
FACTORY = textwrap.dedent('''
    import torch
    from torch import nn

    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval(), (torch.randn(2, 8),)

    def module_only():
        return nn.Linear(2, 2)

    not_callable = 3
''')


@pytest.fixture
def factory_dir(tmp_path, monkeypatch):
    (tmp_path / "my_models_for_test.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    import sys

    sys.modules.pop("my_models_for_test", None)


@pytest.mark.tvm
def test_tune_model_takes_a_factory_reference(factory_dir, capsys) -> None:
    out = factory_dir / "r.json"
    code = main(["tune-model", "--model", "my_models_for_test:make", "--budget", "8", "--agent", "random",
                 "--backend", "mock", "--round", "4", "--threads", "1", "--repeat", "1", "--result", str(out),
                 "--fast-math"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "model my_models_for_test:make: Sequential from my_models_for_test:make" in text
    assert "outputs equal PyTorch's" in text
    data = json.loads(out.read_text())
    assert data["check"] == "ok" and data["measurements"] == 8 and len(data["tasks"]) == 2


@pytest.mark.parametrize(
    "reference, message",
    [
        ("no_such_module_here:make", "cannot import 'no_such_module_here'"),
        ("my_models_for_test:missing", "'my_models_for_test' has no attribute 'missing'"),
        ("my_models_for_test:not_callable", "'not_callable' is a int, not a callable"),
        ("my_models_for_test:module_only", r"the factory returned a Linear; it must return \(module, example_inputs\)"),
        ("my_models_for_test:", "is not package.module:factory"),
        ("resnet1000", "unknown model 'resnet1000'; known models: .*package.module:factory"),
    ],
)
def test_tune_model_names_a_bad_factory_reference(factory_dir, reference, message, capsys) -> None:
    assert main(["tune-model", "--model", reference, "--budget", "4", "--backend", "mock"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: ") and len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, err), err


# ----------------------------------------------------------------------------- torch.compile
@pytest.mark.tvm
def test_torch_compile_backend_by_name_equals_eager_and_runs_eagerly_once_weights_change(tmp_path) -> None:
    torch._dynamo.reset()
    model = small_cnn()
    fast = torch.compile(model, backend="schedule_gym", dynamic=False,
                         options={"budget": 12, "records": str(tmp_path / "dynamo.jsonl"), **MOCK})
    with torch.no_grad():
        for seed in (1, 2):
            x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
            out, ref = fast(x), model(x)
            for key in ref:
                assert_close(out[key], ref[key])
        assert len((tmp_path / "dynamo.jsonl").read_text().splitlines()) == 12
        model.fc.bias.add_(1.0)  # weights bound at compile time changed: eager, with a warning
        with pytest.warns(RuntimeWarning, match="its weights changed after it was compiled"):
            out = fast(x)
        assert torch.equal(out["logits"], model(x)["logits"])
    torch._dynamo.reset()


@pytest.mark.tvm
def test_torch_compile_falls_back_to_eager_naming_why() -> None:
    from schedule_gym.models import torch_backend

    class Unsupported(nn.Module):
        def forward(self, x):
            return torch.special.erfinv(x) + 1

    torch._dynamo.reset()
    x = torch.rand(4) - 0.5
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="runs in eager PyTorch: .*erfinv"):
        out = torch.compile(Unsupported(), backend=torch_backend(budget=0, backend="mock"), dynamic=False)(x)
    assert torch.equal(out, Unsupported()(x))
    torch._dynamo.reset()
    model = small_mlp()  # with gradients on, the graph needs them: eager
    with pytest.warns(RuntimeWarning, match="the graph needs gradients"):
        out = torch.compile(model, backend=torch_backend(budget=0, backend="mock"), dynamic=False)(torch.ones(4, 16))
    assert torch.equal(out, model(torch.ones(4, 16)))
    torch._dynamo.reset()


def test_torch_backend_names_bad_options_at_once() -> None:
    from schedule_gym.models.dynamo import schedule_gym_backend, torch_backend

    with pytest.raises(ValueError, match="budget must be"):
        torch_backend(budget=-3)
    with pytest.raises(ValueError, match="agent must be a tile agent"):
        torch_backend(budget=3, agent="nope")
    with pytest.raises(TypeError, match="bad torch_backend options \\['bugdet'\\]"):
        schedule_gym_backend(None, [], options={"budget": 3, "bugdet": 4})
    with pytest.raises(ValueError, match="needs options=\\{'budget': N\\}"):
        schedule_gym_backend(None, [], options={"backend": "mock"})
    with pytest.raises(ValueError, match="has no modes"):
        schedule_gym_backend(None, [], mode="max-autotune")
