"""FelixAgent (gradient descent on a differentiable cost model): budgets, seeding, optimum, checkpoints, features.

Runs use few descent steps and small models where the defaults are not the point, so each test takes
seconds even on the shared 2-core machine.
"""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch

from schedule_gym import LatencyBackend, MeasureResult, MockBackend, TilingEnv, gemm
from schedule_gym.agents.felix import (
    FeatureSpec,
    FelixAgent,
    FelixCostModel,
    LogRelaxation,
    TileFeaturizer,
    is_one_gate,
    load_cost_model,
    pretrain_cost_model,
    save_cost_model,
    smooth_max,
    smooth_min,
    smooth_relu,
    smooth_step,
)
from schedule_gym.envs import gemm_env, table_env
from schedule_gym.loopnest import LoopNest, operand_extents
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import batch_matmul, conv2d, dense

FAST = {"n_steps": 20, "hidden_size": 32, "train_steps": 10}


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Run torch single-threaded here, restoring the setting after.

    On the shared 2-core machine, OpenMP workers spin-wait after every parallel region (MKL threads
    even an 8 x 256 matmul); when another process holds a core, each of the agent's thousands of tiny
    operations then waits for a descheduled thread and runs 5-10x slower. The agent itself never
    changes torch's global settings.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def history(result):
    return [(r.index, r.latency_s) for r in result.history]


@pytest.fixture(scope="module")
def small_model() -> FelixCostModel:
    return pretrain_cost_model(["gemm-256"], n_samples=512, epochs=2, hidden_size=16, seed=0)


# ------------------------------------------------------------------------------- the agent
def test_budget_is_exact_on_1024():
    env = gemm_env(1024, 1024, 1024)
    result = FelixAgent(seed=0, **FAST).run(env, 50)
    assert result.num_measurements == 50
    assert env.session.num_measurements == 50
    assert len({r.index for r in result.history}) == 50
    assert result.stop_reason == "budget"


def test_budget_exact_with_a_pretrained_model(small_model):
    env = gemm_env(256, 256, 256)
    result = FelixAgent(seed=1, cost_model=small_model, **FAST).run(env, 37)
    assert result.num_measurements == 37 == env.session.num_measurements


def test_same_seed_same_history_and_agent_reusable():
    agent = FelixAgent(seed=3, **FAST)
    first = agent.run(gemm_env(256, 256, 256), 40)
    again = agent.run(gemm_env(256, 256, 256), 40)
    fresh = FelixAgent(seed=3, **FAST).run(gemm_env(256, 256, 256), 40)
    other = FelixAgent(seed=4, **FAST).run(gemm_env(256, 256, 256), 40)
    assert history(first) == history(again) == history(fresh)
    assert history(first) != history(other)


def test_run_leaves_global_torch_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    FelixAgent(seed=0, **FAST).run(gemm_env(64, 64, 64), 20)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads


def test_finds_the_exact_optimum_of_a_small_space():
    profile = "znver5-2core-fitted"  # the search path below (found at 124 of 343) is this profile's
    env = gemm_env(64, 64, 64, d_m=2, d_k=2, d_n=2, backend_options={"profile": profile})
    task, space = env.task, env.space
    optimum = MockBackend(profile).score_space(task).min()
    result = FelixAgent(seed=0, **FAST).run(env, space.size)
    assert result.best_latency_s == pytest.approx(optimum, rel=1e-12)
    assert result.num_measurements == space.size  # descent plus fill never stalls before the space is exhausted
    n, _, best = result.best_curve()
    first = int(n[np.argmax(best <= optimum * (1 + 1e-12))])
    assert first < space.size // 2  # found by the search, not by exhausting the space (seed 0: at 124 of 343)


class _FailingBackend(LatencyBackend):
    """The mock model, except that configs whose innermost n factor is 16 fail to build."""

    name = "failing"
    deterministic = True

    def __init__(self) -> None:
        self.inner = MockBackend()

    def measure(self, task, configs, on_result=None):
        out = []
        for position, result in enumerate(self.inner.measure(task, configs)):
            if result.config[2][-1] == 16:
                result = MeasureResult.failure(result.config, "scripted build failure", "build")
            out.append(result)
            if on_result is not None:
                on_result(position, result)
        return out


