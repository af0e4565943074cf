"""The CleanRL-style PPO on the native vector environments (schedule_gym.baselines.ppo_vec) and its
benchmark tuner (schedule_gym.benchmark.ppo_tuner): masking, truncation bootstrapping, learning, checkpoints
that load without unpickling, logs."""

from __future__ import annotations

import csv
import json
import math
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from schedule_gym.baselines.ppo_vec import (
    MASKED_LOGIT,
    Agent,
    Args,
    PPOPolicy,
    compute_gae,
    load_checkpoint,
    make_envs,
    parse_args,
    save_checkpoint,
    train,
)

GEMM = "schedule_gym/Gemm-v0"
#: a trivially learnable setting: GEMM 64^3, reward log(s0 / latency) per step, 10-step episodes
# the mock profile is named, not the machine's ("auto"): how much a tiny run can learn depends on the landscape
LEARNABLE = {"m": 64, "k": 64, "n": 64, "reward": "log_speedup_s0", "max_episode_steps": 10,
             "backend_options": {"profile": "znver4-2core-fitted"}}


def tiny_args(tmp_path, **values) -> Args:
    defaults = dict(env_id=GEMM, env_kwargs=json.dumps(LEARNABLE), total_timesteps=512, num_envs=16, num_steps=16,
                    torch_threads=1, out=str(tmp_path), seed=0)
    return Args(**{**defaults, **values})


def mean_return(policy: PPOPolicy, episodes: int = 64, seed: int = 123) -> float:
    """Mean return of ``episodes`` sampled 10-step episodes of LEARNABLE (one each per sub-environment)."""
    envs = make_envs(GEMM, episodes, LEARNABLE)
    obs, info = envs.reset(seed=seed)
    generator = torch.Generator().manual_seed(seed)
    total = np.zeros(episodes)
    for _ in range(10):
        obs, reward, _, truncated, info = envs.step(policy.act(obs, info["action_mask"], generator=generator))
        total += reward
    assert truncated.all()
    return float(total.mean())


# ------------------------------------------------------------------------------------------------ masking
def test_masking_never_samples_an_illegal_action():
    # bert-base in its own layout: padding actions (never legal) and many illegal moves at every state
    envs = make_envs("schedule_gym/MultiTask-v0", 32, {"tasks": "bert-base", "start": "random"})
    obs_size, n_actions = envs.single_observation_space.shape[0], envs.single_action_space.n
    torch.manual_seed(0)
    agent = Agent(obs_size, n_actions)
    with torch.no_grad():  # an adversarial actor: huge logits on the last (padding, always illegal) actions
        agent.actor[-1].bias[-8:] = 1e4
    policy = PPOPolicy(agent, {"observation_size": obs_size, "n_actions": n_actions})
    generator = torch.Generator().manual_seed(0)
    obs, info = envs.reset(seed=0)
    illegal_seen = 0
    for step in range(200):
        mask = info["action_mask"]
        illegal_seen += int((~mask).sum())
        with torch.no_grad():
            action, logprob, entropy, _ = agent.get_action_and_value(torch.from_numpy(obs), torch.from_numpy(mask))
        assert mask[np.arange(32), action.numpy()].all()
        assert torch.isfinite(logprob).all() and torch.isfinite(entropy).all()
        for deterministic in (False, True):
            acted = policy.act(obs, mask, deterministic=deterministic, generator=generator)
            assert mask[np.arange(32), acted].all()
        for temperature in (0.01, 1e9):  # scaled before the mask: no temperature lifts an illegal action
            assert mask[np.arange(32), policy.act(obs, mask, generator=generator, temperature=temperature)].all()
        obs, _, _, _, info = envs.step(action.numpy())
        assert info["legal"].all()  # the environment's own verdict
    assert illegal_seen > 200 * 32 * 10  # the setting has many illegal moves
    assert MASKED_LOGIT < -1e6


