"""Felix: tile sizes by gradient descent on a differentiable cost model (Zhao et al., ASPLOS 2024).

Felix (Zhao, Sharif, Adve, Misailovic, "Felix: Optimizing Tensor Programs with Gradient Descent") turns
the discrete search over schedule parameters into a continuous one:

1. **Relaxation (Section 3.3).** Every split factor ``x`` becomes a real variable ``x'`` in log space,
   ``x = e^{x'}``. Here, per loop dimension of extent ``L`` split into ``d`` factors, the first ``d - 1``
   log-factors are free and the last is ``log L - sum(others)``, so the product constraint holds by
   construction; the bounds ``1 <= factor <= L`` become the penalties ``p = -x'`` and ``p = x' - log L``.
   The divisibility constraint ``L mod x = 0`` is dropped during descent and restored by rounding
   (:class:`LogRelaxation`).
2. **Smooth features (Section 3.3).** Program features (loop extents, tile footprints and data traffic
   per nesting depth, vector length, unroll extent, register tile, parallel extent, arithmetic
   intensity) are written as formulas of the log-factors in PyTorch (:class:`TileFeaturizer`). Their
   non-differentiable operators are replaced by smooth versions built from the paper's kernel
   ``phi(t) = 1 / (1 + t^2)`` (:func:`smooth_step`, :func:`smooth_relu`, :func:`is_one_gate`), and every
   feature is a logarithm, which turns products into sums and keeps gradients from vanishing.
3. **Objective (Section 3.4, Eq. 4).** ``O(x') = C(Feat(x')) + lambda * sum_p max(p(x'), 0)^2`` with
   ``C`` an MLP cost model predicting log latency (:class:`FelixCostModel`; lower is better, so the
   paper's negated performance becomes predicted log latency).
4. **Search (Section 3.4, Algorithm 1).** Each round ``n_seeds`` valid configs drawn at random start
   ``n_steps`` Adam steps, all seeds as one batch; every visited point is rounded to a valid config,
   the new ones are ranked by the model and the best ``n_measure`` measured as one batch; the model is
   then updated on every measurement so far (:class:`FelixAgent`).

Felix pretrains its cost model on TenSet once and applies it to every operator; here
:func:`pretrain_cost_model` fits one on mock-model latencies of other shapes and/or on recorded real
measurements, and :func:`save_cost_model` / :func:`load_cost_model` store it as a plain ``state_dict``
plus a JSON config (loading never executes code from the file).

The package has one module per concept: :mod:`~schedule_gym.agents.felix.smooth` (smooth operators),
:mod:`~schedule_gym.agents.felix.features` (:class:`FeatureSpec`, :class:`TileFeaturizer`),
:mod:`~schedule_gym.agents.felix.relaxation` (:class:`LogRelaxation`),
:mod:`~schedule_gym.agents.felix.model` (:class:`FelixCostModel`, training, pretraining, checkpoints) and
:mod:`~schedule_gym.agents.felix.agent` (:class:`FelixAgent`).
"""

from schedule_gym.agents.felix.agent import FelixAgent
from schedule_gym.agents.felix.features import FeatureSpec, TileFeaturizer
from schedule_gym.agents.felix.model import (  # CHECKPOINT_FORMAT: importable here, not in __all__
    CHECKPOINT_FORMAT,
    FelixCostModel,
    load_cost_model,
    pretrain_cost_model,
    save_cost_model,
    train_cost_model,
)
from schedule_gym.agents.felix.relaxation import LogRelaxation
from schedule_gym.agents.felix.smooth import is_one_gate, smooth_max, smooth_min, smooth_relu, smooth_step

__all__ = [
    "FeatureSpec",
    "FelixAgent",
    "FelixCostModel",
    "LogRelaxation",
    "TileFeaturizer",
    "is_one_gate",
    "load_cost_model",
    "pretrain_cost_model",
    "save_cost_model",
    "smooth_max",
    "smooth_min",
    "smooth_relu",
    "smooth_step",
    "train_cost_model",
]