def test_failed_measurements_are_penalised_not_fatal():
    env = TilingEnv(task=gemm(256, 256, 256), backend=_FailingBackend())
    result = FelixAgent(seed=0, **FAST).run(env, 60)
    assert result.num_measurements == 60 == env.session.num_measurements
    assert any(r.latency_s is None for r in result.history)
    assert result.best_config[2][-1] != 16


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"n_seeds": 0}, ["n_seeds", "0"]),
        ({"n_steps": -3}, ["n_steps", "-3"]),
        ({"n_measure": 1.5}, ["n_measure", "1.5"]),
        ({"n_seeds": True}, ["n_seeds", "True"]),
        ({"lr": 0.0}, ["lr", "0.0"]),
        ({"lr": float("nan")}, ["lr", "nan"]),
        ({"penalty_weight": -1.0}, ["penalty_weight", "-1.0"]),
        ({"train_steps": 0}, ["train_steps", "0"]),
        ({"train_lr": "fast"}, ["train_lr", "fast"]),
        ({"train_batch_size": 0}, ["train_batch_size", "0"]),
        ({"hidden_size": 0}, ["hidden_size", "0"]),
        ({"n_hidden_layers": 0}, ["n_hidden_layers", "0"]),
        ({"seed": -1}, ["seed", "-1"]),
    ],
)
def test_bad_hyperparameters_raise_naming_the_value(kwargs, words):
    with pytest.raises(ValueError) as info:
        FelixAgent(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_bad_cost_model_arguments(tmp_path):
    with pytest.raises(TypeError, match="cost_model"):
        FelixAgent(cost_model=42)
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        FelixAgent(cost_model=tmp_path / "missing.pt")


def test_a_model_too_small_for_the_task_is_refused(small_model):
    deep = gemm(256, 256, 256, d_m=6, d_k=3, d_n=6)  # 15 loops, the model lays out 12
    with pytest.raises(ValueError, match="15 loops"):
        FelixAgent(cost_model=small_model, **FAST).run(
            gemm_env(256, 256, 256, d_m=6, d_k=3, d_n=6), 10
        )
    assert TileFeaturizer(deep).spec.max_loops == 15


def test_params_are_json_friendly(small_model, tmp_path):
    import json

    path = tmp_path / "model.pt"
    save_cost_model(small_model, path)
    result = FelixAgent(seed=0, cost_model=path, n_steps=5, train_steps=2).run(gemm_env(64, 64, 64), 20)
    json.dumps(result.to_dict())
    assert result.params["cost_model"] == str(path)
    assert result.params["n_seeds"] == 8


# ------------------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip_predicts_identically(small_model, tmp_path):
    path = tmp_path / "felix.pt"
    save_cost_model(small_model, path)
    loaded = load_cost_model(path)
    assert loaded.config == small_model.config
    task = gemm(512, 256, 1024)
    space = TileSpace(task)
    featurizer = small_model.featurizer(task)
    feats = featurizer(featurizer.log_factors_of_indices(space, space.sample_indices(np.random.default_rng(0), 64)))
    with torch.no_grad():
        assert torch.equal(small_model(feats), loaded(feats))


def test_agent_from_path_equals_agent_from_model(small_model, tmp_path):
    path = tmp_path / "felix.pt"
    save_cost_model(small_model, path)
    by_model = FelixAgent(seed=2, cost_model=small_model, **FAST).run(gemm_env(256, 256, 256), 30)
    by_path = FelixAgent(seed=2, cost_model=path, **FAST).run(gemm_env(256, 256, 256), 30)
    assert history(by_model) == history(by_path)


class _CreatesFile:
    """Unpickling this calls ``open(path, "w")``: a checkpoint that would run code when loaded."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_malicious_pickle_is_refused_without_running_code(tmp_path):
    marker = tmp_path / "pwned"
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps({"format": "x", "config": "{}", "state_dict": _CreatesFile(str(marker))}))
    zipped = tmp_path / "zipped.pt"
    torch.save({"format": "x", "config": "{}", "state_dict": {"w": _CreatesFile(str(marker))}}, zipped)
    for path in (raw, zipped):
        with pytest.raises(ValueError, match=str(path.name)):
            load_cost_model(path)
        assert not marker.exists()
    with pytest.raises(ValueError, match="raw.pt"):
        FelixAgent(cost_model=raw)
    assert not marker.exists()


def test_garbage_and_wrong_checkpoints_are_refused(small_model, tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00not a checkpoint at all\xff" * 10)
    with pytest.raises(ValueError, match="garbage.pt"):
        load_cost_model(garbage)

    wrong = tmp_path / "wrong.pt"
    torch.save({"weights": torch.zeros(3)}, wrong)
    with pytest.raises(ValueError, match="wrong.pt.*format, config, state_dict"):
        load_cost_model(wrong)

    good = tmp_path / "good.pt"
    save_cost_model(small_model, good)
    data = torch.load(good, weights_only=True)

    bad_config = dict(data, config='{"hidden_size": 3}')
    torch.save(bad_config, tmp_path / "config.pt")
    with pytest.raises(ValueError, match="config.pt.*bad config"):
        load_cost_model(tmp_path / "config.pt")

    state = dict(data["state_dict"])
    state["mlp.0.weight"] = torch.zeros(2, 2)
    torch.save(dict(data, state_dict=state), tmp_path / "shape.pt")
    with pytest.raises(ValueError, match="shape.pt.*mlp.0.weight"):
        load_cost_model(tmp_path / "shape.pt")

    state = dict(data["state_dict"])
    state["mlp.0.bias"] = torch.full_like(state["mlp.0.bias"], float("nan"))
    torch.save(dict(data, state_dict=state), tmp_path / "nan.pt")
    with pytest.raises(ValueError, match="nan.pt.*non-finite"):
        load_cost_model(tmp_path / "nan.pt")

    torch.save(dict(data, format="something/else"), tmp_path / "format.pt")
    with pytest.raises(ValueError, match="format.pt.*something/else"):
        load_cost_model(tmp_path / "format.pt")


# ------------------------------------------------------------------------------- pretraining
def test_pretraining_on_mock_samples_learns_the_ranking():
    profile = "znver5-2core-fitted"  # the figure below is checked on this profile's model
    model = pretrain_cost_model(["gemm-512"], n_samples=2048, epochs=10, hidden_size=64, seed=0, backend=profile)
    task = gemm(512, 512, 512)
    space = TileSpace(task)
    idx = space.sample_indices(np.random.default_rng(1), 500)
    featurizer = model.featurizer(task)
    with torch.no_grad():
        pred = model(featurizer(featurizer.log_factors_of_indices(space, idx))).numpy()
    true = np.log(MockBackend(profile).model_latency_s(task, idx))
    assert np.corrcoef(pred, true)[0, 1] > 0.8


def test_pretraining_on_the_shipped_real_table_and_tuning_it():
    model = pretrain_cost_model(records=["gemm-128-323-znver5-1t"], epochs=1, hidden_size=16, seed=0)
    assert model.spec.max_loops == 12
    result = FelixAgent(seed=0, cost_model=model, n_steps=10, train_steps=5).run(table_env(), 20)
    assert result.num_measurements == 20 and result.best_latency_s is not None


def test_pretraining_rejects_bad_arguments():
    with pytest.raises(ValueError, match="n_samples"):
        pretrain_cost_model(["gemm-64"], n_samples=0)
    with pytest.raises(ValueError, match="backend"):
        pretrain_cost_model(["gemm-64"], backend="gpu")
    with pytest.raises(ValueError, match="at least one"):
        pretrain_cost_model()
    with pytest.raises(TypeError, match="Task"):
        pretrain_cost_model([3.5])


# ------------------------------------------------------------------------------- features
FEATURE_TASKS = [
    gemm(1024, 1024, 1024),
    gemm(128, 128, 128, 3, 2, 3),
    gemm(96, 80, 60, 2, 3, 1),  # not powers of two, a dimension with a single loop
    gemm(1, 64, 32, 2, 1, 2),  # an extent of 1
]


@pytest.mark.parametrize("task", FEATURE_TASKS, ids=lambda t: t.key)
def test_features_are_finite_and_differentiable_at_random_points(task):
    relax = LogRelaxation(TileSpace(task))
    featurizer = TileFeaturizer(task)
    model = FelixCostModel(featurizer.spec, hidden_size=32)
    gen = torch.Generator().manual_seed(0)
    upper = relax.upper[relax.free_cols]
    inside = torch.rand(64, relax.n_free, generator=gen) * upper
    outside = torch.randn(64, relax.n_free, generator=gen) * 3.0  # off the domain: penalties apply
    for free in (inside, outside):
        free = free.clone().requires_grad_(True)
        log_factors = relax.log_factors(free)
        feats = featurizer(log_factors)
        assert feats.shape == (64, featurizer.spec.n_features()) == (64, len(featurizer.names()))
        assert torch.isfinite(feats).all()
        objective = model(feats).sum() + 10.0 * relax.penalty(log_factors).sum()
        (grad,) = torch.autograd.grad(objective, free)
        assert torch.isfinite(grad).all()
        if relax.n_free:
            assert grad.abs().sum() > 0


@pytest.mark.parametrize("task", FEATURE_TASKS, ids=lambda t: t.key)
def test_integer_configs_featurise_like_their_relaxation(task):
    space = TileSpace(task)
    relax = LogRelaxation(space)
    featurizer = TileFeaturizer(task)
    idx = space.sample_indices(np.random.default_rng(0), min(50, space.size))
    from_indices = featurizer(featurizer.log_factors_of_indices(space, idx))
    from_configs = featurizer(featurizer.log_factors_of_configs([space.config(int(i)) for i in idx]))
    from_relaxation = featurizer(relax.log_factors(relax.free_of_indices(idx)))
    assert torch.equal(from_indices, from_configs)
    assert torch.allclose(from_indices, from_relaxation, atol=1e-4)
    assert (relax.penalty(relax.log_factors(relax.free_of_indices(idx))) < 1e-8).all()


def test_features_see_what_the_template_does():
    task = gemm(1024, 1024, 1024)
    featurizer = TileFeaturizer(task)
    names = featurizer.names()
    configs = [((64, 4, 1, 4), (256, 4), (16, 2, 2, 16)), ((1, 1, 1, 1024), (1024, 1), (1, 1, 1, 1024))]
    feats = featurizer(featurizer.log_factors_of_configs(configs))
    f = {name: feats[:, i] for i, name in enumerate(names)}
    assert f["log_flops"][0] == pytest.approx(math.log(2 * 1024**3), rel=1e-6)
    assert f["vec_len"][0] == pytest.approx(math.log(16), abs=1e-5)  # n3
    assert f["unroll"][0] == pytest.approx(math.log(4), abs=1e-5)  # m3
    assert f["parallel"][0] == pytest.approx(math.log(64 * 16 * 4 * 2), abs=1e-4)  # m0 n0 m1 n1: outside k0
    assert f["vec_lanes_used"][0] < math.log(16) + 1e-6
    assert f["parallel"][1] == pytest.approx(0.0, abs=1e-6)
    assert f["vec_per_row"][1] == pytest.approx(math.log(1024 / 16), abs=0.01)
    assert f["reg_pressure"][1] > f["reg_pressure"][0]  # 1024 x 1 register tile spills
    whole = math.log(3 * 1024 * 1024 * 4)
    assert f["footprint_A_depth12"][0] == pytest.approx(math.log(1024 * 1024 * 4), abs=0.01)  # padding: the whole nest
    columns = [names.index(f"footprint_{o}_depth12") for o in "ABC"]
    assert float(torch.logsumexp(feats[0, columns], 0)) == pytest.approx(whole, abs=0.01)


def test_reuse_passes_loops_of_extent_one():
    # Loop order m0 n0 m1 n1 k0 m2 n2 k1 m3 n3. The tile below m1 (depth 7 of 10 loops) of A[m, k] is reused
    # across n0, which does not index A, as long as m1 between them has extent 1 (the mock's rule):
    # traffic = footprint * outer iterations / reuse = footprint. With m1 = 2 the chain breaks.
    task = gemm(256, 256, 256)
    featurizer = TileFeaturizer(task)
    names = featurizer.names()
    through = ((1, 1, 16, 16), (16, 16), (16, 1, 1, 16))
    broken = ((1, 2, 8, 16), (16, 16), (16, 1, 1, 16))
    feats = featurizer(featurizer.log_factors_of_configs([through, broken]))
    excess = feats[:, names.index("traffic_A_depth7")] - feats[:, names.index("footprint_A_depth7")]
    assert float(excess[0]) == pytest.approx(0.0, abs=0.05)  # 16 outer iterations, reused 16 times
    assert float(excess[1]) == pytest.approx(math.log(32), abs=0.1)  # 32 outer iterations, no reuse


# ------------------------------------------------------------------------------- other operators
CONV = conv2d(1, 14, 14, 16, 32, 3, stride=2, padding=1)
GROUPED_CONV = conv2d(1, 14, 14, 16, 32, 3, stride=2, padding=1, groups=4)
OPERATOR_TASKS = [
    CONV,
    GROUPED_CONV,
    conv2d(1, 14, 14, 16, 32, 3, padding=1, layout="NCHW"),
    batch_matmul(2, 32, 16, 24, transpose_b=True),
    dense(8, 64, 48, activation="gelu"),
]


@pytest.mark.parametrize("task", OPERATOR_TASKS, ids=lambda t: t.name)
def test_features_of_other_operators_are_finite_and_differentiable(task):
    featurizer = TileFeaturizer(task)
    spec = featurizer.spec
    assert (spec.max_loops, spec.n_dims, spec.n_operands) == (
        max(12, len(task.loop_order)), len(task.dims), len(task.operands)
    )
    space = TileSpace(task)
    relax = LogRelaxation(space)
    gen = torch.Generator().manual_seed(0)
    inside = torch.rand(64, relax.n_free, generator=gen) * relax.upper[relax.free_cols]
    outside = torch.randn(64, relax.n_free, generator=gen) * 3.0  # relaxed factors below 1: boxes could go negative
    for free in (inside, outside):
        free = free.clone().requires_grad_(True)
        feats = featurizer(relax.log_factors(free))
        assert feats.shape == (64, spec.n_features()) == (64, len(featurizer.names()))
        assert torch.isfinite(feats).all()
        (grad,) = torch.autograd.grad(feats.sum(), free)
        assert torch.isfinite(grad).all() and grad.abs().sum() > 0
    idx = space.sample_indices(np.random.default_rng(0), 50)
    assert torch.isfinite(featurizer(featurizer.log_factors_of_indices(space, idx))).all()


def test_conv2d_has_the_expected_layout():
    featurizer = TileFeaturizer(CONV)
    assert (featurizer.spec.max_loops, featurizer.spec.n_dims, featurizer.spec.n_operands) == (22, 7, 3)
    assert TileFeaturizer(dense(8, 64, 48)).spec.n_operands == 4  # X, W, bias, Y
    nest = LoopNest.cpu(CONV)
    structure = (featurizer.n_parallel, featurizer.vec_loop, featurizer.unroll_loop)
    assert structure == (nest.n_parallel, nest.vector, nest.unroll)
    # the input I[n, h*2 + rh, w*2 + rw, rc] is indexed by the loops of every dimension but co: co's loops reuse it
    indexed = {d for d, flag in zip(nest.dims_of_loops, featurizer.indexes[0].tolist()) if flag}
    assert indexed == {"n", "h", "w", "rh", "rw", "rc"}
    grouped = TileFeaturizer(GROUPED_CONV)
    assert {d for d, flag in zip(nest.dims_of_loops, grouped.indexes[0].tolist()) if flag} == set(nest.dims_of_loops)


def _input_log_footprints(task, featurizer, space, idx):
    """Per config and depth: the featurizer's input footprint and the exact one, from the factors through
    ``operand_extents`` with NumPy's ceil and min (the mock's rows and run), the contiguous run counted
    as ``max(run bytes, a cache line)`` as the featurizer counts it."""
    names = featurizer.names()
    operand = task.operands[0]
    feats = featurizer(featurizer.log_factors_of_indices(space, idx))
    nest = LoopNest.cpu(task)
    n = len(nest.loops)
    factors = space.factors_of_indices(idx)
    dim_pos = {d.name: x for x, d in enumerate(task.dims)}
    got, expected = [], []
    for j in range(featurizer.spec.max_loops + 1):
        p = max(n - j, 0)
        tile = {d.name: np.ones(len(idx)) for d in task.dims}
        for loop in nest.loops[p:]:
            tile[loop.dim] = tile[loop.dim] * factors[dim_pos[loop.dim]][:, loop.level]
        rows, run = operand_extents(operand, tile, np.ceil, np.minimum)
        line = featurizer.spec.cache_line_bytes
        expected.append(np.log(rows) + np.log(np.maximum(run * task.dtype_bytes, line)))
        got.append(feats[:, names.index(f"footprint_{operand.name}_depth{j}")].numpy())
    return np.stack(got, 1), np.stack(expected, 1)


@pytest.mark.parametrize("task", [CONV, GROUPED_CONV], ids=lambda t: t.name)
def test_conv_input_footprint_is_the_mocks_formula(task):
    space = TileSpace(task)
    idx = space.sample_indices(np.random.default_rng(0), 100)
    # with sharp smoothing the feature is the exact footprint
    sharp = TileFeaturizer(task, FeatureSpec.for_tasks([task], tau_max=1e-4))
    got, expected = _input_log_footprints(task, sharp, space, idx)
    assert np.abs(got - expected).max() < 1e-3
    # the default smoothing errs by at most tau/2 per smoothed max or min: up by the cache-line max, down
    # by the min of each of the two windowed axes (h*2 + rh, w*2 + rw)
    featurizer = TileFeaturizer(task)
    tau = featurizer.spec.tau_max
    got, expected = _input_log_footprints(task, featurizer, space, idx)
    assert (got - expected).max() <= tau / 2 + 1e-4
    assert (got - expected).min() >= -2 * tau / 2 - 1e-4
    # a strided window reads more input rows than the output tile has, and the feature sees it: the whole
    # nest reads the padded input (15 x 15 rows here), not 7 x 7
    whole = got[:, featurizer.spec.max_loops]
    assert np.allclose(whole, math.log(15 * 15 * 16 * 4), atol=tau)


@pytest.mark.parametrize("task", [CONV, batch_matmul(2, 32, 16, 24, transpose_b=True)], ids=lambda t: t.name)
def test_budget_is_exact_on_other_operators(task):
    env = TilingEnv(task)
    result = FelixAgent(seed=0, n_steps=20).run(env, 30)
    assert result.num_measurements == 30 == env.session.num_measurements
    assert len({r.index for r in result.history}) == 30
    assert result.best_latency_s is not None


# ------------------------------------------------------------------------------- relaxation and smoothing
def test_rounding_gives_valid_configs_and_fixes_integer_points():
    space = TileSpace(gemm(96, 80, 60, 3, 2, 3))
    relax = LogRelaxation(space)
    idx = space.sample_indices(np.random.default_rng(0), 200)
    assert np.array_equal(relax.round_to_indices(relax.free_of_indices(idx).numpy()), idx)
    noisy = np.random.default_rng(1).normal(0.0, 3.0, size=(500, relax.n_free))
    rounded = relax.round_to_indices(noisy)
    assert ((rounded >= 0) & (rounded < space.size)).all()
    for i in rounded[:50]:
        assert space.is_legal(space.config(int(i)))


def test_smooth_operators_approach_the_exact_ones():
    x = torch.tensor([-50.0, -1.0, 0.0, 1.0, 50.0])
    assert torch.allclose(smooth_step(x, 0.01)[[0, 1, 3, 4]], torch.tensor([0.0, 0.0, 1.0, 1.0]), atol=5e-3)
    assert smooth_step(x, 1.0)[2] == 0.5
    assert torch.allclose(smooth_relu(x, 0.01), torch.relu(x), atol=5e-3)
    assert torch.allclose(smooth_max(x, 0.5, 0.01), torch.clamp(x, min=0.5), atol=5e-3)
    assert torch.allclose(smooth_min(x, 0.5, 0.01), torch.clamp(x, max=0.5), atol=5e-3)
    assert is_one_gate(torch.tensor(0.0), 0.1) == 1.0
    assert is_one_gate(torch.tensor(math.log(2)), 0.1) < 0.03


def test_feature_spec_round_trips_and_validates():
    spec = FeatureSpec(max_loops=14)
    assert FeatureSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ValueError, match="max_loops"):
        FeatureSpec(max_loops=0)
    with pytest.raises(ValueError, match="unknown"):
        FeatureSpec.from_dict({"nonsense": 1})
