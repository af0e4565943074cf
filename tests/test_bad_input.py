"""Bad input raises a precise error that names the bad value (house rule 3)."""

import re

import gymnasium
import numpy as np
import pytest

import schedule_gym  # noqa: F401
from schedule_gym import MockBackend, TileSpace, TilingEnv, gemm, get_task, make_backend
from schedule_gym.errors import TaskError
from schedule_gym.tasks import LoopDim

SPACE = TileSpace(gemm(64, 32, 64))


def fresh_env(**kwargs):
    env = TilingEnv(gemm(64, 32, 64), **kwargs)
    env.reset(seed=0)
    return env


CASES = [
    # (label, call, exception type, text the message must contain)
    ("zero dimension", lambda: gemm(0, 8, 8), ValueError, "m must be a positive integer, got 0"),
    ("negative dimension", lambda: gemm(8, -4, 8), ValueError, "k must be a positive integer, got -4"),
    ("float dimension", lambda: gemm(8, 8, 7.5), TypeError, "n must be a positive integer, got 7.5 (float)"),
    ("bool dimension", lambda: gemm(True, 8, 8), TypeError, "m must be a positive integer, got True (bool)"),
    ("string dimension", lambda: gemm("64", 8, 8), TypeError, "m must be a positive integer, got '64' (str)"),
    ("split count zero", lambda: gemm(8, 8, 8, d_m=0), ValueError, "d_m must be a positive integer, got 0"),
    ("split count negative", lambda: gemm(8, 8, 8, d_k=-1), ValueError, "d_k must be a positive integer, got -1"),
    ("split count bool", lambda: gemm(8, 8, 8, d_n=False), TypeError, "d_n must be a positive integer, got False"),
    ("unknown dtype", lambda: gemm(8, 8, 8, dtype="int4"), ValueError, "dtype must be one of ['float16', 'float32', 'float64'], got 'int4'"),
    ("bad dimension name", lambda: LoopDim("m x", 4, 2), ValueError, "got 'm x'"),
    ("unknown task", lambda: get_task("gemm-999"), ValueError, "unknown task 'gemm-999'"),
    ("unknown task via env", lambda: TilingEnv("resnet-1"), ValueError, "unknown task 'resnet-1'"),
    ("config wrong product", lambda: SPACE.validate(((64, 1, 1, 2), (32, 1), (64, 1, 1, 1))), ValueError,
     "factors (64, 1, 1, 2) of dimension 'm' multiply to 128, not its extent 64"),
    ("config wrong factor count", lambda: SPACE.validate(((64, 1, 1), (32, 1), (64, 1, 1, 1))), ValueError,
     "dimension 'm' is split into 4 loops, but config gives 3 factors (64, 1, 1)"),
    ("config wrong dimension count", lambda: SPACE.validate(((64, 1, 1, 1), (32, 1))), ValueError,
     "has 2 factor tuples; task 'gemm-64x32x64' has 3 dimensions"),
    ("config zero factor", lambda: SPACE.validate(((64, 0, 1, 1), (32, 1), (64, 1, 1, 1))), ValueError,
     "factor 0 of dimension 'm' is not a positive integer"),
    ("config float factor", lambda: SPACE.validate(((64.0, 1, 1, 1), (32, 1), (64, 1, 1, 1))), ValueError,
     "factor 64.0 of dimension 'm' is not a positive integer"),
    ("config not a sequence", lambda: SPACE.validate(42), TypeError, "got 42"),
    ("config index out of range", lambda: SPACE.config(SPACE.size), IndexError,
     f"config index {SPACE.size} is outside the space [0, {SPACE.size})"),
    ("unknown action name", lambda: SPACE.parse_action("q: 2x[0] /2[1]"), ValueError, "unknown action 'q: 2x[0] /2[1]'"),
    ("action above range", lambda: fresh_env().step(26), ValueError, "action 26 is out of range [0, 26)"),
    ("negative action", lambda: fresh_env().step(-1), ValueError, "action -1 is out of range [0, 26)"),
    ("float action", lambda: fresh_env().step(1.5), TypeError, "action must be an integer in [0, 26), got 1.5"),
    ("bool action", lambda: fresh_env().step(True), TypeError, "got True"),
    ("step before reset", lambda: TilingEnv(gemm(8, 8, 8)).step(0), RuntimeError, "call reset() before step()"),
    ("unknown backend", lambda: TilingEnv(gemm(8, 8, 8), backend="cuda-magic"), ValueError,
     "unknown backend 'cuda-magic'; known backends: mock"),
    ("backend object plus options", lambda: make_backend(MockBackend(), noise=0.1), ValueError, "backend options ['noise']"),
    ("unknown backend option", lambda: make_backend("mock", nosie=0.1), TypeError,
     "unknown option 'nosie' for backend 'mock'; its options: records, profile, noise, seed, repeats"),
    ("negative noise", lambda: MockBackend(noise=-0.1), ValueError, "noise must be a number in [0, 5), got -0.1"),
    ("unknown CPU profile", lambda: MockBackend(profile="pentium"), ValueError, "unknown CPU profile 'pentium'"),
    ("unknown observation", lambda: TilingEnv(gemm(8, 8, 8), observation="pixels"), ValueError,
     "observation must be one of ('fraction', 'log2', 'features', 'move_features'), got 'pixels'"),
    ("include_shape not bool", lambda: TilingEnv(gemm(8, 8, 8), include_shape="yes"), TypeError,
     "include_shape must be a bool, got 'yes'"),
    ("unknown reward", lambda: TilingEnv(gemm(8, 8, 8), reward="gflops"), ValueError, "reward must be one of"),
    ("unknown start", lambda: TilingEnv(gemm(8, 8, 8), start="middle"), ValueError, "start must be one of ('s0', 'random'), got 'middle'"),
    ("unknown render mode", lambda: TilingEnv(gemm(8, 8, 8), render_mode="human"), ValueError, "got 'human'"),
    ("zero measurement budget", lambda: TilingEnv(gemm(8, 8, 8), budget_measurements=0), ValueError,
     "budget_measurements must be a positive integer or None, got 0"),
    ("fraction budget above one", lambda: TilingEnv(gemm(8, 8, 8), budget_fraction=1.5), ValueError,
     "budget_fraction must be in (0, 1] or None, got 1.5"),
    ("negative seconds budget", lambda: TilingEnv(gemm(8, 8, 8), budget_seconds=-3), ValueError,
     "budget_seconds must be a positive number or None, got -3"),
    ("NaN penalty", lambda: TilingEnv(gemm(8, 8, 8), failure_penalty=float("nan")), ValueError,
     "failure_penalty must be a finite number, got nan"),
    ("unknown reset option", lambda: fresh_env().reset(options={"state": 3}), ValueError,
     "unknown reset options ['state']"),
    ("reset config not a factorisation", lambda: fresh_env().reset(options={"config": ((3, 1, 1, 1), (32, 1), (64, 1, 1, 1))}),
     ValueError, "multiply to 3, not its extent 64"),
    ("reset start unknown", lambda: fresh_env().reset(options={"start": "best"}), ValueError,
     "reset option start must be one of ('s0', 'random'), got 'best'"),
    ("no legal moves: extents 1", lambda: TilingEnv(gemm(1, 1, 1)), TaskError,
     "task 'gemm-1x1x1' has no legal moves (extents and splits: m=1 in 4, k=1 in 2, n=1 in 4)"),
    ("no legal moves: one loop each", lambda: TilingEnv(gemm(64, 64, 64, 1, 1, 1)), TaskError, "has no legal moves"),
    ("make with unknown kwarg", lambda: gymnasium.make("schedule_gym/Gemm-v0", m=8, k=8, n=8, obs="log2"), TypeError, "obs"),
    # operands no machine could hold: 2**40 x 2**40 x 2**40 (the mock modelled it, at 4.9e30 ms)
    ("gemm of 2**40 cubed on the mock", lambda: TilingEnv(gemm(2**40, 2**40, 2**40)), TaskError,
     "task 'gemm-1099511627776x1099511627776x1099511627776' needs 1.319e+13 TiB for its inputs and output (float32); "
     "the mock models kernels whose operands fit in 4 TiB (MAX_OPERAND_BYTES), more than a machine it models could hold"),
    ("gemm of 2**20 cubed on the mock", lambda: MockBackend().check_task(gemm(2**20, 2**20, 2**20)), TaskError,
     "task 'gemm-1048576x1048576x1048576' needs 12 TiB for its inputs and output (float32)"),
    ("replay of a record file that does not exist", lambda: make_backend("replay", records="no-such-run.jsonl"), ValueError,
     "no-such-run.jsonl: record file does not exist (without a delegate the records are only served, nothing is "
     "measured into them)"),
    # a backend measures only configs of the task's space (a wrong product once built another kernel under its name)
    ("mock measures a config of the wrong product", lambda: MockBackend().measure(gemm(64, 32, 64), [
        ((64, 1, 1, 1), (32, 1), (64, 1, 1, 1)), ((64, 1, 1, 2), (32, 1), (64, 1, 1, 1))]), ValueError,
     "config 1 of the batch is not a config of task 'gemm-64x32x64': factors (64, 1, 1, 2) of dimension 'm' multiply "
     "to 128, not its extent 64"),
    ("mock measures a config with a tuple too many", lambda: MockBackend().measure(gemm(64, 32, 64), [
        ((64, 1, 1, 1), (32, 1), (64, 1, 1, 1), (1,))]), ValueError, "config 0 of the batch is not a config of task "
     "'gemm-64x32x64': config ((64, 1, 1, 1), (32, 1), (64, 1, 1, 1), (1,)) has 4 factor tuples"),
    ("vector env of a gemm of 2**40 cubed", lambda: gymnasium.make_vec("schedule_gym/Gemm-v0", num_envs=2, m=2**40, k=2**40,
                                                                      n=2**40), TaskError, "needs 1.319e+13 TiB"),
]