def test_temperature_draws_from_the_softmax_of_the_logits_over_it():
    agent = Agent(2, 3)
    with torch.no_grad():  # logits (0, log 3, 5) whatever the input; the third action masked
        agent.actor[-1].weight.zero_()
        agent.actor[-1].bias.copy_(torch.tensor([0.0, math.log(3.0), 5.0]))
    policy = PPOPolicy(agent, {"observation_size": 2, "n_actions": 3})
    obs, mask = np.zeros((20000, 2), np.float32), np.tile(np.array([True, True, False]), (20000, 1))
    for temperature, share in ((1.0, 0.75), (0.5, 0.9), (2.0, 3**0.5 / (1 + 3**0.5))):
        actions = policy.act(obs, mask, generator=torch.Generator().manual_seed(0), temperature=temperature)
        assert set(np.unique(actions)) == {0, 1}
        assert abs((actions == 1).mean() - share) < 0.012, (temperature, (actions == 1).mean())
    for bad in (0, -1.0, float("inf"), float("nan"), "hot", True):
        with pytest.raises(ValueError, match=r"temperature must be a finite number > 0 .*got " + re.escape(repr(bad))):
            policy.act(obs[:1], mask[:1], temperature=bad)


def test_the_masked_categorical_is_torchs_categorical_of_the_masked_logits():
    torch.manual_seed(0)
    agent = Agent(6, 9)
    x, mask = torch.rand(64, 6), torch.rand(64, 9) > 0.6
    mask[:, 0] = True  # at least one legal action per row
    action, logprob, entropy, _ = agent.get_action_and_value(x, mask)
    reference = torch.distributions.Categorical(logits=agent.actor(x).masked_fill(~mask, float("-inf")))
    with torch.no_grad():
        assert torch.allclose(logprob, reference.log_prob(action), atol=1e-6)
        assert torch.allclose(entropy, reference.entropy(), atol=1e-6)


def test_sample_categorical_draws_the_distribution_and_never_a_zero_probability(monkeypatch):
    from schedule_gym.baselines.ppo_vec import sample_categorical

    probs = torch.tensor([[0.0, 0.25, 0.0, 0.75, 0.0, 0.0], [0.5, 0.0, 0.0, 0.0, 0.0, 0.5]])
    draws = torch.stack([sample_categorical(probs, torch.Generator().manual_seed(s)) for s in range(2000)])
    assert set(draws[:, 0].tolist()) == {1, 3} and set(draws[:, 1].tolist()) == {0, 5}
    assert (draws[:, 0] == 3).float().mean().item() == pytest.approx(0.75, abs=0.04)
    # uniform draws at the very bottom and top of [0, 1) land on actions of positive probability
    rows = torch.tensor([[0.0, 0.3, 0.7, 0.0], [0.0, 1.0000001, 0.0, 0.0], [0.0, 0.0, 0.2, 0.0]])
    for u in (0.0, 1.0 - 2.0**-24):
        monkeypatch.setattr(torch, "rand", lambda shape, generator=None, u=u: torch.full(shape, u))
        assert sample_categorical(rows).tolist() == ([1, 1, 2] if u == 0 else [2, 1, 2])


# ---------------------------------------------------------------------------------- truncation bootstrapping
def test_gae_bootstraps_a_truncated_step_from_its_final_observation_and_cuts_there():
    gamma, lam = 0.9, 0.8
    # one sub-environment: step 1 is truncated; step 2 is its autoreset (values[2] = V(final observation))
    rewards = torch.tensor([[1.0], [2.0], [0.0], [3.0]])
    values = torch.tensor([[0.5], [0.25], [4.0], [0.1]])
    next_value = torch.tensor([0.2])
    dones = torch.tensor([[0.0], [1.0], [0.0], [0.0]])
    not_terminated = torch.zeros(4, 1)
    adv, ret = compute_gae(rewards, values, next_value, not_terminated, dones, gamma, lam)
    a3 = 3 + gamma * 0.2 - 0.1
    a1 = 2 + gamma * 4.0 - 0.25  # bootstrapped from the final observation, nothing after it
    a0 = 1 + gamma * 0.25 - 0.5 + gamma * lam * a1
    assert adv[3, 0].item() == pytest.approx(a3)
    assert adv[1, 0].item() == pytest.approx(a1)
    assert adv[0, 0].item() == pytest.approx(a0)
    assert torch.allclose(ret, adv + values)
    # terminated instead: no bootstrap at all
    adv_t, _ = compute_gae(rewards, values, next_value, dones, dones, gamma, lam)
    assert adv_t[1, 0].item() == pytest.approx(2 - 0.25)
    assert adv_t[0, 0].item() == pytest.approx(1 + gamma * 0.25 - 0.5 + gamma * lam * (2 - 0.25))


