"""Tuners: how one held-out task is tuned for one seed and budget, by a search agent or a trained policy.

A tuner made by :func:`agent_tuner` (an agent's name and parameters) or by :func:`policy_tuner` given a policy
file (the file's bytes) is ``portable``: plain data, rebuilt on a Ray worker
(:mod:`schedule_gym.benchmark.ray_fanout`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark.policy import load_policy
from schedule_gym.benchmark.protocol import Protocol, get_protocol
from schedule_gym.envs.observations import TaskLayout
from schedule_gym.tasks import Task

__all__ = ["AgentTuner", "PolicyTuner", "TaskResult", "Tuner", "agent_tuner", "policy_tuner", "run_policy_search",
           "run_policy_session"]

#: restarts in a row that may find only measured configs before a policy-guided search stops (a space smaller
#: than the budget, nearly all measured)
MAX_FRUITLESS_RESTARTS = 100
#: moves per measurement a policy's lead in a policy-guided search may take (``run_policy_session``'s default cap)
MAX_LEAD_STEPS_FACTOR = 20
#: ``tune(task, backend, seed, budget) -> best latency (s) or None``: how one held-out task is tuned
Tuner = Callable[[Task, MockBackend, int, int], "float | None"]
#: one held-out task's results: its index in the protocol's order, its reference ``(latency_s, kind)``, and
#: the best latency of each seed (None: nothing measured)
TaskResult = tuple[int, tuple[float, str], list["float | None"]]


@dataclass(frozen=True)
class AgentTuner:
    """A tuner running a registered search agent (:func:`schedule_gym.agents.make_agent`) on a TilingEnv.
    Plain data, the agent's name and parameters: a Ray worker rebuilds it from them (``portable``)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    portable: ClassVar[bool] = True

    def artefacts(self) -> tuple[Path, ...]:
        """The files the parameters name (a path, or a list of paths, that exists) and those the agent loads by
        default (:meth:`~schedule_gym.agents.Agent.default_artefacts`): pretrained artefacts whose sidecars
        ``run_protocol`` checks against the protocol's held-out tasks."""
        from schedule_gym.agents import agent_class

        values = [v for value in self.params.values() for v in (value if isinstance(value, (list, tuple)) else [value])]
        named = tuple(Path(v) for v in values if isinstance(v, (str, os.PathLike)) and Path(v).is_file())
        return named + agent_class(self.name).default_artefacts(self.params)

    def __call__(self, task: Task, backend: MockBackend, seed: int, budget: int) -> float | None:
        from schedule_gym.agents import make_agent
        from schedule_gym.envs import TilingEnv

        env = TilingEnv(task, backend=backend)
        try:
            return make_agent(self.name, seed, **self.params).run(env, budget).best_latency_s
        finally:
            env.close()


def agent_tuner(name: str, params: dict[str, Any] | None = None) -> AgentTuner:
    """An :class:`AgentTuner`; an unknown agent or bad parameters fail here, before anything runs."""
    from schedule_gym.agents import make_agent

    make_agent(name, 0, **(params or {}))
    return AgentTuner(name, dict(params or {}))


class PolicyTuner:
    """A tuner running a trained SB3 policy (see :func:`policy_tuner`). Made from a policy file it holds the
    file's bytes and is ``portable``: it pickles as those bytes, the protocol and its two step counts, never
    as the loaded model, and a Ray worker loads the model from the bytes (:func:`load_policy`: unpickling
    nothing). Made from a model in memory it runs on this machine only."""

    def __init__(self, model: Any, protocol: Protocol, episode_steps: int = 100, max_steps_factor: int = 20,
                 policy_bytes: bytes | None = None, path: Path | None = None) -> None:
        if model is None and policy_bytes is None:
            raise TypeError("a PolicyTuner needs a model or the bytes of a policy file")
        self.path = path
        self.protocol = protocol
        self.episode_steps = episode_steps
        self.max_steps_factor = max_steps_factor
        self.policy_bytes = policy_bytes
        self._model = model

    @property
    def portable(self) -> bool:
        return self.policy_bytes is not None

    def artefacts(self) -> tuple[Path, ...]:
        """The policy file, if made from one (its sidecar is checked by ``run_protocol``)."""
        return () if self.path is None else (self.path,)

    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = load_policy(self.policy_bytes, self.protocol)
        return self._model

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.portable:
            state["_model"] = None
        return state

    def __call__(self, task: Task, backend: MockBackend, seed: int, budget: int) -> float | None:
        import torch

        model = self.model
        maskable = hasattr(model, "policy") and "Maskable" in type(model.policy).__name__

        def act(obs: np.ndarray, mask: np.ndarray) -> int:
            action, _ = model.predict(obs, deterministic=False, **({"action_masks": mask} if maskable else {}))
            return int(action)

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return run_policy_session(act, task, self.protocol.layout(), backend, seed, budget, self.episode_steps,
                                      self.max_steps_factor)


