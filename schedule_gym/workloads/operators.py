"""The workloads of GEMM, batch matmul, dense (with its epilogue) and conv2d."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from schedule_gym.tasks import Task
from schedule_gym.workloads.base import Workload

__all__ = ["BatchMatmulWorkload", "Conv2dWorkload", "DenseWorkload", "GemmWorkload"]


def _extents(task: Task, *names: str) -> tuple[int, ...]:
    return tuple(task.dim(x).extent for x in names)


def _matmul_te(task: Task, lhs: str, rhs: str) -> list[Any]:
    """``C[m, n] = sum_k lhs[m, k] * rhs[k, n]`` in TE: the placeholders and the main block ``C``."""
    from tvm import te

    m, k, n = _extents(task, "m", "k", "n")
    a = te.placeholder((m, k), name=lhs, dtype=task.dtype)
    b = te.placeholder((k, n), name=rhs, dtype=task.dtype)
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return [a, b, c]


class GemmWorkload(Workload):
    """``C[m, n] = sum_k A[m, k] * B[k, n]``."""

    op = "gemm"

    def te_tensors(self, task: Task) -> list[Any]:
        return _matmul_te(task, "A", "B")

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        m, k, n = _extents(task, "m", "k", "n")
        return [(m, k), (k, n)]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        m, _, n = _extents(task, "m", "k", "n")
        return (m, n)

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        a, b = inputs
        return a @ b

    def formula(self, task: Task) -> str:
        return "A @ B"


class BatchMatmulWorkload(Workload):
    """``C[b, m, n] = sum_k A[b, m, k] * B[b, k, n]``, with ``A`` stored ``[b, k, m]`` if ``transpose_a`` and
    ``B`` stored ``[b, n, k]`` if ``transpose_b``."""

    op = "batch_matmul"

    def te_tensors(self, task: Task) -> list[Any]:
        from tvm import te

        ta, tb = task.param("transpose_a"), task.param("transpose_b")
        shape_a, shape_b = self.input_shapes(task)
        a = te.placeholder(shape_a, name="A", dtype=task.dtype)
        b = te.placeholder(shape_b, name="B", dtype=task.dtype)
        r = te.reduce_axis((0, task.dim("k").extent), name="k")

        def body(z: Any, i: Any, j: Any) -> Any:
            lhs = a[z, r, i] if ta else a[z, i, r]
            rhs = b[z, j, r] if tb else b[z, r, j]
            return te.sum(lhs * rhs, axis=r)

        c = te.compute(self.output_shape(task), body, name="C")
        return [a, b, c]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        bb, m, k, n = _extents(task, "b", "m", "k", "n")
        shape_a = (bb, k, m) if task.param("transpose_a") else (bb, m, k)
        shape_b = (bb, n, k) if task.param("transpose_b") else (bb, k, n)
        return [shape_a, shape_b]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        bb, m, _, n = _extents(task, "b", "m", "k", "n")
        return (bb, m, n)

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        a, b = inputs
        if task.param("transpose_a"):
            a = a.transpose(0, 2, 1)
        if task.param("transpose_b"):
            b = b.transpose(0, 2, 1)
        return a @ b

    def formula(self, task: Task) -> str:
        lhs = "A^T" if task.param("transpose_a") else "A"
        rhs = "B^T" if task.param("transpose_b") else "B"
        return f"{lhs} @ {rhs} per batch"


_GELU_C = 1.0 / math.sqrt(2.0)
#: the largest slope of GELU (at x ~ 0.75): how much it can magnify an error of its input
_GELU_LIPSCHITZ = 1.13


#: float32 erf(x) = x p(x^2) / q(x^2) on x clamped to [-4, 4]: the coefficients of TVM's ``topi.fast_erf``
#: (Eigen's ``generic_fast_erf_float``), max abs error 4.2e-7 against the exact erf on [-6, 6] (tested).
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def fast_erf_expr(x: Any, dtype: str) -> Any:
    """erf of a TE expression as the rational polynomial above: it vectorises, where ``te.erf`` becomes a
    scalar call of the C library's ``erff`` per element on LLVM targets (which made a 128 x 768 x 3072
    dense + GELU kernel run at half the speed of the same kernel without its epilogue)."""
    from tvm import te

    def const(v: float) -> Any:
        return te.const(v, dtype)

    x = te.max(te.min(x, const(4.0)), const(-4.0))
    x2 = x * x
    p = const(_ERF_P[0])
    for c in _ERF_P[1:]:
        p = p * x2 + const(c)
    q = const(_ERF_Q[0])
    for c in _ERF_Q[1:]:
        q = q * x2 + const(c)
    return x * p / q


def _gelu(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[np.float64])(x * _GELU_C))


class _Epilogue:
    """A bias (indexed by one output axis) and an activation after the main block: the write-back block
    ``out_name`` that the CPU template folds into its write-back (dense and conv2d)."""

    out_name: str

    def bias_axis(self, task: Task) -> int:
        """The output axis the bias runs along."""
        raise NotImplementedError

    def has_epilogue(self, task: Task) -> bool:
        return bool(task.param("bias", False)) or task.param("activation", "none") != "none"

    def epilogues(self, task: Task) -> tuple[str, ...]:
        return (self.out_name,) if self.has_epilogue(task) else ()

    def epilogue_te(self, task: Task, main: Any, bias_length: int) -> tuple[list[Any], Any]:
        """(the bias placeholder as a list, or []; the output tensor: ``main`` itself without epilogue)."""
        from tvm import te

        if not self.has_epilogue(task):
            return [], main
        bias = te.placeholder((bias_length,), name="bias", dtype=task.dtype) if task.param("bias", False) else None
        activation = task.param("activation", "none")
        axis = self.bias_axis(task)
        zero, one = te.const(0.0, task.dtype), te.const(1.0, task.dtype)

        def act(*idx: Any) -> Any:
            v = main(*idx) + bias[idx[axis]] if bias is not None else main(*idx)
            if activation == "relu":
                return te.max(v, zero)
            if activation == "relu6":
                return te.min(te.max(v, zero), te.const(6.0, task.dtype))
            if activation == "gelu":
                return te.const(0.5, task.dtype) * v * (one + fast_erf_expr(v * te.const(_GELU_C, task.dtype), task.dtype))
            return v

        out = te.compute(main.shape, act, name=self.out_name)
        return ([bias] if bias is not None else []), out

    def add_bias(self, task: Task, y: np.ndarray, bias: np.ndarray) -> np.ndarray:
        shape = [1] * y.ndim
        shape[self.bias_axis(task)] = -1
        return y + bias.reshape(shape)

    def activate(self, task: Task, y: np.ndarray) -> np.ndarray:
        activation = task.param("activation", "none")
        if activation == "relu":
            return np.maximum(y, 0.0)
        if activation == "relu6":
            return np.clip(y, 0.0, 6.0)
        if activation == "gelu":
            return _gelu(y)
        return y

    def activation_slope(self, task: Task) -> float:
        """The activation's largest slope: how much it can magnify an error of its input (Lipschitz)."""
        return _GELU_LIPSCHITZ if task.param("activation", "none") == "gelu" else 1.0

    def epilogue_ops(self, task: Task) -> int:
        # bias add; clip's two compares are exact; GELU's multiply, add, erf (fast_erf_expr: at most 4.2e-7
        # absolute, about 7 u of float32), multiply
        activation = task.param("activation", "none")
        return int(bool(task.param("bias", False))) + {"none": 0, "relu": 0, "relu6": 0, "gelu": 16}[activation]

    def epilogue_formula(self, task: Task, inner: str) -> str:
        inner += " + bias" if task.param("bias", False) else ""
        activation = task.param("activation", "none")
        return inner if activation == "none" else f"{activation}({inner})"


