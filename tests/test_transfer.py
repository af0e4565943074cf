"""The transfer agent: shared features, the pretrained cost model's file, pretraining's guard, seeded runs."""

from __future__ import annotations

import dataclasses
import gzip
import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

from schedule_gym.agents import make_agent
from schedule_gym.agents.transfer import (
    DEFAULT_MODEL,
    FEATURE_NAMES,
    N_FEATURES,
    NestFeaturizer,
    TransferAgent,
    TransferCostModel,
    config_features,
    fit_booster,
    neighbour_indices,
)
from schedule_gym.benchmark.pretrained import sidecar_path
from schedule_gym.backends import MockBackend
from schedule_gym.backends.mock.selection import PROFILES
from schedule_gym.benchmark import get_protocol
from schedule_gym.envs import TilingEnv, gemm_env
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import batch_matmul, conv2d, dense, gemm

MOCK = {"backend_options": {"profile": "znver5-2core-fitted"}}
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def history_key(result) -> list[tuple]:
    return [(r.index, r.latency_s) for r in result.history]


# ------------------------------------------------------------------------------ features
OPERATORS = [
    conv2d(1, 14, 14, 32, 64, 3, padding=1, name="plain"),
    conv2d(1, 14, 14, 96, 96, 3, padding=1, groups=96, name="depthwise"),
    conv2d(1, 14, 14, 32, 64, 3, padding=1, groups=4, name="grouped"),
    conv2d(1, 14, 14, 32, 32, 3, padding=2, dilation=2, name="dilated"),
    conv2d(1, 14, 14, 32, 32, 3, padding=1, stride=2, name="strided"),
    dense(16, 256, 128, bias=True, activation="gelu"),
    batch_matmul(4, 32, 64, 32, transpose_b=True),
    gemm(64, 64, 64),
]


@pytest.mark.parametrize("task", OPERATORS, ids=lambda t: t.name)
@pytest.mark.parametrize("profile", ["znver5-2core-fitted", "avx2-2core-nominal"])
def test_features_are_finite_and_of_fixed_width_for_every_operator(task, profile) -> None:
    space = TileSpace(task)
    indices = np.unique(np.concatenate([np.arange(min(64, space.size)), space.sample_indices(np.random.default_rng(0), 256, replace=True)]))
    x = config_features(space, PROFILES[profile], indices)
    assert x.shape == (len(indices), N_FEATURES) == (len(indices), len(FEATURE_NAMES)) and x.dtype == np.float32
    assert np.isfinite(x).all()
    assert np.array_equal(NestFeaturizer(space, PROFILES[profile])(indices[5:9]), x[5:9])  # row by row the same


def test_features_of_every_suite_task_are_finite() -> None:
    protocol = get_protocol("v0")
    backend = MockBackend(profile=protocol.profile)
    for task in protocol.train_tasks() + protocol.held_out_tasks():
        space = backend.space(task)
        x = config_features(space, backend.profile, space.sample_indices(np.random.default_rng(1), 64))
        assert x.shape == (64, N_FEATURES) and np.isfinite(x).all(), task.name


def test_features_count_what_the_nest_does() -> None:
    """GEMM 64^3, 4/2/4 splits: m0 n0 m1 n1 | k0 m2 n2 k1 m3(unroll) n3(vector), AVX-512 float32 (16 lanes)."""
    space = TileSpace(gemm(64, 64, 64))
    config = ((2, 1, 1, 32), (1, 64), (1, 1, 2, 32))
    (row,) = config_features(space, PROFILES["znver5-2core-fitted"], np.array([space.index(config)]))
    f = dict(zip(FEATURE_NAMES, row.tolist()))
    assert f["parallel_log2"] == 1.0 and f["busy_cores_log2"] == 1.0 and f["parallel_region"] == 1.0
    assert f["vector_log2"] == 5.0 and f["lane_share"] == 1.0 and f["unroll_log2"] == 5.0
    assert f["accumulators_log2"] == 6.0  # 32 rows x 2 vectors
    assert f["spill_share"] == pytest.approx((64 + 2 + 1 - 32) / 64)
    assert f["vector_loads_per_fma"] == pytest.approx((32 + 2) / 64)  # A broadcast per row, B two vectors
    assert f["gathers_per_fma"] == 0.0
    assert f["flops_log2"] == pytest.approx(np.log2(2 * 64**3))