def policy_tuner(policy: Any, protocol: Protocol, episode_steps: int = 100, max_steps_factor: int = 20) -> PolicyTuner:
    """A tuner running a trained SB3 policy (MaskablePPO: illegal moves masked) on a MultiTaskEnv of the
    held-out split: episodes of ``episode_steps`` moves from ``s0`` within one measurement session, actions
    sampled from the policy (torch seeded per run), until ``budget`` unique configs are measured or
    ``max_steps_factor * budget`` moves are made.

    ``policy``: a loaded model, or the path of a model saved by SB3 (loaded here with :func:`load_policy`,
    unpickling nothing; a bad file is a ``ValueError``), which makes a tuner that can run on Ray."""
    if isinstance(policy, (str, os.PathLike)):
        model = load_policy(policy, protocol)
        return PolicyTuner(model, get_protocol(protocol), episode_steps, max_steps_factor,
                           policy_bytes=Path(policy).read_bytes(), path=Path(policy))
    return PolicyTuner(policy, get_protocol(protocol), episode_steps, max_steps_factor)


def run_policy_session(act: Callable[[np.ndarray, np.ndarray], int], task: Task, layout: TaskLayout,
                       backend: MockBackend, seed: int, budget: int, episode_steps: int = 100,
                       max_steps_factor: int = 20, env_options: dict[str, Any] | None = None) -> float | None:
    """The best latency a policy finds on ``task``: ``act(observation, action_mask)`` chooses each move on a
    ``MultiTaskEnv`` in ``layout`` made with the options the policy was trained with (``env_options``: its
    observation, reward, episode kind...), within one measurement session of ``budget`` unique configs, for at
    most ``max_steps_factor * budget`` moves; None if nothing was measured.

    A policy trained on session episodes (``episode="session"``) plays exactly its training game: one episode
    from ``s0`` that the spent budget truncates. Any other policy plays episodes of ``episode_steps`` moves from
    ``s0`` within the one session."""
    from schedule_gym.envs import MultiTaskEnv

    options = {**(env_options or {}), "budget_measurements": budget}
    env = MultiTaskEnv(tasks=[task], layout=layout, backend=backend, **options)
    session_episode = options.get("episode") == "session"
    try:
        obs, info = env.reset(seed=seed, options={"task": task.name})
        session = env.env.session
        steps = 0
        if session_episode:
            truncated = False
            while not truncated and steps < max_steps_factor * budget:
                obs, _, _, truncated, info = env.step(int(act(obs, info["action_mask"])))
                steps += 1
            best = session.best
            return None if best is None else best.latency_s
        while session.num_measurements < budget and steps < max_steps_factor * budget:
            for _ in range(episode_steps):
                obs, _, _, truncated, info = env.step(int(act(obs, info["action_mask"])))
                steps += 1
                if truncated or session.num_measurements >= budget:
                    break
            if session.budget_exhausted():
                break
            obs, info = env.reset(options={"task": task.name, "keep_session": True})
        best = session.best
        return None if best is None else best.latency_s
    finally:
        env.close()