def test_next_step_autoreset_returns_the_final_observation_with_truncated():
    """What the trainer relies on: in NEXT_STEP mode the observation returned with ``truncated`` is the one
    SAME_STEP reports as ``final_obs``, and the following step is the reset (reward 0, a new start)."""
    import gymnasium as gym

    kwargs = {"m": 64, "k": 64, "n": 64, "start": "random", "max_episode_steps": 3}
    next_step = make_envs(GEMM, 4, kwargs)
    same_step = gym.make_vec(GEMM, num_envs=4, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
    assert next_step.autoreset_mode is AutoresetMode.NEXT_STEP
    obs_n, info_n = next_step.reset(seed=5)
    obs_s, info_s = same_step.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(3):
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in info_n["action_mask"]])
        obs_n, r_n, _, trunc_n, info_n = next_step.step(actions)
        obs_s, r_s, _, trunc_s, info_s = same_step.step(actions)
        np.testing.assert_array_equal(r_n, r_s)
    assert trunc_n.all() and trunc_s.all()
    np.testing.assert_array_equal(obs_n, info_s["final_obs"])
    obs_n, r_n, _, trunc_n, info_n = next_step.step(np.zeros(4, dtype=np.int64))  # the autoreset step
    np.testing.assert_array_equal(obs_n, obs_s)
    assert (r_n == 0).all() and not trunc_n.any()


# ------------------------------------------------------------------------------------------------ learning
def test_a_tiny_run_learns_the_trivial_setting(tmp_path):
    path = train(tiny_args(tmp_path, total_timesteps=4096, learning_rate=2.5e-3, update_epochs=4, tensorboard=False))
    trained = load_checkpoint(path)
    torch.manual_seed(0)
    untrained = PPOPolicy(Agent(trained.observation_size, trained.n_actions), trained.meta)
    before, after = mean_return(untrained), mean_return(trained)
    assert after > before + 5.0, (before, after)


# --------------------------------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trips_to_the_same_actions(tmp_path):
    path = train(tiny_args(tmp_path, tensorboard=False))
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["env_id"] == GEMM and meta["env_kwargs"] == LEARNABLE and meta["layout"] is None
    assert meta["observation_size"] == 10 and meta["n_actions"] == 26 and meta["tasks"][0]["op"] == "gemm"
    first, second = load_checkpoint(path), load_checkpoint(path, weights=path.read_bytes(), meta=meta)
    envs = make_envs(GEMM, 32, {**LEARNABLE, "start": "random"})
    obs, info = envs.reset(seed=3)
    for deterministic in (True, False):
        a = first.act(obs, info["action_mask"], deterministic, torch.Generator().manual_seed(1))
        b = second.act(obs, info["action_mask"], deterministic, torch.Generator().manual_seed(1))
        np.testing.assert_array_equal(a, b)
    single = first.act(obs[0], info["action_mask"][0], deterministic=True)
    assert single == first.act(obs, info["action_mask"], deterministic=True)[0]
    with pytest.raises(ValueError, match=r"observations of size 10 with masks of 26 actions, got shapes \(32, 9\)"):
        first.act(obs[:, :9], info["action_mask"])
    # the saved agent is the trained one, not a fresh initialisation
    torch.manual_seed(0)
    fresh = Agent(10, 26).state_dict()
    assert any(not torch.equal(fresh[k], v) for k, v in first.agent.state_dict().items())


