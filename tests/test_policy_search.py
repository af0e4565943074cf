"""The policy-guided beam search (schedule_gym.benchmark.tuners.run_policy_search): the policy proposes, the
measurements decide, within the budget."""

from __future__ import annotations

import numpy as np
import pytest

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark.tuners import run_policy_search, run_policy_session
from schedule_gym.envs import MultiTaskEnv, TaskLayout
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import get_task

PROFILE = "znver4-2core-fitted"


class RecordingMock(MockBackend):
    """The mock, remembering every config it was asked to measure, in order."""

    def __init__(self) -> None:
        super().__init__(profile=PROFILE)
        self.asked: list[tuple] = []

    def measure(self, task, configs, on_result=None):
        self.asked.extend(tuple(tuple(f) for f in c) for c in configs)
        return super().measure(task, configs, on_result)


def preferring(order: list[int]):
    """A policy whose probabilities rank ``order`` first (in that order), then every other action by index."""

    def probabilities(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        p = np.full(mask.shape, 1e-3)
        for rank, a in enumerate(order):
            p[a] = 1.0 - rank * 0.1
        return np.where(mask, p / p.sum(), 0.0)

    return probabilities


def neighbour(task, layout, action: int) -> tuple:
    env = MultiTaskEnv(tasks=[task], layout=layout, backend=MockBackend(profile=PROFILE))
    env.reset(seed=0, options={"task": task.name})
    _, _, _, _, info = env.step(action)
    env.close()
    assert info["legal"]
    return tuple(tuple(f) for f in info["config"])


def test_the_search_measures_the_policys_proposals_first_and_spends_the_budget_exactly():
    task = get_task("gemm-256")
    layout = TaskLayout.of_tasks([task])
    env = MultiTaskEnv(tasks=[task], layout=layout, backend=MockBackend(profile=PROFILE))
    _, info = env.reset(seed=0, options={"task": task.name})
    legal = np.flatnonzero(info["action_mask"]).tolist()
    env.close()
    first, second = legal[-1], legal[0]  # not the index order, so the ranking is the policy's
    backend = RecordingMock()
    best = run_policy_search(preferring([first, second]), task, layout, backend, seed=0, budget=12, beam_width=1,
                             proposals=2)
    distinct = list(dict.fromkeys(backend.asked))
    assert len(distinct) == 12  # the budget, no more, no less
    # s0, then s0's two most probable moves
    assert distinct[1:3] == [neighbour(task, layout, first), neighbour(task, layout, second)]
    latencies = [MockBackend(profile=PROFILE).measure(task, [c])[0].latency_s for c in distinct]
    assert best == min(latencies)


def test_the_search_is_seeded_and_restarts_when_the_beam_is_surrounded():
    task = get_task("gemm-64")
    layout = TaskLayout.of_tasks([task])
    uniform = preferring([])
    runs = [run_policy_search(uniform, task, layout, MockBackend(profile=PROFILE), seed=s, budget=40, beam_width=2,
                              random_starts=3) for s in (0, 0)]
    assert runs[0] == runs[1] and runs[0] is not None
    # a space of fewer configs than the budget: the search measures what it reaches, restarting when the beam's
    # neighbourhoods are all measured, and stops after restarts in a row find nothing new
    tiny = get_task("gemm-4x2x4")
    space_size = TileSpace(tiny).size
    backend = RecordingMock()
    best = run_policy_search(uniform, tiny, TaskLayout.of_tasks([tiny]), backend, seed=0, budget=space_size + 50)
    measured = set(backend.asked)
    assert space_size * 0.9 <= len(measured) <= space_size
    assert best == min(r.latency_s for r in MockBackend(profile=PROFILE).measure(tiny, list(measured)))


def seeded_walk(seed: int):
    """A policy acting by a seeded draw among its legal moves: the same moves for the same observations in turn."""
    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray, mask: np.ndarray) -> int:
        return int(rng.choice(np.flatnonzero(mask)))

    return act


def test_a_lead_plays_the_policy_alone_first_then_the_beam_starts_from_what_it_found():
    task = get_task("gemm-256")
    layout = TaskLayout.of_tasks([task])
    alone, searched = RecordingMock(), RecordingMock()
    run_policy_session(seeded_walk(3), task, layout, alone, seed=0, budget=24)
    best = run_policy_search(preferring([]), task, layout, searched, seed=0, budget=24, beam_width=2,
                             random_starts=2, act=seeded_walk(3), lead=10)
    walk, search = list(dict.fromkeys(alone.asked)), list(dict.fromkeys(searched.asked))
    assert len(search) == 24
    assert search[:10] == walk[:10]  # the lead is the policy's own game, measurement for measurement
    assert search[10:] != walk[10:24]  # then the beam and its random starts, not the walk
    latencies = [r.latency_s for r in MockBackend(profile=PROFILE).measure(task, search)]
    assert best == min(latencies) <= min(latencies[:10])
    # without a lead the search is what it was: the same measurements whatever act is given
    plain, with_act = RecordingMock(), RecordingMock()
    run_policy_search(preferring([]), task, layout, plain, seed=0, budget=16, beam_width=2, random_starts=2)
    run_policy_search(preferring([]), task, layout, with_act, seed=0, budget=16, beam_width=2, random_starts=2,
                      act=seeded_walk(3))
    assert plain.asked == with_act.asked


def test_bad_search_settings_are_refused():
    task = get_task("gemm-64")
    with pytest.raises(ValueError, match="beam_width and proposals must be positive, got 0 and 2"):
        run_policy_search(preferring([]), task, TaskLayout.of_tasks([task]), MockBackend(profile=PROFILE), 0, 8,
                          beam_width=0)
    with pytest.raises(ValueError, match="a positive lead needs act"):
        run_policy_search(preferring([]), task, TaskLayout.of_tasks([task]), MockBackend(profile=PROFILE), 0, 8,
                          lead=4)
