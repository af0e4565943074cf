"""Fast math for the operators a model leaves to TVM: softmax, ``exp``, ``tanh``, ``erf`` and both GELUs.

TVM lowers ``exp`` (and ``tanh``, written with it) on a CPU to LLVM's ``llvm.exp``, which has no vector form
on x86 without a vector math library: a vectorised softmax or GELU still calls the scalar ``expf`` once a
lane, and these functions are the largest operators transformers leave to TVM (BERT's softmax, GPT-2's
tanh-form GELU; measured in ``docs/results/models.md``). TVM's ``topi.fast_exp``,
``fast_tanh`` and ``fast_erf`` are polynomial and rational approximations built of arithmetic alone, so they
vectorise; the epilogues of our own kernels already use ``fast_erf`` for GELU
(:mod:`schedule_gym.operators.epilogue`). :func:`fast_math_pass` is TVM's ``FastMathTransform`` (softmax,
``exp``, ``erf``, ``tanh``) extended to the GELUs, which Relax keeps as operators of their own
(``relax.nn.gelu``, ``relax.nn.gelu_tanh``) and which TVM's pass therefore misses.

PyTorch's CPU kernels are approximations too (SLEEF's vectorised ``exp`` and ``tanh``, 1 ulp). The model
tests check the outputs against PyTorch with the same tolerance as without fast math
(:data:`schedule_gym.models.pipeline.RELATIVE_TOLERANCE`), and ``tests/test_fast_math.py`` bounds each
approximation's error against float64.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["FAST_OPS", "fast_math_pass"]

#: the Relax operators :func:`fast_math_pass` replaces, and the name of each replacement's function
FAST_OPS = {"relax.nn.softmax": "fast_softmax", "relax.exp": "fast_exp", "relax.erf": "fast_erf",
            "relax.tanh": "fast_tanh", "relax.nn.gelu": "fast_gelu", "relax.nn.gelu_tanh": "fast_gelu_tanh"}


def _gelu_tanh(x: Any) -> Any:
    from tvm import te, topi, tirx

    c = tirx.const(math.sqrt(2.0 / math.pi), x.dtype)
    k = tirx.const(0.044715, x.dtype)
    half, one = tirx.const(0.5, x.dtype), tirx.const(1.0, x.dtype)
    inner = te.compute(x.shape, lambda *i: c * x(*i) * (one + k * x(*i) * x(*i)), name="gelu_inner")
    t = topi.fast_tanh(inner)
    return te.compute(x.shape, lambda *i: half * x(*i) * (one + t(*i)), name="gelu_tanh")


def _gelu(x: Any) -> Any:
    from tvm import te, topi, tirx

    scaled = te.compute(x.shape, lambda *i: x(*i) * tirx.const(1.0 / math.sqrt(2.0), x.dtype), name="gelu_scaled")
    e = topi.fast_erf(scaled)
    half, one = tirx.const(0.5, x.dtype), tirx.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: half * x(*i) * (one + e(*i)), name="gelu")


def fast_math_pass() -> Any:
    """A Relax module pass replacing :data:`FAST_OPS` calls by TVM's fast approximations (``topi.fast_*``,
    ``topi.nn.fast_softmax``), each a ``call_tir`` of a TE function; run it before legalisation."""
    import tvm
    from tvm import relax, topi

    te_functions = {"relax.nn.softmax": topi.nn.fast_softmax, "relax.exp": topi.fast_exp, "relax.erf": topi.fast_erf,
                    "relax.tanh": topi.fast_tanh, "relax.nn.gelu": _gelu, "relax.nn.gelu_tanh": _gelu_tanh}

    @relax.expr_functor.mutator
    class _FastMath(relax.PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            op = getattr(call.op, "name", None)
            if op not in FAST_OPS:
                return call
            args = (call.args[0], int(call.attrs.axis)) if op == "relax.nn.softmax" else (call.args[0],)
            return self.builder_.call_te(te_functions[op], *args, primfunc_name_hint=FAST_OPS[op])

    @tvm.transform.module_pass(opt_level=0, name="ScheduleGymFastMath")
    def apply(mod: Any, _ctx: Any) -> Any:
        mutator = _FastMath(mod)
        for gvar, func in mod.functions_items():
            if isinstance(func, relax.Function):
                mutator.builder_.update_func(gvar, mutator.visit_expr(func))
        return mutator.builder_.get()

    return apply