def test_neighbour_indices_are_the_spaces_moves() -> None:
    space = TileSpace(gemm(64, 32, 16))
    config = ((2, 2, 2, 8), (4, 8), (1, 2, 2, 4))
    (row,) = neighbour_indices(space, np.array([space.index(config)]))
    expected = {space.index(c) for _, c in space.neighbours(config)}
    assert set(row[row >= 0].tolist()) == expected and np.sum(row >= 0) == len(space.neighbours(config))


# ------------------------------------------------------------------------------ the model and its files
def _tiny_model(objective: str = "rank:pairwise") -> TransferCostModel:
    space = TileSpace(gemm(64, 64, 64))
    backend = MockBackend(profile="znver5-2core-fitted")
    idx = space.sample_indices(np.random.default_rng(0), 200)
    x = config_features(space, backend.profile, idx)
    y = np.log2(backend.model_latency_s(space.task, idx) / space.task.flops)
    booster = fit_booster(x, y, np.zeros(len(y), dtype=np.int64), objective, num_boost_round=5)
    meta = {"feature_version": "transfer-features-v1", "feature_names": list(FEATURE_NAMES), "objective": objective,
            "profile": "znver5-2core-fitted", "protocol": {"name": "test"}, "training_tasks": [space.task.key],
            "samples": {space.task.name: 200}, "seed": 0, "params": {}, "num_boost_round": 5}
    return TransferCostModel(booster, meta)


def test_the_shipped_model_loads_without_unpickling(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the cost model must load without unpickling")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    model = TransferCostModel.load(DEFAULT_MODEL)
    json.loads(gzip.decompress(DEFAULT_MODEL.read_bytes()))  # plain XGBoost JSON, compressed
    protocol = get_protocol("v0")
    assert model.meta["profile"] == protocol.profile and model.meta["protocol"]["name"] == "v0"
    held_out = {t.key for t in protocol.held_out_tasks()}
    assert model.meta["training_tasks"] and not held_out & set(model.meta["training_tasks"])
    assert DEFAULT_MODEL.stat().st_size < 3e6


@pytest.mark.parametrize("name", ["m.json", "m.json.gz"])
@pytest.mark.parametrize("objective", ["rank:pairwise", "reg:squarederror"])
def test_a_saved_model_scores_as_before(tmp_path, objective, name) -> None:
    model = _tiny_model(objective)
    path = model.save(tmp_path / name)
    assert sidecar_path(path) == tmp_path / "m.meta.json"
    raw = path.read_bytes()
    json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)  # XGBoost's JSON either way
    again = TransferCostModel.load(path)
    x = np.random.default_rng(0).normal(size=(10, N_FEATURES)).astype(np.float32)
    assert np.array_equal(model.score(x), again.score(x)) and again.meta == model.meta


def test_a_damaged_compressed_model_is_a_value_error_naming_it(tmp_path) -> None:
    path = _tiny_model().save(tmp_path / "m.json.gz")
    path.write_bytes(path.read_bytes()[:40])  # cut short
    with pytest.raises(ValueError, match=r"cost model .*m\.json\.gz cannot be read"):
        TransferCostModel.load(path)


