"""Fixed kernels: operators a model spends time in that TVM lowers poorly and that have nothing to tune.

Each is bound by memory, so one hand-written schedule serves every shape; each is a fold that replaces a
sub-graph of the mapped model by a ``call_tir`` of its kernel (written with TVM's IRBuilder, marked with
:data:`FIXED_ATTR`, named with :data:`SYMBOL_PREFIX`), counted in the mapping report's ``fixed``:

* :mod:`~schedule_gym.models.fixed.concat`: a concatenation on the last axis with the per-channel affine map
  and ReLU after it (DenseNet's batch norm and ReLU on every concatenation);
* :mod:`~schedule_gym.models.fixed.layer_norm`: a layer norm on the last axis, with the residual sum before it
  (the transformers'). Folded in the attention build (:data:`ATTENTION_FOLDS`), not by default: once, built with
  fast math, BERT's dense kernels (identical TIR, the same inputs, the same weights) ran 2.5x slower beside it,
  single-threaded too, for a reason not found (the LLVM code of the dense kernels differed between the two
  modules); later builds with it, with and without fast math, ran level or faster.
* :mod:`~schedule_gym.models.fixed.attention`: scaled dot-product attention, ``softmax(Q @ K^T * alpha) @ V``
  (causally masked or not), one kernel from the scores to the output, reading the heads where the projections
  wrote them and writing its result where the heads are joined (:mod:`~schedule_gym.models.fixed.views`: the
  reshapes, permutations and split parts around it are strides, not copies); folded *before* the mapping
  (:data:`BEFORE_MAPPING`), which would otherwise take its two matmuls as tasks. Not folded by default: the
  zoo's suites hold the attention's batch matmuls as tasks, and a default fold would drop them.

``map_model(..., fixed_kernels=...)`` names the folds to apply (:data:`DEFAULT_FOLDS` for True, none for False).

:mod:`~schedule_gym.models.fixed.winograd` is of another kind: it rewrites 3x3 convolutions as Winograd's
F(4x4, 3x3) *before* the mapping, two fixed transforms around a batched GEMM that the mapping then makes a tuned
task (``map_model(..., winograd=True)``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from schedule_gym.models.fixed.attention import attention_kernel, fold_attention
from schedule_gym.models.fixed.common import FIXED_ATTR, LANES, SYMBOL_PREFIX
from schedule_gym.models.fixed.concat import concat_kernel, fold_concats
from schedule_gym.models.fixed.layer_norm import fold_layer_norms, layer_norm_kernel
from schedule_gym.models.fixed.winograd import fold_winograd

__all__ = ["ATTENTION_FOLDS", "BEFORE_MAPPING", "DEFAULT_FOLDS", "FIXED_ATTR", "FOLDS", "LANES", "SYMBOL_PREFIX",
           "attention_kernel", "concat_kernel", "fold_attention", "fold_concats", "fold_fixed", "fold_layer_norms",
           "fold_winograd", "layer_norm_kernel"]

#: the folds by name, in the order they are applied
FOLDS = {"attention": fold_attention, "concat": fold_concats, "layer_norm": fold_layer_norms}
#: the folds ``map_model`` applies before its patterns (the others: after them)
BEFORE_MAPPING = ("attention",)
#: the folds ``map_model`` applies by default (see the module docstring for why not the layer norm's)
DEFAULT_FOLDS = ("concat",)
#: the folds of a model built with its attention as one kernel (``attention=True`` of ``load_model`` and
#: ``compile_torch``, ``tune-model --attention``): a transformer's blocks, each attention and each layer norm (with
#: the residual sum before it) a fixed kernel
ATTENTION_FOLDS = (*DEFAULT_FOLDS, "attention", "layer_norm")


def fold_fixed(mod: Any, folds: Sequence[str] = DEFAULT_FOLDS, before_mapping: bool = False) -> tuple[Any, Counter]:
    """``mod`` with the named folds (keys of :data:`FOLDS`) of one stage applied to its ``main`` (those of
    :data:`BEFORE_MAPPING` if ``before_mapping``, else the others), and how many sub-graphs of each form they
    replaced."""
    if isinstance(folds, str):
        raise ValueError(f"folds must be a sequence of fold names, got the string {folds!r}")
    unknown = [f for f in folds if f not in FOLDS]
    if unknown:
        raise ValueError(f"unknown fixed-kernel folds {unknown!r}; known: {', '.join(FOLDS)}")
    counts: Counter = Counter()
    for name, fold in FOLDS.items():
        if name in folds and (name in BEFORE_MAPPING) == before_mapping:
            mod, done = fold(mod)
            counts.update(done)
    return mod, counts
