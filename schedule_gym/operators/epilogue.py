"""The bias, residual and activation epilogue of dense and conv2d: its arguments, its TE block and its NumPy
reference.

An epilogue is ``act(y + bias + R)`` on the main block's output ``y``, the bias running along one output axis and
the residual ``R`` (conv2d's: a tensor of the output's shape, the identity branch of a residual block) added
element by element; the CPU template folds it into the write-back of the output tile. :data:`ACTIVATIONS` are
the activations a task may name; GELU's erf is :func:`fast_erf_expr`, a rational polynomial that vectorises, the
tanh form's tanh :func:`fast_tanh_expr`, another, and SiLU's exponential :func:`fast_exp_expr`, a polynomial scaled
by a power of two (TVM's own ``topi`` fast forms, written as expressions so that they fuse into the write-back).
TVM is imported only when a TE block is built.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from schedule_gym.operators.base import check_bool
from schedule_gym.tasks.task import Task

__all__ = ["ACTIVATIONS", "ACTIVATION_PATTERN", "EPILOGUE_PARAMS", "Epilogue", "check_epilogue", "epilogue_suffix",
           "fast_erf_expr", "fast_exp_expr", "fast_tanh_expr"]

#: Epilogue activations of dense and conv2d: none, ReLU, ReLU6 (MobileNet-V2's ``clip(x, 0, 6)``), GELU (the
#: exact erf form, as BERT's ``nn.GELU()``), the tanh form of GELU (GPT-2's ``nn.GELU(approximate="tanh")``,
#: Relax's ``nn.gelu_tanh``), SiLU (``x * sigmoid(x)``, EfficientNet's ``nn.SiLU()``).
ACTIVATIONS = ("none", "relu", "relu6", "gelu", "gelu_tanh", "silu")
#: the activations as a task name states them (``+relu``), a regular expression alternation for the name parsers
ACTIVATION_PATTERN = "|".join(a for a in ACTIVATIONS if a != "none")

#: the task parameters that state an epilogue: tasks equal but for them run the same main loop nest
EPILOGUE_PARAMS = ("bias", "residual", "activation")

_GELU_C = 1.0 / math.sqrt(2.0)
#: the tanh form's ``sqrt(2 / pi)`` and cubic coefficient: ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))``
_GELU_TANH_C, _GELU_TANH_K = math.sqrt(2.0 / math.pi), 0.044715
#: the largest slope of either GELU (about 1.129, at x ~ 1.41): how much it can magnify an error of its input
_GELU_LIPSCHITZ = 1.13

#: float32 erf(x) = x p(x^2) / q(x^2) on x clamped to [-4, 4]: the coefficients of TVM's ``topi.fast_erf``
#: (Eigen's ``generic_fast_erf_float``), within 4.2e-7 of the exact erf on [-6, 6] (tested).
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)
_ERF_LIMIT = 4.0

#: float32 tanh(x) = x p(x^2) / q(x^2) on x clamped to +-7.905 (where float32's tanh is 1): the coefficients of
#: TVM's ``topi.fast_tanh`` (Eigen's ``generic_fast_tanh_float``), within 3.3e-7 of the exact tanh (tested)
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
           1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
_TANH_LIMIT = 7.90531110763549805

#: float32 exp(x) = 2^n (1 + f + f^2 p(f)), n = round(x log2 e), f = x - n ln 2, x clamped to +-88.38: the
#: coefficients of TVM's ``topi.fast_exp`` (Cephes' ``expf``), with Cephes' two-part ln 2 (``_LN2``), which TVM's
#: single constant lacks (its relative error grows with |n| to about 70 u at |x| ~ 87)
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_LN2 = (0.693359375, -2.12194440e-4)
#: SiLU's largest slope (at x ~ 2.4): how much it can magnify an error of its input
_SILU_LIPSCHITZ = 1.1
#: SiLU's error, in units of float32's unit roundoff u times |x|: fast_exp_expr within 1.5 u of the exact
#: exponential on [-87, 87] and the whole SiLU within 2 |x| u on [-300, 300] (both tested), with a margin
_SILU_OPS = 4


def check_epilogue(bias: object, activation: object, residual: object = False) -> None:
    """Raise naming the bad value unless ``bias`` and ``residual`` are bools and ``activation`` one of
    :data:`ACTIVATIONS`."""
    check_bool(bias, "bias")
    check_bool(residual, "residual")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def epilogue_suffix(bias: bool, activation: str, residual: bool = False) -> str:
    """``+bias+res+relu``: how a task name states its epilogue."""
    return ("+bias" if bias else "") + ("+res" if residual else "") + ("" if activation == "none" else f"+{activation}")


def _odd_rational_expr(x: Any, dtype: str, limit: float, p_coeffs: tuple[float, ...],
                       q_coeffs: tuple[float, ...]) -> Any:
    """``x p(x^2) / q(x^2)`` of a TE expression clamped to ``+-limit``, each polynomial by Horner's rule from its
    highest coefficient: the form of both odd approximations below."""
    from tvm import te

    def const(v: float) -> Any:
        return te.const(v, dtype)

    x = te.max(te.min(x, const(limit)), const(-limit))
    x2 = x * x
    p = const(p_coeffs[0])
    for c in p_coeffs[1:]:
        p = p * x2 + const(c)
    q = const(q_coeffs[0])
    for c in q_coeffs[1:]:
        q = q * x2 + const(c)
    return x * p / q


def fast_erf_expr(x: Any, dtype: str) -> Any:
    """erf of a TE expression as the rational polynomial above: it vectorises, where ``te.erf`` becomes a
    scalar call of the C library's ``erff`` per element on LLVM targets."""
    return _odd_rational_expr(x, dtype, _ERF_LIMIT, _ERF_P, _ERF_Q)


