"""Workloads: what an operator *is* to a measurement — its TVM definition, inputs, reference and tolerance.

Every operator has one :class:`Workload` (:attr:`Operator.workload <schedule_gym.operators.base.Operator>`,
found with :func:`schedule_gym.operators.get_workload`):

* :meth:`~Workload.prim_func`: the operator as a TE-built PrimFunc named ``main`` (TVM imported lazily);
  its main block (``"C"``) is what the templates tile, its loops are the task's spatial dimensions then
  its reduction dimensions, each in task order; ``inline_blocks`` are folded into it (a convolution's
  padding) and ``epilogue_blocks`` into its write-back (a dense layer's bias and activation);
* :meth:`~Workload.inputs`: seeded random inputs (uniform in [-1, 1]) in the kernel's argument order;
* :meth:`~Workload.reference`: the output computed in float64 with NumPy, and the per-output tolerance
  (:meth:`~Workload.tolerance`: an error analysis, :func:`dot_tolerance` for a sum of products);
* :meth:`~Workload.check`: the output against the reference, within the tolerance, or why not;
* :meth:`~Workload.signature`: how the compiled kernel is called.

The TVM backends, the RPC backend, kernel export and the MetaSchedule baseline all go through this; no
other module knows an operator's arguments.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from schedule_gym.tasks.task import Task

__all__ = ["Workload", "dot_tolerance"]


def dot_tolerance(reduction_length: int, dtype: str, magnitude: np.ndarray, epilogue_ops: int = 0) -> np.ndarray:
    """Per-output bound on the rounding error of a kernel accumulating in ``dtype``.

    A sum of ``K`` products computed in floating point, in any order, with or without fused
    multiply-adds, differs from the exact one by at most ``gamma_K * sum |a_i b_i|`` with
    ``gamma_K = K u / (1 - K u)`` and ``u`` the unit roundoff of ``dtype`` (Higham, *Accuracy and
    Stability of Numerical Algorithms*, 2nd ed., Eq. 3.5). ``magnitude`` is ``sum |a_i b_i|`` per output
    (the reference evaluated on the inputs' absolute values); an epilogue of ``epilogue_ops`` further
    roundings (bias add, activation) adds that many ``u`` of relative error. Raises ValueError where
    ``K u >= 1/2``: no sound check is possible (e.g. float16 accumulation over 1,024 terms).
    """
    u = float(np.finfo(dtype).eps) / 2.0
    steps = reduction_length + epilogue_ops
    if steps * u >= 0.5:
        raise ValueError(
            f"a {dtype} kernel summing {reduction_length} products cannot be checked soundly: its rounding error "
            f"bound ({steps} x {u:.3g}) is as large as the result; use a wider dtype"
        )
    gamma = steps * u / (1.0 - steps * u)
    return gamma * magnitude


class Workload(abc.ABC):
    """An operator's definition, inputs, reference and check (see the module docstring)."""

    op: str = ""
    #: the block the templates tile
    main_block = "C"
    #: blocks folded into the main block (compute_inline), e.g. a convolution's padding
    inline_blocks: tuple[str, ...] = ()
    #: elementwise blocks after the main one, folded into its write-back (reverse_compute_inline)
    epilogue_blocks: tuple[str, ...] = ()

    # ------------------------------------------------------------------------ TVM (lazy)
    @abc.abstractmethod
    def te_tensors(self, task: Task) -> list[Any]:
        """The TE placeholders and the output tensor, in the kernel's argument order."""

    def prim_func(self, task: Task) -> Any:
        """The operator as a PrimFunc named ``main`` (destination passing: the output is the last argument)."""
        from tvm import te

        self.check_task(task)
        return te.create_prim_func(self.te_tensors(task)).with_attr("global_symbol", "main")

    def block_dims(self, task: Task) -> tuple[str, ...]:
        """The main block's loops, outermost first: spatial dimensions then reductions, each in task order."""
        return tuple(d.name for d in task.dims if not d.reduction) + tuple(d.name for d in task.dims if d.reduction)

    def blocks_to_inline(self, task: Task) -> tuple[str, ...]:
        return self.inline_blocks

    def epilogues(self, task: Task) -> tuple[str, ...]:
        return self.epilogue_blocks

    # ----------------------------------------------------------------------- NumPy side
    def check_task(self, task: Task) -> None:
        if task.op != self.op:
            raise ValueError(f"the {self.op} workload cannot build task {task.name!r} of op {task.op!r}")

    @abc.abstractmethod
    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        """Shapes of the kernel's inputs, in argument order."""

    @abc.abstractmethod
    def output_shape(self, task: Task) -> tuple[int, ...]:
        """Shape of the kernel's output (its last argument)."""

    def inputs(self, task: Task, seed: int = 0) -> list[np.ndarray]:
        """Seeded random inputs, uniform in [-1, 1], in the task's dtype."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1.0, 1.0, shape).astype(task.dtype) for shape in self.input_shapes(task)]

    @abc.abstractmethod
    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        """The operator in float64 on float64 inputs (also used on absolute values for the error bound)."""

    def epilogue_ops(self, task: Task) -> int:
        """Roundings after the reduction (bias add, activation) for :func:`dot_tolerance`."""
        return 0

    def reduction_length(self, task: Task) -> int:
        return math.prod(d.extent for d in task.dims if d.reduction)

    def reference(self, task: Task, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(expected output, per-output tolerance)``, both float64."""
        wide = [x.astype(np.float64) for x in inputs]
        return self.compute(task, wide), self.tolerance(task, wide)

    def tolerance(self, task: Task, wide_inputs: list[np.ndarray]) -> np.ndarray:
        """Per-output bound on a right kernel's rounding error (float64 inputs): :func:`dot_tolerance` of the
        reduction, its :meth:`magnitude` and :meth:`epilogue_ops` (raises ValueError where no bound is sound)."""
        magnitude = self.magnitude(task, [np.abs(x) for x in wide_inputs])
        return dot_tolerance(self.reduction_length(task), task.dtype, magnitude, self.epilogue_ops(task))

    def check_is_sound(self, task: Task) -> None:
        """Raise :class:`~schedule_gym.errors.TaskError` if :meth:`check` cannot tell wrong outputs of
        ``task`` from right ones: :func:`dot_tolerance` refuses the dtype and reduction length, or, on the
        seeded inputs, the median tolerance is not below the median ``|output|`` before any activation (then an all-zero or a
        negated output would pass at most outputs: float16 accumulating more than a few dozen terms)."""
        from schedule_gym.errors import TaskError

        try:
            inputs = self.inputs(task)
            expected, tol = self.reference(task, inputs)
        except ValueError as exc:
            raise TaskError(f"task {task.name!r}: {exc}") from None
        values = self.before_activation(task, [x.astype(np.float64) for x in inputs])
        size, bound = float(np.median(np.abs(values))), float(np.median(tol))
        if not size > bound:
            raise TaskError(
                f"task {task.name!r}: a {task.dtype} kernel summing {self.reduction_length(task)} products cannot be "
                f"checked soundly: the median rounding-error bound {bound:.3g} is not below the median output "
                f"{size:.3g} (a zero output would pass); use a wider dtype"
            )

    def before_activation(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        """The outputs before any activation (the operator itself here): :meth:`check_is_sound` compares the
        error bound with them, since a ReLU's zeros are right answers a zero kernel would only match there."""
        return self.compute(task, inputs)

    def magnitude(self, task: Task, abs_inputs: list[np.ndarray]) -> np.ndarray:
        """``sum |a_i b_i|`` per output (plus the epilogue's own magnitudes): the reduction on absolute values."""
        return self.compute(task, abs_inputs)

    def check(self, task: Task, out: np.ndarray, expected: np.ndarray, tol: np.ndarray) -> str | None:
        """None if ``out`` is within ``tol`` of ``expected`` everywhere, else why not."""
        if out.shape != expected.shape:
            return f"wrong result: output shape {out.shape}, expected {expected.shape}"
        err = np.abs(out.astype(np.float64) - expected)
        bad = ~np.isfinite(out) | (err > tol)
        if bad.any():
            worst = float(np.nanmax(np.where(np.isfinite(err), err, np.inf)))
            where = np.unravel_index(int(np.argmax(np.where(np.isfinite(err), err - tol, np.inf))), out.shape)
            return (
                f"wrong result: {int(bad.sum())} of {out.size} outputs differ from the float64 reference "
                f"(max abs error {worst:.3g}; at {tuple(int(i) for i in where)}: got {float(out[where]):.6g}, "
                f"expected {float(expected[where]):.6g} +- {float(tol[where]):.3g})"
            )
        return None

    def signature(self, task: Task, function: str = "main",
                  laid_out: Mapping[int, tuple[Sequence[int], str]] | None = None) -> str:
        """How the compiled kernel is called (destination passing: the output is written, nothing returned);
        ``laid_out``: the inputs it takes in another layout, by index: their shape and how they are made."""
        names = [o.name for o in task.operands if not o.output]
        shapes = self.input_shapes(task)
        out = next(o.name for o in task.operands if o.output)
        laid_out = laid_out or {}
        args = [f"{n}: {task.dtype}{list(s)}" if i not in laid_out else
                f"{n}: {task.dtype}{list(laid_out[i][0])} ({laid_out[i][1]})"
                for i, (n, s) in enumerate(zip(names, shapes))]
        args.append(f"{out}: {task.dtype}{list(self.output_shape(task))}")
        return f"{function}({', '.join(args)}) -> None; writes {out} = {self.formula(task)}"

    @abc.abstractmethod
    def formula(self, task: Task) -> str:
        """The computation in one line, for :meth:`signature`."""
