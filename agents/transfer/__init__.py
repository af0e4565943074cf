"""Transfer tuning: a cost model pretrained across operators on one shared feature space, then AutoTVM's
model-based search on a new task under a measurement budget.

* :mod:`~schedule_gym.agents.transfer.features`: :func:`config_features` / :class:`NestFeaturizer`, what a
  tile config does on the machine in terms every operator shares (parallel extent, vector lanes, register
  tile, loads per FMA, loop overhead and bytes per flop into each cache level);
* :mod:`~schedule_gym.agents.transfer.model`: :class:`TransferCostModel`, gradient-boosted trees over them
  (:func:`fit_booster`), stored as XGBoost JSON with a JSON sidecar; ``examples/pretrain_cost_model.py``
  pretrains the shipped one (:data:`DEFAULT_MODEL`) on protocol v0's training split;
* :mod:`~schedule_gym.agents.transfer.agent`: :class:`TransferAgent` (registered as ``transfer``), simulated
  annealing under the pretrained model from the first batch, epsilon-greedy batches, and the model
  fine-tuned on the task's own measurements (Chen et al., NeurIPS 2018; Zheng et al., NeurIPS 2021).
"""

from schedule_gym.agents.transfer.agent import TransferAgent, load_cost_model, neighbour_indices
from schedule_gym.agents.transfer.features import FEATURE_NAMES, FEATURE_VERSION, N_FEATURES, NestFeaturizer, config_features
from schedule_gym.agents.transfer.model import DEFAULT_MODEL, OBJECTIVES, TransferCostModel, fit_booster, rank_labels

__all__ = ["DEFAULT_MODEL", "FEATURE_NAMES", "FEATURE_VERSION", "N_FEATURES", "OBJECTIVES", "NestFeaturizer",
           "TransferAgent", "TransferCostModel", "config_features", "fit_booster", "load_cost_model",
           "neighbour_indices", "rank_labels"]
