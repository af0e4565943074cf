"""A PyTorch model in, a canonical Relax module out.

:func:`import_model` captures an ``nn.Module`` with example inputs through ``torch.export`` and imports
it with TVM Relax (``tvm.relax.frontend.torch.from_exported_program``; the weights become constants),
then brings the graph to the canonical form the mapping patterns are written against (Xiao et al.,
Section 2: match on canonical forms, not on whatever shape the frontend produced):

* convolutions are converted to NHWC activations and HWIO weights (``ConvertLayout``; the layout our
  CPU template vectorises over output channels and the calibrated mock knows), with layout transforms
  only where the graph enters and leaves a chain of convolutions (``layout="NCHW"`` keeps PyTorch's);
* batch norm in inference mode is folded into the preceding convolution's weights, leaving
  ``add(conv2d(x, W'), b')`` (``FoldBatchnormToConv2D``); any other batch norm is decomposed into
  elementwise operations (``DecomposeOpsForInference``);
* constant sub-expressions are evaluated (``FoldConstant``): ``Linear``'s ``permute_dims(weight)``
  becomes a ``[in, out]`` constant, so a dense layer is ``add(bias, matmul(x, W))``;
* ``broadcast_to`` a tensor's own shape is dropped (the frontend wraps batched matmul operands in it);
* SiLU, which the frontend writes ``multiply(x, sigmoid(x))``, becomes ``nn.silu(x)`` (one activation, which
  the mapping fuses into the layer before it; a gate ``multiply(x, sigmoid(s))`` of another value stays;
  ``fuse_silu=False`` keeps the frontend's form);
* a gate of a batch-1 convolution's input, ``conv2d(x * sigmoid(s), W)`` with ``s`` one value per input channel
  (squeeze-and-excitation), becomes ``conv2d(x, W * sigmoid(s))`` with the gate scaling the weight's input
  channels (equal by linearity) where ``W`` is the smaller: one pass over ``x`` saved for a product of the size
  of ``W``; the convolution's weight is then computed, not a constant (``fuse_gates=False`` keeps the frontend's
  form);
* an elementwise activation after a reshape or a transpose moves before it (``gelu(reshape(y))``
  becomes ``reshape(gelu(y))``; they commute): the frontend flattens a ``Linear`` on 3-D input to 2-D
  and reshapes its result back, and the layout conversion puts a transpose before operators it has no
  layout rule for (``clip``, MobileNet's ReLU6), either of which would separate a layer from its
  activation; a transpose followed by its inverse is then dropped.

Errors name the model and what failed: a model ``torch.export`` cannot capture, or an operator the
Relax frontend does not support, raise :class:`ModelImportError`.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from typing import Any

from schedule_gym.errors import TaskError

__all__ = ["ModelImportError", "canonicalize", "import_model"]


class ModelImportError(TaskError):
    """A model that cannot be captured or imported; the message names the model and the cause."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def import_model(module: Any, inputs: Sequence[Any], name: str | None = None, layout: str = "NHWC",
                 fuse_silu: bool = True, fuse_gates: bool = True) -> Any:
    """The canonical Relax ``IRModule`` of ``module`` run on ``inputs`` (weights as constants).

    Args:
        module: a ``torch.nn.Module`` (put in eval mode: inference graphs are imported).
        inputs: example inputs (a tuple of tensors); shapes and dtypes are fixed by them.
        name: the model's name for messages (default: the module's class name).
        layout: ``"NHWC"`` (default) converts convolutions to NHWC activations and HWIO weights, with
            layout transforms only where the graph enters and leaves the convolutions; ``"NCHW"``
            keeps PyTorch's layout.
        fuse_silu: make ``nn.silu`` of the frontend's ``x * sigmoid(x)`` (the default), so the mapping fuses it
            into the layer before it; False keeps a multiply and a sigmoid for TVM's default lowering.
        fuse_gates: fold a per-channel sigmoid gate of a batch-1 convolution's input into its weight (the
            default); False keeps the gate's pass over the activations.
    """
    if layout not in ("NHWC", "NCHW"):
        raise ValueError(f"layout must be 'NHWC' or 'NCHW', got {layout!r}")
    import torch

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    inputs = tuple(inputs)
    if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
        raise TypeError(f"inputs must be a non-empty tuple of tensors, got {[type(x).__name__ for x in inputs]}")
    label = name or type(module).__name__
    module = module.eval()
    try:
        with torch.no_grad():
            exported = torch.export.export(module, inputs)
    except Exception as exc:  # torch raises many types (UserError, Unsupported, TorchRuntimeError...)
        raise ModelImportError(f"model {label!r}: torch.export cannot capture it: {_first_line(exc)}") from None
    from tvm.relax.frontend.torch import from_exported_program

    try:
        with warnings.catch_warnings():  # the frontend trips torch's own deprecation of LeafSpec checks
            warnings.simplefilter("ignore", FutureWarning)
            mod = from_exported_program(exported)
    except Exception as exc:
        text = _first_line(exc)
        ops = re.findall(r"'([\w.]+)'", text) if "nsupported" in text else []
        what = f"operators the Relax frontend does not support: {', '.join(ops)}" if ops else text
        raise ModelImportError(f"model {label!r}: TVM cannot import it: {what}") from None
    return canonicalize(mod, layout, fuse_silu, fuse_gates)


