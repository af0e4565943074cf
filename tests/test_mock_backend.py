from dataclasses import replace

import numpy as np
import pytest

from schedule_gym import MockBackend, gemm
from schedule_gym.backends import PROFILES
from schedule_gym.tasks import conv2d, dense

TASK = gemm(1024, 1024, 1024)
#: the profile whose numbers these tests check (the default, "auto", depends on the machine)
PROFILE = "znver5-2core-fitted"


def latency(config, backend=None):
    backend = backend or MockBackend(PROFILE)
    (result,) = backend.measure(TASK, [config])
    assert result.ok
    return result.latency_s


def test_deterministic_by_default_and_batch_equals_vectorised_model():
    backend = MockBackend()
    space = backend.space(TASK)
    idx = np.random.default_rng(0).integers(0, space.size, 300)
    configs = [space.config(int(i)) for i in idx]
    first = [r.latency_s for r in backend.measure(TASK, configs)]
    second = [r.latency_s for r in MockBackend().measure(TASK, configs)]
    assert first == second
    np.testing.assert_allclose(first, backend.model_latency_s(TASK, idx), rtol=1e-12)
    assert backend.deterministic


def test_whole_space_scores_match_single_configs():
    task = gemm(64, 32, 64)
    backend = MockBackend()
    scores = backend.score_space(task)
    space = backend.space(task)
    assert scores.shape == (space.size,) and np.all(np.isfinite(scores)) and np.all(scores > 0)
    for i in np.random.default_rng(1).integers(0, space.size, 25):
        assert latency_of(backend, task, space.config(int(i))) == pytest.approx(scores[i], rel=1e-12)


def latency_of(backend, task, config):
    return backend.measure(task, [config])[0].latency_s


def test_noise_is_seeded_multiplicative_lognormal():
    config = ((8, 8, 4, 4), (64, 16), (8, 4, 2, 16))
    base = latency(config)
    a = MockBackend(PROFILE, noise=0.1, seed=3, repeats=2000).measure(TASK, [config])[0]
    b = MockBackend(PROFILE, noise=0.1, seed=3, repeats=2000).measure(TASK, [config])[0]
    c = MockBackend(PROFILE, noise=0.1, seed=4, repeats=2000).measure(TASK, [config])[0]
    assert a.costs_s == b.costs_s and a.costs_s != c.costs_s
    logs = np.log(np.array(a.costs_s) / base)
    assert abs(logs.mean()) < 0.01 and 0.09 < logs.std() < 0.11
    assert not MockBackend(noise=0.1).deterministic


# Each pair differs in one respect that real CPUs reward; the first of each pair must be faster.
CPU_PREFERENCES = {
    "vectorisable innermost extent (n3=16 vs n3=1)": (
        ((8, 8, 4, 4), (64, 16), (4, 4, 4, 16)),
        ((8, 8, 4, 4), (64, 16), (4, 4, 64, 1)),
    ),
    "parallel outer loops for both cores (2 vs 1)": (
        ((2, 1, 128, 4), (64, 16), (1, 1, 16, 64)),
        ((1, 1, 256, 4), (64, 16), (1, 1, 16, 64)),
    ),
    "modest unrolling (m3=8 vs m3=64, register spills)": (
        ((8, 2, 8, 8), (64, 16), (8, 4, 2, 16)),
        ((8, 2, 1, 64), (64, 16), (8, 4, 2, 16)),
    ),
    "tile that fits the caches (k1=16 vs k1=1024)": (
        ((4, 4, 16, 4), (64, 16), (4, 4, 4, 16)),
        ((4, 4, 16, 4), (1, 1024), (4, 4, 4, 16)),
    ),
    "fewer loop iterations (register tile 4x32 vs 1x16)": (
        ((4, 4, 16, 4), (64, 16), (4, 4, 2, 32)),
        ((4, 4, 64, 1), (64, 16), (4, 4, 4, 16)),
    ),
}


@pytest.mark.parametrize("reason", list(CPU_PREFERENCES))
def test_model_rewards_what_cpus_reward(reason):
    fast, slow = CPU_PREFERENCES[reason]
    assert latency(fast) < latency(slow), reason