def test_a_run_starts_from_the_checkpoint_it_is_given(tmp_path):
    first = load_checkpoint(train(tiny_args(tmp_path / "a", tensorboard=False, seed=0)))
    # a learning rate of 1e-12 leaves the weights where they started, to float precision
    again = load_checkpoint(train(tiny_args(tmp_path / "b", tensorboard=False, seed=5, learning_rate=1e-12,
                                            init_from=str(first_path(tmp_path / "a")))))
    for k, v in first.agent.state_dict().items():
        torch.testing.assert_close(again.agent.state_dict()[k], v, rtol=0, atol=1e-9)
    torch.manual_seed(5)
    fresh = Agent(10, 26).state_dict()
    assert any(not torch.allclose(fresh[k], v) for k, v in first.agent.state_dict().items())
    with pytest.raises(ValueError, match="holds a policy of other sizes than this run's"):
        train(tiny_args(tmp_path / "c", tensorboard=False, hidden_size=32, init_from=str(first_path(tmp_path / "a"))))


def test_a_critic_warmup_trains_the_critic_and_leaves_the_actor_as_it_started(tmp_path):
    start = train(tiny_args(tmp_path / "a", tensorboard=False, seed=0))
    # 512 steps of 16 x 16: two updates, both within the warm-up
    warm = load_checkpoint(train(tiny_args(tmp_path / "b", tensorboard=False, seed=5, learning_rate=1e-2,
                                           init_from=str(start), critic_warmup=2))).agent.state_dict()
    cold = load_checkpoint(train(tiny_args(tmp_path / "c", tensorboard=False, seed=5, learning_rate=1e-2,
                                           init_from=str(start)))).agent.state_dict()
    before = load_checkpoint(start).agent.state_dict()
    for key, value in before.items():
        if key.startswith("actor."):
            assert torch.equal(warm[key], value), key  # untouched, to the bit
        else:
            assert not torch.equal(warm[key], value), key  # the critic learned
    assert any(not torch.equal(cold[k], v) for k, v in before.items() if k.startswith("actor."))
    with pytest.raises(ValueError, match="critic_warmup must be an integer >= 0, got -1"):
        train(tiny_args(tmp_path / "d", critic_warmup=-1))


def first_path(folder):
    return next(folder.glob("*/model.safetensors"))


class _Bomb:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def test_a_pickle_with_a_checkpoints_name_is_refused_unexecuted(tmp_path):
    good = save_checkpoint(Agent(10, 26), tmp_path / "good.safetensors",
                           {"architecture": {"hidden_size": 64, "n_hidden_layers": 2}, "observation_size": 10,
                            "n_actions": 26})
    marker = tmp_path / "executed"
    bomb = tmp_path / "model.safetensors"
    bomb.write_bytes(pickle.dumps(_Bomb(marker)))
    bomb.with_suffix(".json").write_text(good.with_suffix(".json").read_text())
    with pytest.raises(ValueError, match=r"model\.safetensors is not a safetensors file"):
        load_checkpoint(bomb)
    torch.save(Agent(10, 26).state_dict(), bomb)  # torch's own (pickled) format is refused too
    with pytest.raises(ValueError, match=r"model\.safetensors is not a safetensors file"):
        load_checkpoint(bomb)
    assert not marker.exists()