def canonicalize(mod: Any, layout: str = "NHWC", fuse_silu: bool = True, fuse_gates: bool = True) -> Any:
    """Batch norm folded into convolutions (else decomposed), constants folded, SiLU recognised unless
    ``fuse_silu`` is False, input gates folded into convolution weights unless ``fuse_gates`` is False (see the
    module docstring)."""
    import tvm
    from tvm import relax

    passes = [relax.transform.FoldBatchnormToConv2D(), relax.transform.DecomposeOpsForInference(),
              relax.transform.FoldConstant()]
    if layout == "NHWC":  # after FoldConstant: on FoldBatchnormToConv2D's output directly, it segfaults (0.27)
        passes += [relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", "HWIO"]}), relax.transform.FoldConstant()]
    mod = tvm.transform.Sequential(passes)(mod)
    main = _silu_recognised(mod["main"]) if fuse_silu else mod["main"]
    main = _gates_folded_into_weights(main) if fuse_gates else main
    mod["main"] = _inverse_transposes_removed(_identity_broadcasts_removed(_activations_before_reshapes(main)))
    return mod


def _silu_recognised(func: Any) -> Any:
    """``multiply(x, sigmoid(x))`` (either operand order) -> ``nn.silu(x)``; a product with the sigmoid of another
    value is left as it is."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    gate = is_op("relax.sigmoid")(wildcard())
    pattern = is_op("relax.multiply")(wildcard(), gate) | is_op("relax.multiply")(gate, wildcard())

    def rewrite(expr: Any, matched: Any) -> Any:
        x = matched[gate].args[0]  # the operands are bound variables: compare them with the sigmoid's argument
        return relax.op.nn.silu(x) if any(arg.same_as(x) for arg in expr.args) else expr

    return rewrite_call(pattern, rewrite, func)


def _gates_folded_into_weights(func: Any) -> Any:
    """``conv2d(multiply(x, sigmoid(s)), W)`` -> ``conv2d(x, multiply(W, reshape(sigmoid(s))))`` where the batch
    is 1, ``groups`` is 1, ``sigmoid(s)`` holds one value per input channel (``[1, 1, 1, C]`` in NHWC,
    ``[1, C, 1, 1]`` in NCHW) and ``W`` has fewer elements than ``x`` (else the product over the weight costs
    more than the pass it saves: EfficientNet-B0's 7x7 blocks): ``sum_c x[c] g[c] W[c, o] = sum_c x[c] (g[c]
    W[c, o])``. Any other product is left as it is (a gate per pixel or per sample cannot move into the weight)."""
    from tvm import relax
    from tvm.relax.dpl import is_const, is_op, rewrite_call, wildcard

    gate = is_op("relax.sigmoid")(wildcard())
    product = is_op("relax.multiply")(wildcard(), gate) | is_op("relax.multiply")(gate, wildcard())
    pattern = is_op("relax.nn.conv2d")(product, is_const())

    def rewrite(expr: Any, matched: Any) -> Any:
        attrs, weight, operands = expr.attrs, expr.args[1], matched[product].args  # bound variables
        layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
        if int(attrs.groups) != 1 or layouts not in (("NHWC", "HWIO", "NHWC"), ("NCHW", "OIHW", "NCHW")):
            return expr
        channel = 3 if layouts[0] == "NHWC" else 1
        for x, g in (operands, operands[::-1]):  # the gate is the per-channel operand (either, if both are)
            x_shape, g_shape = tvm_shape(x), tvm_shape(g)
            if x_shape is None or len(x_shape) != 4 or x_shape[0] != 1:
                continue
            per_channel = tuple(x_shape[channel] if i == channel else 1 for i in range(4))
            if g_shape == per_channel:
                break
        else:
            return expr
        if math.prod(tvm_shape(weight)) >= math.prod(x_shape):  # scaling the weight would cost more than x's pass
            return expr
        # HWIO's input channels are its axis 2; OIHW's are its axis 1, as in the gate's [1, C, 1, 1]
        scale = relax.op.reshape(g, [1, 1, x_shape[3], 1]) if channel == 3 else g
        return relax.op.nn.conv2d(x, relax.op.multiply(weight, scale), strides=attrs.strides, padding=attrs.padding,
                                  dilation=attrs.dilation, groups=1, data_layout=layouts[0],
                                  kernel_layout=layouts[1], out_layout=layouts[2], out_dtype=attrs.out_dtype)

    return rewrite_call(pattern, rewrite, func)


def _identity_broadcasts_removed(func: Any) -> Any:
    """``broadcast_to(x, shape of x)`` is ``x`` (the frontend puts one before every batched matmul operand)."""
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    def rewrite(expr: Any, matched: Any) -> Any:
        x = expr.args[0]
        same = x.ty is not None and expr.ty is not None and tvm_shape(x) == tvm_shape(expr)
        return x if same else expr

    return rewrite_call(is_op("relax.broadcast_to")(wildcard(), wildcard()), rewrite, func)


def _inverse_transposes_removed(func: Any) -> Any:
    """``permute_dims(permute_dims(x, a), b)`` is ``x`` when ``b`` undoes ``a``: the pairs NHWC -> NCHW -> NHWC
    the layout conversion leaves around every activation it has no rule for, once the activation has moved."""
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    inner = is_op("relax.permute_dims")(wildcard())
    pattern = is_op("relax.permute_dims")(inner)

    def axes_of(call: Any) -> list[int] | None:
        shape = tvm_shape(call.args[0])
        if shape is None:
            return None
        axes = call.attrs.axes
        return list(reversed(range(len(shape)))) if axes is None else [int(a) for a in axes]

    def rewrite(expr: Any, matched: Any) -> Any:
        first = matched[inner]
        a, b = axes_of(first), axes_of(expr)
        if a is None or b is None or len(a) != len(b):
            return expr
        return first.args[0] if all(a[b[i]] == i for i in range(len(a))) else expr

    return rewrite_call(pattern, rewrite, func)


def tvm_shape(expr: Any) -> tuple[int, ...] | None:
    """The static shape of a Relax tensor expression, or None."""
    shape = getattr(expr.ty, "shape", None)
    try:
        return tuple(int(v) for v in shape.values)
    except (AttributeError, TypeError):
        return None


#: elementwise activations (and their argument counts) that commute with a reshape
_ELEMENTWISE = {"nn.relu": 1, "nn.gelu": 1, "nn.gelu_tanh": 1, "clip": 3, "sigmoid": 1, "tanh": 1, "nn.silu": 1}


def _activations_before_reshapes(func: Any) -> Any:
    """``act(reshape(y))`` -> ``reshape(act(y))``, and the same through ``permute_dims`` (an elementwise
    function commutes with both)."""
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    movers = {"relax.reshape": (2, lambda y, call: relax.op.reshape(y, call.args[1])),
              "relax.permute_dims": (1, lambda y, call: relax.op.permute_dims(y, call.attrs.axes))}
    for mover, (mover_arity, rebuild) in movers.items():
        for op, arity in _ELEMENTWISE.items():
            inner = is_op(mover)(*[wildcard() for _ in range(mover_arity)])
            pattern = is_op(f"relax.{op}")(inner, *[wildcard() for _ in range(arity - 1)])

            def rewrite(expr: Any, matched: Any, inner: Any = inner, rebuild: Any = rebuild) -> Any:
                moved_over = matched[inner]
                moved = relax.Call(expr.op, [moved_over.args[0], *expr.args[1:]], expr.attrs)
                return rebuild(moved, moved_over)

            func = rewrite_call(pattern, rewrite, func)
    return func
