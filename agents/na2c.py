"""N-A2C: neighbourhood actor-advantage-critic search (Zhang et al., Section 4.3, Algorithm 2).

From a centre state (``s0`` at first) the agent walks ``T`` steps (paper: 3) again and again, each step
taking the actor's action or a random one, and collects every state it reaches that has not been
measured (``H_v``) until the collected set ``B_collect`` holds a batch. The batch is measured at once;
the centre moves to the best state found so far; transitions ``(s, a, r, s')`` into every measured
state are stored in a fixed-size memory ``M`` and the actor and critic networks (PyTorch) are trained
on it incrementally, the advantage coming from the critic: ``A = r + gamma V(s') - V(s)``.

Conventions (the paper leaves them open; all are parameters):

* **epsilon.** Algorithm 2 follows the policy *with probability epsilon* (line 6). Here ``epsilon`` has
  the usual epsilon-greedy meaning instead: the probability of a *random* action; the policy is followed
  with probability ``1 - epsilon``. The paper's epsilon is ``1 - epsilon`` here.
* **Reward.** ``r(s, a) = log(cost(s0) / cost(s'))``: the paper's ``1 / cost(s')`` (Eq. 8) through a
  monotone transform that keeps rewards of order one across six orders of magnitude of latency.
* **States.** The network input is the environment's ``fraction`` observation: ``log(factor) /
  log(extent)`` for every loop factor. Illegal actions are masked out of the policy.
* **Memory.** Line 25 stores a transition for every ``(s, a)`` with ``step(s, a) = s'``; here, for every
  measured ``s'``, the transitions from each *measured* neighbour ``s`` of ``s'`` (the walk's own
  transition among them), newest first, in a FIFO memory of ``memory_size``.
* **Exploration radius.** When ``patience`` walks in a row find nothing new (the neighbourhood is
  exhausted), ``T`` grows by one (the paper's remark that T "can also increase to explore new
  configuration neighborhoods") and the share of random actions moves halfway to 1 for the rest of
  that collection, so that walks eventually reach every state of the (connected) space rather than
  circling where the policy leads; ``T`` returns to its initial value when the centre moves.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
import torch
from torch import nn

from schedule_gym.agents.base import Agent, check_start, check_in_range, check_positive
from schedule_gym.spaces import Config
from schedule_gym.spaces.tile_space import Action

__all__ = ["NA2CAgent"]


def _mlp(n_in: int, n_out: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_out))


class NA2CAgent(Agent):
    """Neighbourhood A2C search; paper defaults ``T = 3`` steps per walk."""

    name = "na2c"
    uses_torch = True

    def __init__(
        self,
        seed: int = 0,
        steps: int = 3,
        batch_size: int = 16,
        epsilon: float = 0.3,
        gamma: float = 0.9,
        hidden: int = 64,
        lr: float = 1e-3,
        memory_size: int = 1024,
        train_iters: int = 8,
        minibatch: int = 64,
        entropy_coef: float = 0.01,
        patience: int = 64,
        start: str | Config = "s0",
    ) -> None:
        super().__init__(seed)
        self.steps = check_positive(steps, "steps", integer=True)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True)
        self.epsilon = check_in_range(epsilon, "epsilon", 0.0, 1.0)
        self.gamma = check_in_range(gamma, "gamma", 0.0, 1.0)
        self.hidden = check_positive(hidden, "hidden", integer=True)
        self.lr = check_positive(lr, "lr")
        self.memory_size = check_positive(memory_size, "memory_size", integer=True)
        self.train_iters = check_positive(train_iters, "train_iters", integer=True)
        self.minibatch = check_positive(minibatch, "minibatch", integer=True)
        self.entropy_coef = check_in_range(entropy_coef, "entropy_coef", 0.0, math.inf)
        self.patience = check_positive(patience, "patience", integer=True)
        self.start = check_start(start)

    # ------------------------------------------------------------------------------ helpers
    def _state(self, rows: tuple[int, ...]) -> np.ndarray:
        return np.concatenate([t[r] for t, r in zip(self._obs_tables, rows)])

    def _setup(self) -> None:
        space = self.space
        self._obs_tables = []
        for d in space.dims:
            scale = math.log(d.extent) if d.extent > 1 else 1.0
            self._obs_tables.append((np.log(d.table.astype(np.float64)) / scale).astype(np.float32))
        n_obs = sum(d.splits for d in space.dims)
        self.actor = _mlp(n_obs, space.n_actions, self.hidden)
        self.critic = _mlp(n_obs, 1, self.hidden)
        self._optim = torch.optim.Adam([*self.actor.parameters(), *self.critic.parameters()], lr=self.lr)
        # the inverse of every action: x: p x[i] /p[j]  <->  x: p x[j] /p[i]
        self._inverse = [space.parse_action(Action(a.dim, a.shrink, a.grow, a.prime).name) for a in space.actions]
        self._policy_cache: dict[tuple[int, ...], np.ndarray] = {}

    def _policy_action(self, rows: tuple[int, ...], mask: np.ndarray) -> int:
        """Sample ``a ~ pi(s)`` over the legal actions (policy rows cached until the next training)."""
        cum = self._policy_cache.get(rows)
        if cum is None:
            with torch.no_grad():
                logits = self.actor(torch.from_numpy(self._state(rows))).numpy().astype(np.float64)
            probs = np.where(mask, np.exp(logits - logits[mask].max()), 0.0)
            cum = self._policy_cache[rows] = np.cumsum(probs)
        return int(min(np.searchsorted(cum, self.rng.random() * cum[-1], side="right"), len(cum) - 1))

    # ------------------------------------------------------------------------------- search
    def search(self) -> None:
        space = self.space
        self._setup()
        cost: dict[tuple[int, ...], float] = {}  # H_v: measured states and their costs
        memory: deque[tuple[np.ndarray, int, float, np.ndarray, np.ndarray]] = deque(maxlen=self.memory_size)  # M
        centre = space.rows(self.start_config(self.start))
        (result,) = self.measure([space.index_of_rows(centre)])
        cost[centre] = self.cost(result, self.failed_cost())
        s0 = space.rows(space.initial_config())
        if s0 not in cost and self.s0_result is not None:
            cost[s0] = self.cost(self.s0_result, self.failed_cost())
        ref = cost.get(s0, cost[centre])
        best = cost[centre]
        steps = self.steps
        while True:  # for each episode
            collect: dict[tuple[int, ...], None] = {}  # B_collect (ordered)
            limit = self.batch_size if self.remaining is None else min(self.batch_size, self.remaining)
            limit = min(limit, space.size - len(cost))
            if limit <= 0:
                self.check_budget()
                return
            idle = 0
            epsilon = self.epsilon
            while len(collect) < limit:
                s = centre
                found = False
                for _ in range(steps):  # walk T steps from the centre
                    mask = space.action_mask_of_rows(s)
                    if self.rng.random() < epsilon:
                        a = int(self.rng.choice(np.flatnonzero(mask)))  # random action
                    else:
                        a = self._policy_action(s, mask)  # a follows pi(s)
                    s = space.step_rows(s, a)
                    if s not in cost and s not in collect:
                        collect[s] = None
                        found = True
                        if len(collect) >= limit:
                            break
                idle = 0 if found else idle + 1
                if idle >= self.patience:  # the T-step neighbourhood is exhausted: look further, more randomly
                    steps += 1
                    epsilon = 1.0 - 0.5 * (1.0 - epsilon)
                    idle = 0
            batch = list(collect)
            results = self.measure([space.index_of_rows(s) for s in batch])
            failed = self.failed_cost()
            for s_next, result in zip(batch, results):
                if result is None:
                    continue
                c = self.cost(result, failed)
                cost[s_next] = c
                if c < best:  # move the centre to the best state found
                    best, centre, steps = c, s_next, self.steps
                self._remember(memory, s_next, math.log(ref / c), cost)
            self._train(memory)
            self._policy_cache.clear()

    def _remember(self, memory: deque, s_next: tuple[int, ...], reward: float, cost: dict) -> None:
        """Store ``(s, a, r, s')`` for every measured ``s`` with ``step(s, a) = s'``."""
        space = self.space
        obs_next = self._state(s_next)
        mask_next = space.action_mask_of_rows(s_next)
        for b in np.flatnonzero(mask_next):
            s = space.step_rows(s_next, int(b))
            if s in cost:
                a = self._inverse[int(b)]
                memory.append((self._state(s), a, reward, obs_next, space.action_mask_of_rows(s)))

    def _train(self, memory: deque) -> None:
        if not memory:
            return
        obs, actions, rewards, obs_next, masks = zip(*memory)
        obs_t = torch.from_numpy(np.stack(obs))
        next_t = torch.from_numpy(np.stack(obs_next))
        act_t = torch.tensor(actions, dtype=torch.int64)
        rew_t = torch.tensor(rewards, dtype=torch.float32)
        mask_t = torch.from_numpy(np.stack(masks))
        n = len(memory)
        for _ in range(self.train_iters):
            idx = torch.from_numpy(self.rng.choice(n, size=min(self.minibatch, n), replace=False))
            value = self.critic(obs_t[idx]).squeeze(-1)
            with torch.no_grad():
                target = rew_t[idx] + self.gamma * self.critic(next_t[idx]).squeeze(-1)
            advantage = target - value
            logits = self.actor(obs_t[idx]).masked_fill(~mask_t[idx], -1e9)
            log_probs = torch.log_softmax(logits, -1)
            chosen = log_probs.gather(1, act_t[idx, None]).squeeze(1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            actor_loss = -(chosen * advantage.detach()).mean() - self.entropy_coef * entropy.mean()
            critic_loss = advantage.pow(2).mean()
            self._optim.zero_grad()
            (actor_loss + 0.5 * critic_loss).backward()
            self._optim.step()
