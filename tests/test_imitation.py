"""The oracle walker's expert and DAgger on it (schedule_gym.benchmark.oracle, schedule_gym.baselines.imitation)."""

from __future__ import annotations

import csv

import numpy as np
import pytest

pytest.importorskip("torch")

from schedule_gym.backends.mock.backend import MockBackend  # noqa: E402
from schedule_gym.baselines.imitation import (  # noqa: E402
    ImitationArgs,
    expert_labels,
    imitation_env_kwargs,
    make_experts,
    train,
)
from schedule_gym.baselines.ppo_vec import load_checkpoint, make_envs  # noqa: E402
from schedule_gym.benchmark import get_protocol  # noqa: E402
from schedule_gym.benchmark.oracle import WalkExpert, all_latencies, move_distances  # noqa: E402
from schedule_gym.spaces import TileSpace  # noqa: E402
from schedule_gym.tasks import conv2d, gemm  # noqa: E402

TASKS = [gemm(64, 48, 96), gemm(36, 64, 32)]
BUDGET = 8


def session_kwargs(tasks=TASKS):
    return {"tasks": [t.to_dict() for t in tasks], "observation": "features", "reward": "best_improvement:0.005",
            "episode": "session", "start": "s0", "budget_measurements": BUDGET, "max_episode_steps": 4 * BUDGET}


def session_envs(n: int, tasks=TASKS):
    return make_envs("schedule_gym/MultiTask-v0", n, session_kwargs(tasks))


def test_distances_from_several_sources_are_the_nearest_sources():
    space = TileSpace(gemm(12, 8, 18))
    sources = np.array([3, space.size // 2, space.size - 1])
    together = move_distances(space, None, sources)
    alone = np.stack([move_distances(space, None, np.array([s])) for s in sources])
    assert (together == alone.min(axis=0)).all() and (together[sources] == 0).all() and together.max() > 2
    with pytest.raises(ValueError, match="at least one source"):
        move_distances(space, None, np.array([], dtype=np.int64))


def test_the_expert_marks_the_reachable_configs_near_the_best_reachable_one():
    task = gemm(64, 48, 96)
    backend = MockBackend()
    space = backend.space(task)
    latency = all_latencies(backend.latency_table(task, space), space.size)
    assert np.array_equal(latency, backend.model_latency_s(task, np.arange(space.size)))
    expert = WalkExpert(space, latency, BUDGET, 0.05)
    reach = move_distances(space, BUDGET - 1) >= 0
    assert expert.best_s == latency[reach].min() and expert.best_s > latency.min()  # the reach is smaller than the space
    good = expert.distance == 0
    assert good.sum() == expert.n_good and (good <= reach).all()
    assert (latency[good] <= 1.05 * expert.best_s).all()
    assert (latency[reach & ~good] > 1.05 * expert.best_s).all()
    assert (expert.distance >= 0).all()  # the whole space is searched: every config knows its way back
    with pytest.raises(ValueError, match="tolerance must be >= 0, got -0.1"):
        WalkExpert(space, latency, BUDGET, -0.1)
    with pytest.raises(ValueError, match="budget must be a positive integer, got 0"):
        WalkExpert(space, latency, 0, 0.05)


def test_expert_labels_are_the_legal_moves_nearest_the_good_set():
    envs = session_envs(16, tasks=[gemm(64, 48, 96), conv2d(1, 14, 14, 16, 16, 3, padding=1, groups=16)])
    try:
        experts = make_experts(envs, BUDGET, 0.05)
        envs.reset(seed=3)
        rng = np.random.default_rng(0)
        for _ in range(12):
            labels = expert_labels(envs, experts)
            core = envs.core
            for e in range(envs.num_envs):
                space, expert = core.spaces[core.task[e]], experts[core.task[e]]
                config = space.config(int(core.index[e]))
                moves = dict(space.neighbours(config))
                nearest = min(expert.distance[space.index(c)] for c in moves.values())
                expected = [a in moves and expert.distance[space.index(moves[a])] == nearest
                            for a in range(envs.single_action_space.n)]
                assert labels[e].tolist() == expected
                assert core.neighbour_indices()[e].tolist() == [space.index(moves[a]) if a in moves else -1
                                                                for a in range(envs.single_action_space.n)]
            envs.step((rng.random(labels.shape) * envs.action_masks()).argmax(axis=1))
    finally:
        envs.close()


def test_a_walker_taking_the_experts_moves_ends_its_session_among_the_good_configs():
    envs = session_envs(32)
    try:
        experts = make_experts(envs, BUDGET, 0.05)
        envs.reset(seed=0)
        rng, regrets = np.random.default_rng(1), []
        for _ in range(4 * BUDGET):
            labels = expert_labels(envs, experts)
            _, _, terminated, truncated, info = envs.step((rng.random(labels.shape) * labels).argmax(axis=1))
            done = terminated | truncated
            regrets += [info["best_latency_s"][e] / experts[info["task"][e]].best_s - 1.0 for e in np.flatnonzero(done)]
        assert len(regrets) >= 32 and max(regrets) <= 0.05 + 1e-12
    finally:
        envs.close()


def test_dagger_learns_the_experts_moves_and_saves_a_policy_checkpoint(tmp_path):
    envs = session_envs(64)
    try:
        path = train(ImitationArgs(iterations=4, num_envs=64, rollout_steps=32, hidden_size=64, tolerance=0.05,
                                   out=str(tmp_path)), envs, session_kwargs())
        with pytest.raises(ValueError, match="num_envs=32"):
            train(ImitationArgs(num_envs=32, out=str(tmp_path)), envs, session_kwargs())
        with pytest.raises(ValueError, match="needs the env_kwargs"):
            train(ImitationArgs(num_envs=64, out=str(tmp_path)), envs)
    finally:
        envs.close()
    with open(path.parent / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["expert_share"]) for r in rows] == [1.0, 0.5, 0.25, 0.125]
    agreement = [float(r["agreement"]) for r in rows]
    assert agreement[-1] > 0.7 and agreement[-1] > agreement[0] + 0.2  # the first is the untrained policy's
    policy = load_checkpoint(path)
    assert policy.meta["trainer"].startswith("imitation") and policy.meta["env_kwargs"] == session_kwargs()
    # the trained policy, acting alone and greedily, walks the training tasks to near their best reachable config
    assert np.median(greedy_regrets(policy, session_kwargs())) <= 0.1


def greedy_regrets(policy, kwargs):
    """The regrets (against the best reachable config) of the sessions a policy ends, playing greedily on 32 copies of
    the environment ``kwargs`` make."""
    envs = make_envs("schedule_gym/MultiTask-v0", 32, kwargs)
    try:
        experts = make_experts(envs, BUDGET, 0.05)
        obs, info = envs.reset(seed=5)
        regrets = []
        for _ in range(4 * BUDGET):
            obs, _, terminated, truncated, info = envs.step(policy.act(obs, info["action_mask"], deterministic=True))
            done = terminated | truncated
            regrets += [info["best_latency_s"][e] / experts[info["task"][e]].best_s - 1.0 for e in np.flatnonzero(done)]
        return regrets
    finally:
        envs.close()


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="tolerance must be >= 0, got -1"):
        ImitationArgs(tolerance=-1.0).check()
    with pytest.raises(ValueError, match="beta_decay must be in"):
        ImitationArgs(beta_decay=1.5).check()
    with pytest.raises(ValueError, match="iterations must be a positive integer, got 0"):
        ImitationArgs(iterations=0).check()
    with pytest.raises(ValueError, match="synthetic must be a non-negative integer, got -2"):
        ImitationArgs(synthetic=-2).check()
    with pytest.raises(ValueError, match="synthetic_depthwise must be a share in"):
        ImitationArgs(synthetic_depthwise=2.0).check()


