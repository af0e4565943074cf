"""Search agents that tune through the environment; installed as ``schedule_gym.agents``.

This folder is mapped into the ``schedule_gym`` namespace by ``pyproject.toml`` (an installed top-level
``agents`` package would shadow the OpenAI Agents SDK). Import it as ``schedule_gym.agents``.

Every agent runs on any backend through :meth:`Agent.run(env, budget) <schedule_gym.agents.base.Agent.run>`
and returns a :class:`~schedule_gym.agents.base.TuneResult`:

| name     | class               | method                                                                 |
|----------|---------------------|------------------------------------------------------------------------|
| random   | RandomSearchAgent   | uniform random search without replacement                              |
| gbfs     | GBFSAgent           | greedy best-first search (Zhang et al., Algorithm 1)                   |
| na2c     | NA2CAgent           | neighbourhood actor-advantage-critic (Zhang et al., Algorithm 2)       |
| felix    | FelixAgent          | gradient descent on a relaxed, differentiable cost model (Zhao et al.) |
| nn       | NNSelectAgent       | NN-assisted tile selection (Rahman, Pouchet, Sadayappan, iWAPT 2010)   |
| xgb      | XGBTunerAgent       | baseline: AutoTVM-style XGBoost tuner (``schedule_gym.baselines``)     |
| rnn      | RNNControllerAgent  | baseline: LSTM controller trained with REINFORCE (Zoph & Le style)     |
| grid     | GridSearchAgent     | baseline: every config in index order (small spaces)                   |
| policy   | PolicyTunerAgent    | baseline: a trained Stable-Baselines3 policy (``model=`` a saved .zip)  |
| csp      | CSPAgent            | Composed Singular Prediction over tiles and loop orders (Patabandi, Hall) |
| mdf      | MDFAgent            | baseline: one model over the tiles x orders product (the paper's MDF)  |
| orders   | OrderChoiceAgent    | any tile agent (``inner=``) over a few loop orders, successive halving  |
| transfer | TransferAgent       | AutoTVM-style search from a cost model pretrained across operators     |

``csp``, ``mdf`` and ``orders`` tune schedules (tiles and loop order) and run on a
:class:`~schedule_gym.envs.ScheduleEnv`; random search and G-BFS run on either environment.

Baselines that search the same way (through the environment, under a budget) register here too, so the
``tune`` command and the comparisons run them like any agent.
"""

from __future__ import annotations

import importlib
from typing import Any

from schedule_gym.agents.base import Agent, Budget, BudgetSpent, HistoryRow, TuneResult
from schedule_gym.extras import require

__all__ = ["AGENTS", "AGENT_NEEDS", "SCHEDULE_AGENTS", "SELF_CONTAINED", "Agent", "Budget", "BudgetSpent", "HistoryRow", "TuneResult", "agent_class", "make_agent"]

#: Agent classes by short name, as ``module:Class`` (imported on first use: torch loads only when needed).
AGENTS: dict[str, str] = {
    "random": "schedule_gym.agents.random_search:RandomSearchAgent",
    "gbfs": "schedule_gym.agents.gbfs:GBFSAgent",
    "na2c": "schedule_gym.agents.na2c:NA2CAgent",
    "felix": "schedule_gym.agents.felix:FelixAgent",
    "nn": "schedule_gym.agents.nn_select:NNSelectAgent",
    "xgb": "schedule_gym.baselines.xgb_tuner:XGBTunerAgent",
    "rnn": "schedule_gym.baselines.rnn_controller:RNNControllerAgent",
    "grid": "schedule_gym.baselines.grid_search:GridSearchAgent",
    "policy": "schedule_gym.baselines.sb3_tuner:PolicyTunerAgent",
    # on a ScheduleEnv (tiles and loop order): Patabandi and Hall's CSP and its MDF baseline
    "csp": "schedule_gym.agents.csp:CSPAgent",
    "mdf": "schedule_gym.agents.csp:MDFAgent",
    # any tile agent (Felix, N-A2C...) on a ScheduleEnv, the loop order chosen by successive halving
    "orders": "schedule_gym.agents.order_choice:OrderChoiceAgent",
    # model-based search from a cost model pretrained across operators (AutoTVM + TenSet's transfer)
    "transfer": "schedule_gym.agents.transfer:TransferAgent",
}

#: What an agent needs beyond the core install: the extra that installs it and the modules it imports (empty:
#: every module of the extra). :func:`agent_class` checks them before importing the agent, so a core install
#: asked for ``na2c`` says ``pip install 'schedule-gym[agents]'`` before anything is measured.
AGENT_NEEDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "na2c": ("agents", ("torch",)),
    "felix": ("agents", ("torch",)),
    "nn": ("agents", ("torch",)),
    "rnn": ("agents", ("torch",)),
    "xgb": ("baselines", ("xgboost",)),
    "policy": ("rl", ()),
    "csp": ("baselines", ("xgboost",)),
    "mdf": ("baselines", ("xgboost",)),
    "transfer": ("baselines", ("xgboost",)),
}

#: agents that tune schedules (tiles and loop order): they need a ScheduleEnv
SCHEDULE_AGENTS = ("csp", "mdf", "orders")
#: agents that need no argument beyond a seed (``policy`` needs a trained model)
SELF_CONTAINED = tuple(name for name in AGENTS if name != "policy" and name not in SCHEDULE_AGENTS)


def agent_class(name: str) -> type[Agent]:
    """The agent class registered under ``name``; :class:`~schedule_gym.errors.MissingExtraError` (an
    ``ImportError``) naming the extra to install if it needs a module that is not installed."""
    if not isinstance(name, str) or name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; known agents: {', '.join(AGENTS)}")
    if name in AGENT_NEEDS:
        extra, modules = AGENT_NEEDS[name]
        require(f"agent {name!r}", extra, modules=modules)
    module, cls = AGENTS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_agent(name: str, seed: int = 0, **params: Any) -> Agent:
    """An agent by short name, with its hyper-parameters; unknown parameters are named in the error."""
    cls = agent_class(name)
    try:
        return cls(seed=seed, **params)
    except TypeError as exc:
        raise TypeError(f"bad parameters {params!r} for agent {name!r}: {exc}") from None