@pytest.mark.slow
def test_optimum_of_1024_space_is_plausible():
    backend = MockBackend(PROFILE)
    scores = backend.score_space(TASK)
    space = backend.space(TASK)
    gflops = TASK.flops / scores * 1e-9
    peak = PROFILES[PROFILE].peak_gflops
    best = space.config(int(np.argmax(gflops)))
    assert 0.5 * peak < gflops.max() < peak
    s0 = space.index(space.initial_config())
    assert gflops.max() > 50 * gflops[s0]
    assert best[2][3] % 16 == 0  # innermost n extent fills whole AVX-512 vectors
    assert best[0][0] * best[2][0] * best[0][1] * best[2][1] >= 2  # both cores busy


# Model latencies under PROFILE, to the last bit, of configs spread over the space: one per operator shape the
# model treats differently (extents with primes 3 and 5; a bias read through one axis; a strided, padded, grouped
# convolution whose input axes have two terms; rows 4 KiB apart, which alias in L1). Rewriting the model's
# arithmetic must leave them as they are; changing the model is a new MOCK_MODEL_VERSION and new numbers here.
PINNED_LATENCIES_S = {
    "gemm 96x100x60": (gemm(96, 100, 60), {
        0: 8.138311548447028e-05, 64511: 0.00012233112442835368, 129023: 0.0001226249791646818,
        193535: 0.00016094643990567837, 258047: 0.00014128017942549543, 322559: 0.00029802023013528965,
    }),
    "dense with bias": (dense(m=128, k=256, n=96, bias=True), {
        0: 0.0002771056617378049, 48383: 0.0010065992213319362, 96767: 0.0009968300742074364,
        145151: 0.0009992600819514579, 193535: 0.001164815922896818, 241919: 0.0018869338913490856,
    }),
    "grouped strided conv2d": (conv2d(n=1, h=14, w=14, ci=32, co=48, kernel=3, stride=2, padding=1, groups=2), {
        0: 0.0002158811987416975, 8959: 0.00013486918383253144, 17919: 0.0001643680218869093,
        26879: 0.00019552872911466273, 35839: 0.00013650899464736567, 44799: 0.0002259848042325648,
    }),
    "gemm 1024^3": (TASK, {
        0: 1.3541009870963416, 179951: 0.09650667095293447, 359902: 0.6217856736669249,
        539853: 0.03822251409811913, 719804: 0.4590095747995792, 899755: 1.63410505107063,
    }),
}


@pytest.mark.parametrize("name", list(PINNED_LATENCIES_S))
def test_model_latencies_are_pinned_to_the_bit(name):
    task, want = PINNED_LATENCIES_S[name]
    backend = MockBackend(PROFILE)
    assert backend.model_latency_s(task, list(want)).tolist() == list(want.values())  # one batch
    assert [latency_of(backend, task, backend.space(task).config(i)) for i in want] == list(want.values())


def test_custom_profile_changes_the_model():
    config = ((8, 8, 4, 4), (64, 16), (8, 4, 2, 16))
    one_core = replace(PROFILES["avx512-2core-nominal"], name="1core", cores=1)
    assert latency(config, MockBackend(profile=one_core)) > 1.5 * latency(config)


def test_noisy_env_noise_follows_reset_seed():
    import gymnasium

    def s0_latency(seed):
        env = gymnasium.make("schedule_gym/GemmNoisy-v0")
        _, info = env.reset(seed=seed)
        env.close()
        return info["latency_s"]

    assert s0_latency(0) == s0_latency(0)
    assert len({s0_latency(seed) for seed in range(4)}) == 4  # vector workers with different seeds differ