@pytest.mark.parametrize(
    ("damage", "message"),
    [(lambda p: p.write_text("{not json"), "is not an XGBoost JSON model"),
     (lambda p: p.write_bytes(p.read_bytes()[:100]), "is not an XGBoost JSON model"),
     (lambda p: p.unlink(), "cannot be read"),
     (lambda p: sidecar_path(p).write_text("[1, 2"), "sidecar .*m.meta.json is not valid JSON"),
     (lambda p: sidecar_path(p).write_text('{"objective": "rank:pairwise"}'), "sidecar lacks feature_version"),
     (lambda p: sidecar_path(p).write_text(sidecar_path(p).read_text().replace("transfer-features-v1", "v0")),
      "fitted on features 'v0'")],
)
def test_a_damaged_model_file_is_an_error_naming_it(tmp_path, damage, message) -> None:
    path = _tiny_model().save(tmp_path / "m.json")
    damage(path)
    with pytest.raises(ValueError, match=message) as info:
        TransferCostModel.load(path)
    assert "m.json" in str(info.value) or "m.meta.json" in str(info.value)


def test_a_model_file_must_be_json(tmp_path) -> None:
    with pytest.raises(ValueError, match="ends in .json or .json.gz, got .*m.ubj"):
        _tiny_model().save(tmp_path / "m.ubj")


# ------------------------------------------------------------------------------ pretraining
def test_pretraining_refuses_held_out_tasks_even_renamed() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import pretrain_cost_model as script
    finally:
        sys.path.remove(str(EXAMPLES))
    protocol = get_protocol("v0")
    held = protocol.held_out_tasks()[-1]
    args = script.Args(n_uniform=8, n_descents=0, n_neighbours=0)
    rng = np.random.default_rng(0)
    for task in (held, dataclasses.replace(held, name="renamed")):
        with pytest.raises(ValueError, match="refusing to pretrain on held-out tasks of protocol v0"):
            script.collect(protocol, [protocol.train_tasks()[-1], task], args, rng)
    x, y, groups, uniform, counts = script.collect(get_protocol("smoke"), get_protocol("smoke").train_tasks(),
                                                   script.Args(n_uniform=16, n_descents=2, n_neighbours=8), rng)
    assert x.shape[1] == N_FEATURES and len(x) == len(y) == len(groups) == sum(counts.values())
    assert set(groups.tolist()) == {0, 1} and uniform.sum() == 32


# ------------------------------------------------------------------------------ the agent
def test_agent_runs_within_budget_and_is_seeded() -> None:
    runs = [make_agent("transfer", seed=s).run(gemm_env(512, 512, 512, **MOCK), 40) for s in (3, 3, 4)]
    assert [r.num_measurements for r in runs] == [40, 40, 40]
    assert len({r.index for r in runs[0].history}) == 40
    assert history_key(runs[0]) == history_key(runs[1])
    assert history_key(runs[0]) != history_key(runs[2])


def test_the_pretrained_model_ranks_the_first_batch() -> None:
    """No random first plan: the first batch after s0 is the model's pick, far faster than random configs."""
    protocol = get_protocol("v0")
    task = protocol.held_out_tasks()[0]
    backend = MockBackend(profile=protocol.profile)
    first = make_agent("transfer", seed=0, eps_greedy=0.0).run(TilingEnv(task, backend=backend), 9)
    random = make_agent("random", seed=0).run(TilingEnv(task, backend=backend), 9)
    assert np.median([r.latency_s for r in first.history[1:]]) < 0.5 * np.median([r.latency_s for r in random.history[1:]])


def test_agent_fine_tunes_on_its_measurements() -> None:
    agent = TransferAgent(seed=0, finetune_rounds=3)
    result = agent.run(gemm_env(256, 256, 256, **MOCK), 20)
    assert result.num_measurements == 20
    tuned = agent._fine_tune()
    assert tuned is not agent._pretrained
    assert tuned.booster.num_boosted_rounds() == agent._pretrained.booster.num_boosted_rounds() + 3