class DenseWorkload(_Epilogue, Workload):
    """``Y[m, n] = act(sum_k X[m, k] * W[k, n] + bias[n])`` (see :func:`schedule_gym.tasks.dense`)."""

    op = "dense"
    out_name = "Y"

    def bias_axis(self, task: Task) -> int:
        return 1

    def te_tensors(self, task: Task) -> list[Any]:
        x, w, c = _matmul_te(task, "X", "W")
        bias, out = self.epilogue_te(task, c, task.dim("n").extent)
        return [x, w, *bias, out]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        m, k, n = _extents(task, "m", "k", "n")
        return [(m, k), (k, n)] + ([(n,)] if task.param("bias") else [])

    def output_shape(self, task: Task) -> tuple[int, ...]:
        m, _, n = _extents(task, "m", "k", "n")
        return (m, n)

    def _linear(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        y = inputs[0] @ inputs[1]
        return self.add_bias(task, y, inputs[2]) if task.param("bias") else y

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self.activate(task, self._linear(task, inputs))

    def before_activation(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self._linear(task, inputs)

    def magnitude(self, task: Task, abs_inputs: list[np.ndarray]) -> np.ndarray:
        return self.activation_slope(task) * self._linear(task, abs_inputs)

    def formula(self, task: Task) -> str:
        return self.epilogue_formula(task, "X @ W")


class Conv2dWorkload(_Epilogue, Workload):
    """2-D convolution (see :func:`schedule_gym.tasks.conv2d`): padding is a ``pad`` stage the templates
    inline into the convolution's loads; a bias and activation are a write-back block ``O``."""

    op = "conv2d"
    out_name = "O"

    def bias_axis(self, task: Task) -> int:
        return 3 if task.param("layout") == "NHWC" else 1

    def _geometry(self, task: Task) -> dict[str, Any]:
        n, ho, wo, co, kh, kw, cpg_in = _extents(task, "n", "h", "w", "co", "rh", "rw", "rc")
        groups = int(task.param("groups"))  # type: ignore[arg-type]
        h, w = task.param("in_hw")  # type: ignore[misc]
        return dict(
            n=n, h=h, w=w, ci=cpg_in * groups, co=co, ho=ho, wo=wo, kh=kh, kw=kw, groups=groups,
            cpg_in=cpg_in, cpg_out=co // groups, stride=task.param("stride"), padding=task.param("padding"),
            dilation=task.param("dilation"), nhwc=task.param("layout") == "NHWC",
        )

    def blocks_to_inline(self, task: Task) -> tuple[str, ...]:
        return ("pad",) if any(task.param("padding")) else ()  # type: ignore[arg-type]

    def te_tensors(self, task: Task) -> list[Any]:
        from tvm import te, tirx

        g = self._geometry(task)
        (sh, sw), (ph, pw), (dh, dw) = g["stride"], g["padding"], g["dilation"]
        shape_i, shape_w = self.input_shapes(task)[:2]
        inp = te.placeholder(shape_i, name="I", dtype=task.dtype)
        wgt = te.placeholder(shape_w, name="W", dtype=task.dtype)
        zero = te.const(0.0, task.dtype)
        hp, wp = g["h"] + 2 * ph, g["w"] + 2 * pw
        if ph or pw:
            def pad_value(*idx: Any) -> Any:
                nn, c, y, x = (idx[0], idx[3], idx[1], idx[2]) if g["nhwc"] else idx
                inside = tirx.all(y >= ph, y < g["h"] + ph, x >= pw, x < g["w"] + pw)
                src = (nn, y - ph, x - pw, c) if g["nhwc"] else (nn, c, y - ph, x - pw)
                return tirx.if_then_else(inside, inp[src], zero)

            padded_shape = (g["n"], hp, wp, g["ci"]) if g["nhwc"] else (g["n"], g["ci"], hp, wp)
            padded = te.compute(padded_shape, pad_value, name="pad")
        else:
            padded = inp
        # reduction axes in task order: NHWC (rh, rw, rc), NCHW (rc, rh, rw)
        rh = te.reduce_axis((0, g["kh"]), name="rh")
        rw = te.reduce_axis((0, g["kw"]), name="rw")
        rc = te.reduce_axis((0, g["cpg_in"]), name="rc")
        axes = [rh, rw, rc] if g["nhwc"] else [rc, rh, rw]
        cpg_in, cpg_out = g["cpg_in"], g["cpg_out"]

        def channel(co: Any) -> Any:
            return rc if g["groups"] == 1 else (co // cpg_out) * cpg_in + rc

        if g["nhwc"]:
            def body(nn: Any, y: Any, x: Any, co: Any) -> Any:
                return te.sum(padded[nn, y * sh + rh * dh, x * sw + rw * dw, channel(co)] * wgt[rh, rw, rc, co], axis=axes)
        else:
            def body(nn: Any, co: Any, y: Any, x: Any) -> Any:
                return te.sum(padded[nn, channel(co), y * sh + rh * dh, x * sw + rw * dw] * wgt[co, rc, rh, rw], axis=axes)

        conv = te.compute(self.output_shape(task), body, name="C")
        bias, out = self.epilogue_te(task, conv, g["co"])
        return [inp, wgt, *bias, out]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        g = self._geometry(task)
        bias = [(g["co"],)] if task.param("bias", False) else []
        if g["nhwc"]:
            return [(g["n"], g["h"], g["w"], g["ci"]), (g["kh"], g["kw"], g["cpg_in"], g["co"]), *bias]
        return [(g["n"], g["ci"], g["h"], g["w"]), (g["co"], g["cpg_in"], g["kh"], g["kw"]), *bias]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        g = self._geometry(task)
        return (g["n"], g["ho"], g["wo"], g["co"]) if g["nhwc"] else (g["n"], g["co"], g["ho"], g["wo"])

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self.activate(task, self._biased(task, inputs))

    def before_activation(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        return self._biased(task, inputs)

    def magnitude(self, task: Task, abs_inputs: list[np.ndarray]) -> np.ndarray:
        return self.activation_slope(task) * self._biased(task, abs_inputs)

    def _biased(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        out = self._convolve(task, inputs[:2])
        return self.add_bias(task, out, inputs[2]) if task.param("bias", False) else out

    def _convolve(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        """NumPy convolution: a strided window view of the padded input, contracted per group."""
        g = self._geometry(task)
        inp, wgt = inputs
        if not g["nhwc"]:  # compute in NHWC / HWIO, return NCHW
            inp, wgt = inp.transpose(0, 2, 3, 1), wgt.transpose(2, 3, 1, 0)
        (sh, sw), (ph, pw), (dh, dw) = g["stride"], g["padding"], g["dilation"]
        padded = np.pad(inp, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
        n, _, _, ci = padded.shape
        s = padded.strides
        view = np.lib.stride_tricks.as_strided(
            padded,
            shape=(n, g["ho"], g["wo"], g["kh"], g["kw"], ci),
            strides=(s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
            writeable=False,
        )
        groups, cpg_in, cpg_out = g["groups"], g["cpg_in"], g["cpg_out"]
        view = view.reshape(n, g["ho"], g["wo"], g["kh"], g["kw"], groups, cpg_in)
        wgt = wgt.reshape(g["kh"], g["kw"], cpg_in, groups, cpg_out)
        out = np.einsum("nyxhwgc,hwcgo->nyxgo", view, wgt, optimize=True).reshape(n, g["ho"], g["wo"], g["co"])
        return out if g["nhwc"] else out.transpose(0, 3, 1, 2)

    def formula(self, task: Task) -> str:
        g = self._geometry(task)
        return self.epilogue_formula(task, "conv2d(I, W)") + (f" {task.param('layout')}, stride {g['stride']}, padding {g['padding']}, "
                f"dilation {g['dilation']}, groups {g['groups']}")