def fast_tanh_expr(x: Any, dtype: str) -> Any:
    """tanh of a TE expression as the rational polynomial above: it vectorises, where ``te.tanh`` becomes a
    scalar call of the C library's ``tanhf`` per element on LLVM targets."""
    return _odd_rational_expr(x, dtype, _TANH_LIMIT, _TANH_P, _TANH_Q)


def fast_exp_expr(x: Any, dtype: str) -> Any:
    """exp of a float32 TE expression as TVM's ``topi.fast_exp`` computes it (see :data:`_EXP_P`): it vectorises,
    where ``te.exp`` becomes a scalar call of the C library's ``expf`` per element on LLVM targets."""
    from tvm import te, tirx

    if dtype != "float32":
        raise ValueError(f"fast_exp_expr is float32 only (its range reduction builds a float32's exponent), "
                         f"got {dtype!r}")

    def const(v: float) -> Any:
        return te.const(v, dtype)

    x = te.max(te.min(x, const(88.3762626647950)), const(-88.3762626647949))
    n = te.floor(x * const(1.44269504088896341) + const(0.5))
    f = x - n * const(_LN2[0]) - n * const(_LN2[1])
    p = const(_EXP_P[0])
    for c in _EXP_P[1:]:
        p = p * f + const(c)
    y = p * f * f + f + const(1.0)
    scale = tirx.reinterpret(dtype, (n.astype("int32") + te.const(127, "int32")) << te.const(23, "int32"))
    return scale * y


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[np.float64])(x * _GELU_C))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_GELU_TANH_C * (x + _GELU_TANH_K * x ** 3)))