def run_policy_search(probabilities: Callable[[np.ndarray, np.ndarray], np.ndarray], task: Task, layout: TaskLayout,
                      backend: MockBackend, seed: int, budget: int, beam_width: int = 4, proposals: int = 2,
                      random_starts: int = 0, env_options: dict[str, Any] | None = None,
                      act: Callable[[np.ndarray, np.ndarray], int] | None = None, lead: int = 0) -> float | None:
    """The best latency a policy-guided beam search finds on ``task`` within ``budget`` unique configs (None if
    nothing was measured): the policy proposes, the measurements decide.

    The beam holds the ``beam_width`` fastest configs measured so far (at first ``s0`` and ``random_starts``
    configs drawn uniformly). Each round, every beam
    config is set as the state of a ``MultiTaskEnv`` (the options the policy was trained with,
    ``env_options``: it sees the observation it was trained on, search state included), and its ``proposals``
    most probable legal moves that reach a config not yet measured are taken, each measured once (moves to
    measured configs cost nothing and are skipped: the session's cache decides). The round's new measurements
    join the beam's candidates; the beam becomes the fastest ``beam_width`` of all measured. When no beam
    config has an unmeasured neighbour left, the search restarts from a random config (drawn with ``seed``).

    ``lead`` > 0 lets the policy play alone first: ``act(observation, action_mask)`` moves from ``s0`` until
    ``lead`` configs are measured (at most ``MAX_LEAD_STEPS_FACTOR * lead`` moves), exactly the game
    :func:`run_policy_session` plays with ``act`` (the same observations: the environment has no step limit and
    counts the whole budget), so its first ``lead`` measurements are the policy's own. The beam then starts from
    the fastest ``beam_width`` configs it measured, with ``random_starts`` random configs beside them: where the
    policy's training ground ranks the kernels right its walk finds the fast region, and where it does not the
    measurements of the beam take over.
    """
    from schedule_gym.envs import MultiTaskEnv

    if beam_width < 1 or proposals < 1:
        raise ValueError(f"beam_width and proposals must be positive, got {beam_width} and {proposals}")
    if lead < 0 or (lead and act is None):
        raise ValueError(f"lead must be >= 0, and a positive lead needs act (the policy's moves), got lead={lead}")
    # one session throughout: the search resets the state to beam configs, which a session episode would end
    options = {**(env_options or {}), "budget_measurements": budget, "episode": "steps"}
    env = MultiTaskEnv(tasks=[task], layout=layout, backend=backend, **options)
    name = task.name
    measured: dict[tuple, float] = {}  # config -> exact latency (failed and censored configs are never in a beam)

    def note(info: dict[str, Any]) -> None:
        if info["new_measurement"] and info["latency_s"] is not None and not info["censored"]:
            measured[tuple(tuple(f) for f in info["config"])] = info["latency_s"]

    def fastest() -> list[list]:
        """The ``beam_width`` fastest configs measured so far (empty before any exact measurement)."""
        return [list(c) for c in sorted(measured, key=measured.__getitem__)[:beam_width]]

    def restart() -> dict[str, Any] | None:
        """Reset to a random config (the environment's generator, seeded by ``seed``); its info if the config is
        new to the session, else None (a reset's info calls any config with a result new: the count tells)."""
        count = session.num_measurements
        _, info = env.reset(options={"task": name, "start": "random", "keep_session": True})
        if session.num_measurements == count:
            return None
        note(info)
        return info

    try:
        obs, info = env.reset(seed=seed, options={"task": name})
        note(info)
        session = env.env.session
        beam = [info["config"]]
        if lead:  # the policy alone, as run_policy_session plays it, then the beam from the fastest it measured
            steps = 0
            while session.num_measurements < min(lead, budget) and steps < MAX_LEAD_STEPS_FACTOR * lead:
                obs, _, _, _, info = env.step(int(act(obs, info["action_mask"])))
                note(info)
                steps += 1
            beam = fastest() or beam
        # random configs beside the beam's, so the beam is not all near s0 (or near the policy's walk)
        for _ in range(min(random_starts, budget - session.num_measurements)):
            start = restart()
            if start is not None:
                beam.append(start["config"])
        fruitless = 0  # restarts in a row that found nothing new
        while not session.budget_exhausted() and fruitless < MAX_FRUITLESS_RESTARTS:
            grew = False
            for config in beam:
                obs, info = env.reset(options={"task": name, "config": config, "keep_session": True})
                ranked = np.argsort(-probabilities(obs, info["action_mask"]), kind="stable")
                taken = 0
                for action in ranked[info["action_mask"][ranked]].tolist():
                    obs, _, _, truncated, info = env.step(action)
                    if info["new_measurement"]:
                        note(info)
                        taken += 1
                        grew = True
                    if truncated or taken == proposals:
                        break
                    obs, info = env.reset(options={"task": name, "config": config, "keep_session": True})
                if session.budget_exhausted():
                    break
            if not grew and not session.budget_exhausted():  # every beam config's neighbourhood is measured
                fruitless = 0 if restart() is not None else fruitless + 1
            beam = fastest() or beam
        best = session.best
        return None if best is None else best.latency_s
    finally:
        env.close()