def test_mismatched_or_missing_sidecars_are_refused(tmp_path):
    meta = {"architecture": {"hidden_size": 64, "n_hidden_layers": 2}, "observation_size": 10, "n_actions": 26}
    path = save_checkpoint(Agent(10, 26), tmp_path / "model.safetensors", meta)
    sidecar = json.loads(path.with_suffix(".json").read_text())
    with pytest.raises(ValueError, match=r"model\.safetensors does not hold the policy"):
        load_checkpoint(path, meta={**sidecar, "architecture": {"hidden_size": 32, "n_hidden_layers": 2}})
    with pytest.raises(ValueError, match=r"model\.safetensors does not hold the policy"):
        load_checkpoint(path, meta={**sidecar, "n_actions": 27})
    with pytest.raises(ValueError, match=r"model\.json is not a schedule-gym/ppo_vec version 1 sidecar"):
        load_checkpoint(path, meta={**sidecar, "version": 2})
    with pytest.raises(ValueError, match=r"lacks the architecture"):
        load_checkpoint(path, meta={k: v for k, v in sidecar.items() if k != "architecture"})
    path.with_suffix(".json").unlink()
    with pytest.raises(ValueError, match=r"model\.json is not a readable checkpoint sidecar"):
        load_checkpoint(path)
    with pytest.raises(ValueError, match=r"a checkpoint's name ends in \.safetensors"):
        save_checkpoint(Agent(10, 26), tmp_path / "model.pt", meta)


# --------------------------------------------------------------------------------------------------- logs
def test_csv_and_tensorboard_logs_are_written(tmp_path):
    path = train(tiny_args(tmp_path, total_timesteps=1024, checkpoint_every=1))
    run = path.parent
    assert run.name.startswith("Gemm-v0__ppo_vec__0__")
    with open(run / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["global_step"]) for r in rows] == [256, 512, 768, 1024]
    for column in ("steps_per_s", "value_loss", "policy_loss", "entropy", "approx_kl", "clip_fraction",
                   "explained_variance", "wall_time_s"):
        assert all(math.isfinite(float(r[column])) for r in rows), column
    ended = [r for r in rows if int(r["episodes"])]
    assert ended and all(float(r["episodic_length"]) == 10 for r in ended)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = run.glob("events.out.tfevents.*")
    acc = EventAccumulator(str(events))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"charts/SPS", "charts/episodic_return", "losses/value_loss", "losses/approx_kl"} <= tags
    assert [e.step for e in acc.Scalars("losses/value_loss")] == [256, 512, 768, 1024]


def test_kept_checkpoints_are_the_policy_at_their_step(tmp_path):
    """With keep_checkpoints each periodic checkpoint stays as model-<step>; the last equals the final one."""
    path = train(tiny_args(tmp_path, total_timesteps=1024, checkpoint_every=2, keep_checkpoints=True, tensorboard=False))
    kept = sorted(path.parent.glob("model-*.safetensors"), key=lambda p: int(p.stem.split("-")[1]))
    assert [p.name for p in kept] == ["model-512.safetensors", "model-1024.safetensors"]
    first, last, final = (load_checkpoint(p) for p in (*kept, path))
    assert [p.meta["global_step"] for p in (first, last, final)] == [512, 1024, 1024]
    from safetensors.torch import load_file

    weights = [dict(load_file(str(p))) for p in (*kept, path)]
    assert all(torch.equal(weights[1][k], weights[2][k]) for k in weights[2])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[2])


def test_autoreset_steps_are_left_out_of_the_update(tmp_path):
    # 3-step episodes, 4-step rollouts: every 4th step of a sub-environment is its autoreset
    path = train(tiny_args(tmp_path, env_kwargs=json.dumps({**LEARNABLE, "max_episode_steps": 3}), num_envs=4,
                           num_steps=4, total_timesteps=48, tensorboard=False))
    with open(path.parent / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["update_steps"]) for r in rows] == [4 * 4 - 4, 4 * 4 - 4, 4 * 4 - 4]  # 3 valid steps in 4
    assert [int(r["episodes"]) for r in rows] == [4, 4, 4]
    assert all(float(r["episodic_length"]) == 3 for r in rows)


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        parse_args(["--env-kwargs", "[1, 2"])
    with pytest.raises(SystemExit):
        parse_args(["--num-envs", "0"])
    args, rest = parse_args(["--no-tensorboard", "--num-envs", "8"])
    assert not args.tensorboard and args.num_envs == 8 and rest == {}
    with pytest.raises(ValueError, match="no native vector environment"):
        make_envs("schedule_gym/Model-v0", 2, {})
    with pytest.raises(ValueError, match="env_kwargs may not set 'autoreset_mode'"):
        train(Args(env_kwargs='{"autoreset_mode": "SameStep"}'))