def test_latencies_do_not_depend_on_the_batch_they_are_scored_in():
    """The vector environments score exactly the configs they visit, MockBackend.measure scores chunks: the model
    is elementwise, so a config's latency is the same to the bit in any batch (every shipped profile)."""
    from schedule_gym.backends import PROFILES
    from schedule_gym.tasks import get_suite, get_task

    tasks = [get_task("gemm-1024"), *(s.task for s in get_suite("bert-base"))]
    tasks += [s.task for s in get_suite("mobilenetv2")[:6]] + [s.task for s in get_suite("resnet50")[:6]]
    rng = np.random.default_rng(0)
    for profile in PROFILES:
        backend = MockBackend(profile=profile)
        for task in tasks:
            size = backend.space(task).size
            idx = rng.integers(0, size, 64)
            batch = backend.model_latency_s(task, idx)
            table = backend.latency_table(task, backend.space(task))
            np.testing.assert_array_equal(table(idx[::-1])[::-1], batch)
            measured = [r.latency_s for r in backend.measure(task, [backend.space(task).config(int(i)) for i in idx[:20]])]
            np.testing.assert_array_equal(measured, batch[:20])
            mixed = backend.model_latency_s(task, np.concatenate([rng.integers(0, size, 33), idx]))[33:]
            np.testing.assert_array_equal(mixed, batch)


def test_operands_are_counted_exactly_and_the_mock_refuses_what_no_machine_could_hold():
    from schedule_gym.backends.memory import operand_bytes, operand_elements
    from schedule_gym.backends.mock.backend import MAX_OPERAND_BYTES
    from schedule_gym.errors import TaskError

    huge = gemm(2**40, 2**40, 2**40)
    assert operand_elements(huge) == (2**81, 2**80)  # not wrapped round past 2**63
    assert operand_bytes(gemm(64, 32, 16)) == (64 * 32 + 32 * 16 + 64 * 16) * 4
    backend = MockBackend()
    backend.check_task(gemm(2**15, 2**15, 2**15))  # 12 GiB of operands: a machine may hold them
    side = 2**19  # 3 x 2**38 elements of 4 bytes = 3 TiB: under the cap; 2**20 is 12 TiB: over it
    backend.check_task(gemm(side, side, side))
    assert 3 * side * side * 4 <= MAX_OPERAND_BYTES < 3 * (2 * side) ** 2 * 4
    with pytest.raises(TaskError, match=r"needs 12 TiB for its inputs and output \(float32\)"):
        backend.check_task(gemm(2 * side, 2 * side, 2 * side))


def test_a_task_of_an_unregistered_operator_counts_its_operands_from_its_index_expressions():
    """The mock scores a task from the task alone (the add-an-operator tutorial tunes one before it is
    registered): its size check must not need the registry. Without padding the count is the workload's
    exactly; a padded convolution's input is counted padded (what its index expressions reach)."""
    import dataclasses

    from schedule_gym.backends.memory import operand_elements
    from schedule_gym.tasks import get_task

    gemm_task, conv = get_task("gemm-64x32x16"), get_task("resnet50/conv6")
    assert operand_elements(dataclasses.replace(gemm_task, op="my_gemm")) == operand_elements(gemm_task) == (64 * 32 + 32 * 16, 64 * 16)
    (ins, out), (ins_padded, out_same) = operand_elements(conv), operand_elements(dataclasses.replace(conv, op="my_conv"))
    assert out_same == out and ins < ins_padded < 1.2 * ins
    MockBackend().check_task(dataclasses.replace(gemm_task, op="my_gemm"))  # no registry lookup, no error


def test_a_backends_only_table_fills_whole_chunks_and_one_of_many_scores_its_configs_both_to_the_bit():
    task, other = gemm(256, 128, 64), gemm(64, 64, 64)
    idx = np.random.default_rng(0).integers(0, MockBackend().space(task).size, 50)
    alone = MockBackend(profile="znver5-2core-fitted")
    table = alone.latency_table(task, alone.space(task))
    values = table(idx)
    chunks = np.unique(idx // MockBackend.CHUNK)
    assert table._unscored == alone.space(task).size - sum(
        min(MockBackend.CHUNK, alone.space(task).size - c * MockBackend.CHUNK) for c in chunks)  # whole chunks
    shared = MockBackend(profile="znver5-2core-fitted")
    tables = [shared.latency_table(t, shared.space(t)) for t in (task, other)]
    assert np.array_equal(tables[0](idx), values)
    assert tables[0]._unscored == shared.space(task).size - np.unique(idx).size  # its configs only
    np.testing.assert_array_equal(values, alone.model_latency_s(task, idx))
