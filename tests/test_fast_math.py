"""Fast math for the operators a model leaves to TVM (models/fast_math.py): what the pass replaces, how far each
approximation is from float64, and whole models built with it against PyTorch."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytestmark = pytest.mark.tvm

tvm = pytest.importorskip("tvm")

from schedule_gym.models.build import compile_model, run_model  # noqa: E402
from schedule_gym.models.fast_math import FAST_OPS, fast_math_pass  # noqa: E402

ERF = np.vectorize(math.erf)
GELU_C = math.sqrt(2.0 / math.pi)

#: op -> (the Relax call, the float64 reference, the inputs' range, the largest error allowed: relative to the
#: reference for exp, absolute for the bounded functions). TVM's own functions are within 6e-8 (exp, tanh, erf)
#: and 5e-7 (the GELUs) on these ranges, the fast ones within 3e-7 and 1e-6 (200,001 points each, 2026-11-28);
#: the bound leaves a factor of two, and a wrong formula (a missing factor, a sign) is off by O(0.1).
CASES = {
    "exp": (lambda x: tvm.relax.op.exp(x), np.exp, (-80.0, 80.0), 2e-6),
    "tanh": (lambda x: tvm.relax.op.tanh(x), np.tanh, (-12.0, 12.0), 2e-6),
    "erf": (lambda x: tvm.relax.op.erf(x), ERF, (-6.0, 6.0), 2e-6),
    "gelu": (lambda x: tvm.relax.op.nn.gelu(x), lambda v: 0.5 * v * (1 + ERF(v / math.sqrt(2.0))), (-8.0, 8.0), 2e-6),
    "gelu_tanh": (lambda x: tvm.relax.op.nn.gelu_tanh(x),
                  lambda v: 0.5 * v * (1 + np.tanh(GELU_C * (v + 0.044715 * v ** 3))), (-8.0, 8.0), 2e-6),
}


def one_op_module(call, shape):
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))  # 0.27: struct info is a type
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(call(x))
        bb.emit_func_output(out)
    return bb.get()


def host():
    from schedule_gym.backends.tvm.targets import host_llvm_target

    return host_llvm_target(1)


def test_the_pass_replaces_every_fast_op_and_leaves_the_rest():
    from tvm import relax

    mod = one_op_module(lambda x: relax.op.add(relax.op.nn.softmax(relax.op.nn.gelu_tanh(x)), relax.op.exp(x)), (4, 8))
    fast = fast_math_pass()(mod)
    text = fast.script()
    for op in FAST_OPS:
        assert f"R.{op.removeprefix('relax.')}(" not in text
    assert "R.add(" in text  # not a fast op: kept
    names = {gv.name_hint for gv in fast.get_global_vars()}
    assert {"fast_softmax", "fast_gelu_tanh", "fast_exp"} <= names


@pytest.mark.parametrize("op", list(CASES))
def test_each_approximation_is_close_to_float64(op):
    call, reference, (low, high), bound = CASES[op]
    x = np.linspace(low, high, 20_001, dtype=np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, 1e-6, -1e-6])])
    executable = compile_model(one_op_module(call, x.shape), host(), fast_math=True)
    (out,) = run_model(executable, [x])
    want = reference(x.astype(np.float64))
    error = np.abs(out.astype(np.float64) - want)
    if op == "exp":
        error = error / want
    assert float(error.max()) <= bound, f"{op}: max error {float(error.max()):.3g} at x = {float(x[error.argmax()])}"


def test_softmax_is_close_to_float64_and_sums_to_one():
    from tvm import relax

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 128)) * 8).astype(np.float32)
    executable = compile_model(one_op_module(lambda v: relax.op.nn.softmax(v), x.shape), host(), fast_math=True)
    (out,) = run_model(executable, [x])
    z = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    want = z / z.sum(axis=1, keepdims=True)
    assert float(np.abs(out - want).max()) <= 1e-6
    assert np.allclose(out.sum(axis=1), 1.0, atol=1e-5)


def test_without_fast_math_the_build_keeps_tvms_functions():
    """The flag is what changes the build: the default keeps TVM's own exp (so a test of the approximations above
    is not a test of TVM's exact functions)."""
    from tvm import relax

    from schedule_gym.models.build import fused_module

    mod = one_op_module(lambda v: relax.op.nn.softmax(v), (4, 8))
    names = {gv.name_hint for gv in fused_module(mod, host()).get_global_vars()}
    assert "softmax" in names and "fast_softmax" not in names


@pytest.mark.parametrize("name", ["tiny-bert", "tiny-gpt2"])
def test_models_built_with_fast_math_equal_pytorch(name):
    """A transformer with softmax, layer norm and its GELU left to TVM, built with fast math: its outputs equal
    PyTorch's within the tolerance every build is held to."""
    from schedule_gym.models.pipeline import check_outputs, load_model, torch_outputs

    loaded = load_model(name)
    executable = compile_model(loaded.canonical, host(), fast_math=True)
    assert check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec)) is None