# ---------------------------------------------------------------------------------------- benchmark tuner
def test_ppo_tuner_runs_the_smoke_protocol_and_travels_as_plain_data(tmp_path):
    from schedule_gym.benchmark import get_protocol, run_protocol
    from schedule_gym.benchmark.ppo_tuner import main, ppo_tuner

    main(["--protocol", "smoke", "--total-timesteps", "512", "--num-envs", "16", "--num-steps", "16",
          "--torch-threads", "1", "--out", str(tmp_path), "--no-tensorboard"])
    (path,) = tmp_path.glob("MultiTask-v0__ppo_vec_smoke__1__*/model.safetensors")
    assert load_checkpoint(path).layout == get_protocol("smoke").layout().to_dict()
    tuner = ppo_tuner(path, "smoke")
    row = run_protocol(tuner, "smoke", "ppo_vec")
    assert all(math.isfinite(r["regret"]) and r["regret"] >= 0 for r in row["tasks"])
    clone = pickle.loads(pickle.dumps(tuner))  # what a Ray worker gets: bytes and the sidecar, no model
    assert clone._policy is None and clone.portable
    assert run_protocol(clone, "smoke", "ppo_vec")["tasks"] == row["tasks"]  # seeded: the same runs
    # the command line takes the checkpoint as --policy, and scores the same runs
    from schedule_gym.cli import main as cli

    out = tmp_path / "row.json"
    assert cli(["benchmark", "--protocol", "smoke", "--policy", str(path), "--quiet", "--out", str(out)]) == 0
    cli_row = json.loads(out.read_text())
    assert cli_row["agent"] == "policy:model" and cli_row["tasks"] == row["tasks"]
    assert cli(["benchmark", "--protocol", "v0", "--policy", str(path), "--quiet"]) == 2  # its layout is smoke's
    # the policy-guided beam search: the same checkpoint proposing, the measurements deciding
    guided = ppo_tuner(path, "smoke", beam_width=2, random_starts=1)
    guided_row = run_protocol(guided, "smoke", "ppo_vec+beam")
    assert all(math.isfinite(r["regret"]) and r["regret"] >= 0 for r in guided_row["tasks"])
    assert run_protocol(pickle.loads(pickle.dumps(guided)), "smoke", "ppo_vec+beam")["tasks"] == guided_row["tasks"]
    assert cli(["benchmark", "--protocol", "smoke", "--policy", str(path), "--agent-param", "beam_width=2",
                "--agent-param", "random_starts=1", "--quiet", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["tasks"] == guided_row["tasks"]
    assert cli(["benchmark", "--protocol", "smoke", "--policy", str(path), "--agent-param", "beam=2", "--quiet"]) == 2
    with pytest.raises(ValueError, match="beam_width must be an integer >= 0, got -1"):
        ppo_tuner(path, "smoke", beam_width=-1)
    # the policy alone for half of each budget, then the beam from what it found
    led = ppo_tuner(path, "smoke", beam_width=2, random_starts=1, policy_share=0.5)
    led_row = run_protocol(led, "smoke", "ppo_vec+lead")
    assert all(math.isfinite(r["regret"]) and r["regret"] >= 0 for r in led_row["tasks"])
    assert run_protocol(pickle.loads(pickle.dumps(led)), "smoke", "ppo_vec+lead")["tasks"] == led_row["tasks"]
    assert cli(["benchmark", "--protocol", "smoke", "--policy", str(path), "--agent-param", "beam_width=2",
                "--agent-param", "random_starts=1", "--agent-param", "policy_share=0.5", "--quiet", "--out",
                str(out)]) == 0
    assert json.loads(out.read_text())["tasks"] == led_row["tasks"]
    for bad, message in ((1.5, "policy_share must be a number from 0 to 1, got 1.5"),
                         ("half", "policy_share must be a number from 0 to 1, got 'half'")):
        with pytest.raises(ValueError, match=message):
            ppo_tuner(path, "smoke", beam_width=2, policy_share=bad)
    with pytest.raises(ValueError, match="needs beam_width >= 1"):
        ppo_tuner(path, "smoke", policy_share=0.5)
    # the policy played at a temperature: 1 is the default's runs, another one other runs, both on the command line
    assert run_protocol(ppo_tuner(path, "smoke", temperature=1.0), "smoke", "ppo_vec")["tasks"] == row["tasks"]
    # (this barely trained policy's logits lie within a few hundredths of each other: a low temperature parts them)
    cooled = run_protocol(ppo_tuner(path, "smoke", temperature=0.01), "smoke", "ppo_vec@0.01")
    assert cooled["tasks"] != row["tasks"]
    assert cli(["benchmark", "--protocol", "smoke", "--policy", str(path), "--agent-param", "temperature=0.01",
                "--quiet", "--out", str(out)]) == 0
    cli_row = json.loads(out.read_text())
    assert cli_row["tasks"] == cooled["tasks"] and cli_row["params"]["temperature"] == 0.01
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        ppo_tuner(path, "smoke", temperature=0)
    with pytest.raises(ValueError, match="protocol v0 needs"):
        ppo_tuner(path, "v0")
    with pytest.raises(SystemExit):
        main(["--protocol", "smoke", "--env-kwargs", '{"tasks": "bert-base"}'])


SHIPPED = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "leaderboard").glob("*.safetensors"))