def test_synthetic_layers_join_the_training_split_of_the_game():
    plain = imitation_env_kwargs("v1", "MoveScorer")
    wider = imitation_env_kwargs("v1", "MoveScorer", synthetic=3, depthwise=1.0)
    train = [t.name for t in get_protocol("v1").train_tasks()]
    assert plain["tasks"] == "resnet50,bert-base" and plain["observation"] == "move_features"
    assert wider["tasks"][:len(train)] == train and len(wider["tasks"]) == len(train) + 3
    assert all("-g" in name for name in wider["tasks"][len(train):])
    assert {k: v for k, v in wider.items() if k != "tasks"} == {k: v for k, v in plain.items() if k != "tasks"}


def test_dagger_trains_a_move_scorer_that_walks_the_training_tasks(tmp_path):
    kwargs = {**session_kwargs(), "observation": "move_features"}
    envs = make_envs("schedule_gym/MultiTask-v0", 64, kwargs)
    try:
        args = ImitationArgs(iterations=4, num_envs=64, rollout_steps=32, hidden_size=32, tolerance=0.05,
                             architecture="MoveScorer", out=str(tmp_path))
        path = train(args, envs, kwargs)
        with pytest.raises(ValueError, match="architecture Agent reads observation='features'"):
            train(ImitationArgs(num_envs=64, out=str(tmp_path)), envs, kwargs)
    finally:
        envs.close()
    with open(path.parent / "progress.csv") as f:
        agreement = [float(r["agreement"]) for r in csv.DictReader(f)]
    assert agreement[-1] > 0.7 and agreement[-1] > agreement[0] + 0.2
    policy = load_checkpoint(path)
    assert type(policy.agent).__name__ == "MoveScorer"
    assert np.median(greedy_regrets(policy, kwargs)) <= 0.1