class Epilogue:
    """A bias (indexed by one output axis), a residual (a tensor of the output's shape) and an activation after the
    main block: the write-back block ``out_name`` that the CPU template folds into its write-back (a mixin of
    dense's and conv2d's workloads). Its inputs follow the main block's, in that order: ``[bias][, R]``."""

    out_name: str

    def bias_axis(self, task: Task) -> int:
        """The output axis the bias runs along."""
        raise NotImplementedError

    def has_epilogue(self, task: Task) -> bool:
        return (bool(task.param("bias", False)) or bool(task.param("residual", False))
                or task.param("activation", "none") != "none")

    def epilogues(self, task: Task) -> tuple[str, ...]:
        return (self.out_name,) if self.has_epilogue(task) else ()

    def epilogue_te(self, task: Task, main: Any, bias_length: int) -> tuple[list[Any], Any]:
        """(the epilogue's placeholders, bias then residual, each where the task has it; the output tensor:
        ``main`` itself without epilogue)."""
        from tvm import te

        if not self.has_epilogue(task):
            return [], main
        bias = te.placeholder((bias_length,), name="bias", dtype=task.dtype) if task.param("bias", False) else None
        residual = (te.placeholder(main.shape, name="R", dtype=task.dtype) if task.param("residual", False)
                    else None)
        activation = task.param("activation", "none")
        axis = self.bias_axis(task)
        zero, one = te.const(0.0, task.dtype), te.const(1.0, task.dtype)

        def act(*idx: Any) -> Any:
            v = main(*idx) + bias[idx[axis]] if bias is not None else main(*idx)
            v = v + residual(*idx) if residual is not None else v
            if activation == "relu":
                return te.max(v, zero)
            if activation == "relu6":
                return te.min(te.max(v, zero), te.const(6.0, task.dtype))
            if activation == "gelu":
                return te.const(0.5, task.dtype) * v * (one + fast_erf_expr(v * te.const(_GELU_C, task.dtype), task.dtype))
            if activation == "gelu_tanh":
                inner = te.const(_GELU_TANH_C, task.dtype) * (v + te.const(_GELU_TANH_K, task.dtype) * v * v * v)
                return te.const(0.5, task.dtype) * v * (one + fast_tanh_expr(inner, task.dtype))
            if activation == "silu":
                return v / (one + fast_exp_expr(-v, task.dtype))
            return v

        out = te.compute(main.shape, act, name=self.out_name)
        return [t for t in (bias, residual) if t is not None], out

    def add_bias(self, task: Task, y: np.ndarray, bias: np.ndarray) -> np.ndarray:
        shape = [1] * y.ndim
        shape[self.bias_axis(task)] = -1
        return y + bias.reshape(shape)

    def add_epilogue_inputs(self, task: Task, y: np.ndarray, extras: list[np.ndarray]) -> np.ndarray:
        """``y + bias + R`` (each where the task has it), ``extras`` the epilogue's inputs in their order."""
        extras = list(extras)
        if task.param("bias", False):
            y = self.add_bias(task, y, extras.pop(0))
        if task.param("residual", False):
            y = y + extras.pop(0)
        return y

    def activate(self, task: Task, y: np.ndarray) -> np.ndarray:
        activation = task.param("activation", "none")
        if activation == "relu":
            return np.maximum(y, 0.0)
        if activation == "relu6":
            return np.clip(y, 0.0, 6.0)
        if activation == "gelu":
            return _gelu(y)
        if activation == "gelu_tanh":
            return _gelu_tanh(y)
        if activation == "silu":
            return y / (1.0 + np.exp(-y))
        return y

    def activation_slope(self, task: Task) -> float:
        """The activation's largest slope: how much it can magnify an error of its input (Lipschitz)."""
        return {"gelu": _GELU_LIPSCHITZ, "gelu_tanh": _GELU_LIPSCHITZ,
                "silu": _SILU_LIPSCHITZ}.get(task.param("activation", "none"), 1.0)

    def epilogue_ops(self, task: Task) -> int:
        # bias add; residual add; clip's two compares are exact; GELU's multiply, add, erf (fast_erf_expr: at most
        # 4.2e-7 absolute, about 7 u of float32), multiply; the tanh form's five operations before its tanh (through
        # which an error shrinks: tanh's slope is at most 1) and tanh (fast_tanh_expr: at most 3.3e-7, about 6 u),
        # then the same; SiLU's (see _SILU_OPS)
        activation = task.param("activation", "none")
        adds = int(bool(task.param("bias", False))) + int(bool(task.param("residual", False)))
        return adds + {"none": 0, "relu": 0, "relu6": 0, "gelu": 16, "gelu_tanh": 16, "silu": _SILU_OPS}[activation]

    def epilogue_formula(self, task: Task, inner: str) -> str:
        inner += " + bias" if task.param("bias", False) else ""
        inner += " + R" if task.param("residual", False) else ""
        activation = task.param("activation", "none")
        return inner if activation == "none" else f"{activation}({inner})"