def test_every_shipped_checkpoint_is_checked_below():
    assert len(SHIPPED) >= 9 and {"v1-dagger16-synth", "v1-ppo16-synth", "v1-ppo-moves64"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_shipped_checkpoints_load_pass_the_leak_check_and_play_a_held_out_task(name):
    """Each shipped checkpoint loads from its tensors and JSON sidecar (nothing unpickled), fits v1's layout,
    was trained on no held-out computation (its .meta.json, checked as the benchmark checks it), and plays a
    held-out task to a measured best."""
    from schedule_gym.backends.mock.backend import MockBackend
    from schedule_gym.benchmark import get_protocol
    from schedule_gym.benchmark.ppo_tuner import ppo_tuner
    from schedule_gym.benchmark.pretrained import check_artefact

    path = Path(__file__).resolve().parents[1] / "leaderboard" / f"{name}.safetensors"
    v1 = get_protocol("v1").at_budget(16)
    assert check_artefact(v1, path) in ("v0", "v1")
    tuner = ppo_tuner(path, v1)
    task = v1.held_out_tasks()[0]
    best = tuner(task, MockBackend(profile=v1.profile), seed=0, budget=16)
    assert best is not None and math.isfinite(best) and best > 0


def test_session_env_kwargs_is_the_game_the_shipped_v1_checkpoint_was_trained_on():
    """The learning curves train on session_env_kwargs(protocol at its track); the shipped checkpoint's sidecar
    records exactly those arguments, and another track changes the budget and the move cap with it."""
    from pathlib import Path

    from schedule_gym.benchmark.ppo_tuner import SESSION_SETTINGS, session_env_kwargs

    sidecar = Path(__file__).resolve().parents[1] / "leaderboard" / "v1-ppo-vec-val.json"
    assert session_env_kwargs("v1", 64) == json.loads(sidecar.read_text())["env_kwargs"]
    at_16 = session_env_kwargs("v1", 16)
    for name in ("v1-ppo-vec-val16", "v1-dagger16"):  # PPO's and the imitation policy's game at 16
        assert at_16 == json.loads(sidecar.with_name(f"{name}.json").read_text())["env_kwargs"]
    moves = json.loads(sidecar.with_name("v1-dagger16-moves.json").read_text())["env_kwargs"]  # in its observation
    assert moves == {**at_16, "observation": "move_features"}
    assert (at_16["budget_measurements"], at_16["max_episode_steps"]) == (16, 64)
    assert SESSION_SETTINGS.items() <= at_16.items()
    with pytest.raises(ValueError, match="no budget track 100"):
        session_env_kwargs("v1", 100)
