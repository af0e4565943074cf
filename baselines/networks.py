"""The policy networks the trainers (:mod:`~schedule_gym.baselines.ppo_vec`, :mod:`~schedule_gym.baselines.imitation`)
train and their checkpoints rebuild, each named in a checkpoint's sidecar (``architecture.class``):

* :class:`Agent`: CleanRL's actor and critic, two MLPs over the whole observation (any observation space);
* :class:`MoveScorer`: one MLP that scores every move by the config it leads to (``observation="move_features"``),
  shared by all actions, so a move is judged in the same terms on every operator, whatever its factor layout.

Both share one interface (``masked_logits``, ``get_value``, ``get_action_and_value``) and one constructor
signature, so :func:`network` builds either from a sidecar.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from schedule_gym.envs.features import N_NEST, N_PARAMS, N_SEARCH

__all__ = ["MASKED_LOGIT", "NETWORKS", "Agent", "MoveScorer", "layer_init", "mlp", "network", "sample_categorical"]

#: the logit of an illegal action: large and negative, so its probability is exactly 0 in float32, yet finite,
#: so the entropy of a masked distribution is not NaN
MASKED_LOGIT = -1e8


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(n_in: int, hidden_size: int, n_hidden_layers: int, n_out: int, out_std: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(n_hidden_layers):
        layers += [layer_init(nn.Linear(n_in if i == 0 else hidden_size, hidden_size)), nn.Tanh()]
    layers.append(layer_init(nn.Linear(hidden_size, n_out), std=out_std))
    return nn.Sequential(*layers)


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One action per row of ``probs`` ``(N, A)``, by inverting the cumulative distribution: the first action
    whose cumulative probability exceeds ``u * total`` (``u`` uniform in [0, 1), so the product stays below the
    row's total), so an action of probability 0 (a masked one) is never drawn."""
    cdf = probs.cumsum(dim=1)
    u = torch.rand((probs.shape[0], 1), generator=generator) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(1)


class _Masked(nn.Module):
    """The masked categorical over ``logits(x)`` and the critic's value, for every network here.

    The masked categorical is written out on ``log_softmax`` and ``softmax`` rather than taken from
    ``torch.distributions.Categorical``, whose ``logsumexp``, ``exp`` and ``multinomial`` take a slow path on
    the masked logits (``exp`` of a large negative number underflows); the fused kernels do not.
    """

    critic: nn.Module

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def masked_logits(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.logits(x).masked_fill(~mask, MASKED_LOGIT)

    def get_action_and_value(self, x: torch.Tensor, mask: torch.Tensor, action: torch.Tensor | None = None
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(action, its log-probability, the entropy, the value)``; the action drawn if not given."""
        logits = self.masked_logits(x, mask)
        logp, probs = logits.log_softmax(dim=1), logits.softmax(dim=1)
        if action is None:
            action = sample_categorical(probs)
        return action, logp.gather(1, action.unsqueeze(1)).squeeze(1), -(probs * logp).sum(dim=1), self.get_value(x)


class Agent(_Masked):
    """CleanRL's actor and critic: two tanh MLPs, orthogonal initialisation (the actor's last layer 0.01)."""

    def __init__(self, observation_size: int, n_actions: int, hidden_size: int = 64, n_hidden_layers: int = 2) -> None:
        super().__init__()
        self.critic = mlp(observation_size, hidden_size, n_hidden_layers, 1, out_std=1.0)
        self.actor = mlp(observation_size, hidden_size, n_hidden_layers, n_actions, out_std=0.01)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.actor(x)


class MoveScorer(_Masked):
    """Each move's logit is one tanh MLP of what the move changes, the same MLP for every action and operator.

    Reads the ``"move_features"`` layout (:mod:`schedule_gym.envs.features`): ``[factor layout | operator parameters
    and nest features of the current config | search state | measured flag per action | destination nest features
    per action]``. Move ``a``'s input is the operator's parameters, the current config's nest features, the search
    state, whether ``a``'s destination was measured, the destination's nest features and their difference from the
    current ones. The factor layout (each operator's own slots) is left out of the scorer, so a move on an operator
    it never trained on reads as a move on any other; the critic (an MLP over everything before the destination
    features) is what PPO needs, and imitation leaves it untrained.
    """

    def __init__(self, observation_size: int, n_actions: int, hidden_size: int = 64, n_hidden_layers: int = 2) -> None:
        super().__init__()
        self.n_actions = n_actions
        self.search_end = observation_size - n_actions * (N_NEST + 1)  # end of the search state
        self.config_end = self.search_end - N_SEARCH
        self.params_start = self.config_end - N_NEST - N_PARAMS
        if self.params_start < 0:
            raise ValueError(f"a MoveScorer reads observation='move_features' observations; {observation_size} entries "
                             f"cannot hold {n_actions} actions' destination features and the current config's")
        context = self.search_end - self.params_start
        self.scorer = mlp(context + 1 + 2 * N_NEST, hidden_size, n_hidden_layers, 1, out_std=0.01)
        self.critic = mlp(observation_size - n_actions * N_NEST, hidden_size, n_hidden_layers, 1, out_std=1.0)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        n, A = x.shape[0], self.n_actions
        context = x[:, self.params_start: self.search_end]
        current = x[:, self.config_end - N_NEST: self.config_end]
        measured = x[:, self.search_end: self.search_end + A]
        destination = x[:, self.search_end + A:].reshape(n, A, N_NEST)
        rows = torch.cat([context[:, None, :].expand(n, A, context.shape[1]), measured[:, :, None], destination,
                          destination - current[:, None, :]], dim=2)
        return self.scorer(rows).squeeze(2)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x[:, : self.search_end + self.n_actions])


#: the networks a sidecar's ``architecture.class`` may name
NETWORKS: dict[str, type[_Masked]] = {"Agent": Agent, "MoveScorer": MoveScorer}


def network(name: str, observation_size: int, n_actions: int, hidden_size: int, n_hidden_layers: int) -> _Masked:
    """The network ``name`` (a key of :data:`NETWORKS`) of these sizes, freshly initialised."""
    if name not in NETWORKS:
        raise ValueError(f"architecture must be one of {sorted(NETWORKS)}, got {name!r}")
    return NETWORKS[name](observation_size, n_actions, hidden_size, n_hidden_layers)