@pytest.mark.parametrize("label, call, exc, text", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_a_precise_error(label, call, exc, text):
    with pytest.raises(exc, match=re.escape(text)):
        call()


def test_the_table_is_large_enough():
    assert len(CASES) >= 15


def test_numpy_integer_actions_and_configs_are_accepted():
    env = fresh_env()
    env.step(np.int64(3))
    env.reset(options={"config": tuple(tuple(np.int64(f) for f in fs) for fs in env.space.initial_config())})


def test_replay_refuses_a_short_config_before_looking_it_up(tmp_path):
    backend = make_backend("replay", records=str(tmp_path / "r.jsonl"), delegate="mock")
    with pytest.raises(ValueError, match=re.escape("config 0 of the batch is not a config of task 'gemm-64x32x64': "
                                                   "config ((64, 1, 1, 1), (32, 1)) has 2 factor tuples")):
        backend.measure(gemm(64, 32, 64), [((64, 1, 1, 1), (32, 1))])


def test_the_mock_measures_a_valid_config_given_as_lists_as_its_tuple():
    backend, task = MockBackend(), gemm(64, 32, 64)
    config = ((64, 1, 1, 1), (32, 1), (64, 1, 1, 1))
    (as_lists,), (as_tuples,) = backend.measure(task, [[list(f) for f in config]]), backend.measure(task, [config])
    assert as_lists.latency_s == as_tuples.latency_s


@pytest.mark.tvm
def test_the_tvm_backend_refuses_a_config_of_another_shape_before_building():
    """A window split (1,) where the window is 3 once built the whole convolution and recorded it under that config."""
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.backend import TVMBackend
    from schedule_gym.operators import packed_task
    from schedule_gym.tasks import conv2d

    task = packed_task(conv2d(1, 8, 8, 8, 8, 3, padding=1))
    backend = TVMBackend(template="conv2d-cpu-v3")
    try:
        with pytest.raises(ValueError, match=re.escape("config 0 of the batch is not a config of task "
                                                       f"{task.name!r}: factors (1,) of dimension 'rh' multiply to 1, "
                                                       "not its extent 3")):
            backend.measure(task, [((1,), (1, 8), (1, 1, 8), (1, 1, 8), (1,), (3,), (1, 8))])
    finally:
        backend.close()