def test_a_serial_twin_keeps_the_inner_tiles_and_opens_no_parallel_region() -> None:
    task = conv2d(1, 14, 14, 32, 64, 3, padding=1)
    env = TilingEnv(task, backend=MockBackend(profile="znver5-2core-fitted"))
    agent = TransferAgent(seed=0)
    agent.space, agent._featurize = env.space, NestFeaturizer(env.space, PROFILES["znver5-2core-fitted"])
    space, nest = env.space, agent._featurize.nest
    parallel = {(agent._featurize.dim_pos[d], level) for d, level in nest.order[: nest.n_parallel]}
    sample = space.sample_indices(np.random.default_rng(0), 500)
    twins = np.array([agent._serial_twin(int(i)) for i in sample])
    region = FEATURE_NAMES.index("parallel_region")
    assert (agent._featurize(sample)[:, region] == 1).sum() > 400
    assert (agent._featurize(twins)[:, region] == 0).all()
    for i, t in zip(sample.tolist(), twins.tolist()):
        for x, f in enumerate(space.factors_of_indices(np.array([i, t]))):
            assert f[0].prod() == f[1].prod()
            for level in range(f.shape[1]):  # parallel factors become 1, the others keep theirs or absorb them
                assert f[1, level] == 1 if (x, level) in parallel else f[1, level] % f[0, level] == 0
        assert agent._serial_twin(t) == t  # a serial config is its own twin


def test_the_serial_probe_finds_what_a_model_of_larger_kernels_misses() -> None:
    """On a small held-out layer the mock's launch overhead of a parallel region makes serial configs twice
    as fast; the pretrained model (trained on larger kernels) ranks them low, so without the probe every
    seed stays on the parallel plateau, with it the first batch measures a serial config and the search
    ends within 1% of the reference."""
    protocol = get_protocol("v1")
    task = next(t for t in protocol.held_out_tasks() if t.name == "mobilenetv2/conv15")
    backend = MockBackend(profile=protocol.profile)
    region = FEATURE_NAMES.index("parallel_region")
    best = {}
    for probe in (False, True):
        agent = TransferAgent(seed=0, serial_probe=probe)
        result = agent.run(TilingEnv(task, backend=backend), 16)
        best[probe] = result.best_latency_s
        first_batch = np.array([r.index for r in result.history[1:9]])
        assert (agent._featurize(first_batch)[:, region] == 0).any() == probe
    assert best[True] < 0.6 * best[False]


@pytest.mark.parametrize(
    ("params", "message"),
    [({"serial_probe": "yes"}, "serial_probe must be true or false, got 'yes'"),
     ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
     ({"eps_greedy": 1.5}, "eps_greedy must be a number in [0.0, 1.0], got 1.5"),
     ({"n_iter": -1}, "n_iter must be a non-negative integer, got -1"),
     ({"n_climb": 2.5}, "n_climb must be a non-negative integer, got 2.5"),
     ({"temperature": float("nan")}, "temperature must be a non-negative finite number, got nan"),
     ({"finetune_eta": 2}, "finetune_eta must be a number in [0.0, 1.0], got 2"),
     ({"cost_model": "/nonexistent/m.json"}, "cost model /nonexistent/m.json cannot be read")],
)
def test_bad_parameters_are_named(params, message) -> None:
    with pytest.raises(ValueError) as info:
        make_agent("transfer", **params)
    assert message in str(info.value)


def test_the_benchmark_checks_the_shipped_model_it_loads_by_default() -> None:
    """The agent loads the shipped model without a parameter naming it: the leak check must see it anyway.
    It was pretrained on v0's training split (ResNet-50, BERT-base), which tenset-v1 holds out."""
    from schedule_gym.benchmark import agent_tuner, run_protocol

    assert DEFAULT_MODEL in agent_tuner("transfer").artefacts()
    assert agent_tuner("transfer", {"cost_model": str(DEFAULT_MODEL)}).artefacts() == (DEFAULT_MODEL,)
    with pytest.raises(ValueError, match="was trained on .* held-out tasks of protocol tenset-v1"):
        run_protocol(agent_tuner("transfer"), "tenset-v1", "transfer", seeds=[0])
    row = run_protocol(agent_tuner("transfer"), "smoke", "transfer", seeds=[0])
    assert row["artefacts"] == {"schedule_gym/data/transfer-cost-model-v0.json.gz": "v0"}  # as on any install
