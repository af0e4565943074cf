"""gemm-cpu-v2: its task and tile space, its registration, precise refusals, correct kernels on odd shapes."""

import hashlib
import math

import numpy as np
import pytest

from schedule_gym import TilingEnv, dense, gemm
from schedule_gym.loopnest import LoopNest
from schedule_gym.spaces import TileSpace
from schedule_gym.templates import DEFAULTS, TEMPLATES, get_template, template_for
from schedule_gym.templates.gemm_cpu_v2 import LOOP_ORDER, SPLITS, check_task, gemm_task

ODD_SHAPES = ((100, 75, 130), (97, 89, 101), (1, 7, 13))  # non-powers of two, primes, a single row


def test_registered_selectable_and_not_a_default():
    template = get_template("gemm-cpu-v2")
    assert template is TEMPLATES["gemm-cpu-v2"]
    assert (template.name, template.version, template.target_kind, template.ops) == ("gemm-cpu-v2", "gemm-cpu-v2", "llvm", ("gemm",))
    # v1 stays the GEMM default and keeps its version, so its records stay valid
    assert DEFAULTS[("gemm", "llvm")] == "gemm-cpu" and template_for("gemm", "llvm").version == "gemm-cpu-v1"


def test_task_splits_order_and_nest():
    task = gemm_task(1024, 1024, 1024)
    assert task.name == "gemm-1024x1024x1024-packed" and task.op == "gemm"
    assert task.splits == SPLITS == (3, 2, 3) and task.loop_order == LOOP_ORDER
    # the one loop-nest description (mock, Felix) reads the same nest the template builds
    assert LoopNest.cpu(task).describe() == "m0 n0 | k0 n1 m1 k1 m2(unroll) n2(vector)"
    check_task(task)
    assert gemm_task(8, 8, 8, dtype="float64").dtype == "float64"


@pytest.mark.parametrize("shape", ODD_SHAPES + ((1024, 1024, 1024),))
def test_every_config_multiplies_to_the_extents(shape):
    """The factors mean (M/MC, MC/MR, MR), (K/KC, KC), (N/NC, NC/NR, NR): each tuple's product is the extent."""
    task = gemm_task(*shape)
    space = TileSpace(task)
    rng = np.random.default_rng(0)
    configs = [space.sample(rng) for _ in range(50)] if len(space) > 50 else list(space)
    for config in configs:
        factors = dict(zip(task.dim_names, config))
        assert tuple(math.prod(factors[d]) for d in ("m", "k", "n")) == shape
        assert [len(factors[d]) for d in ("m", "k", "n")] == [3, 2, 3]


def test_bad_task_template_combinations_are_precise_errors():
    v2 = get_template("gemm-cpu-v2")
    with pytest.raises(ValueError, match=r"needs GEMM splits 3/2/3 .* task 'gemm-64x64x64' has splits 4/2/4: build it with gemm_cpu_v2.gemm_task"):
        v2.check(gemm(64, 64, 64), "llvm")
    plain = gemm(64, 64, 64, 3, 2, 3)  # the right split counts in their default (v1-style) order
    with pytest.raises(ValueError, match=r"builds the loop order m0 n0 k0 n1 m1 k1 m2 n2; task 'gemm-64x64x64' has m0 n0 k0 m1 n1 k1 m2 n2"):
        v2.check(plain, "llvm")
    with pytest.raises(ValueError, match=r"template 'gemm-cpu-v2' builds \['gemm'\] tasks, not 'dense'"):
        v2.check(dense(64, 64, 64), "llvm")
    with pytest.raises(ValueError, match="template 'gemm-cpu-v2' is for 'llvm' targets, not 'cuda'"):
        v2.check(gemm_task(64, 64, 64), "cuda")
    # v1 builds any split count, so it builds v2's tasks too
    get_template("gemm-cpu").check(gemm_task(64, 64, 64), "llvm")


# ------------------------------------------------------------------------------------------- TVM
V1_SCRIPT_SHA256 = "b6cf747b0f794a3af7b3c9b1386883bbead9fd0da91b61a5d4edeaa6c7b947c4"


@pytest.mark.tvm
def test_v1_script_is_unchanged():
    """gemm-cpu (v1) builds byte-identical TVMScript: its records stay valid."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    script = schedule_script(gemm(128, 64, 96), ((2, 2, 4, 8), (8, 8), (1, 3, 4, 8)), "gemm-cpu")
    assert hashlib.sha256(script.encode()).hexdigest() == V1_SCRIPT_SHA256


@pytest.mark.tvm
def test_v2_schedule_packs_both_operands_and_keeps_the_output():
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    script = schedule_script(gemm_task(64, 32, 48), ((2, 8, 4), (2, 16), (1, 3, 16)), "gemm-cpu-v2")
    assert "B_global = T.sblock_alloc_buffer((3, 32, 16))" in script  # [N/NR][K][NR], compacted per block when lowered
    assert "A_global = T.sblock_alloc_buffer((16, 32, 4))" in script  # [M/MR][K][MR]
    assert "def main(A: T.Buffer((64, 32), \"float32\"), B: T.Buffer((32, 48), \"float32\"), C: T.Buffer((64, 48), \"float32\"))" in script
    assert "T.parallel(2)" in script and "T.unroll(4)" in script and "T.vectorized(16)" in script


@pytest.fixture(scope="module")
def v2_backend():
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm_backend import TVMBackend

    backend = TVMBackend(template="gemm-cpu-v2", protocol={"run_timeout_s": 20.0, "min_repeat_ms": 1, "repeat": 1})
    yield backend
    backend.close()


@pytest.mark.tvm
@pytest.mark.parametrize("shape", ODD_SHAPES)
def test_v2_kernels_are_correct_on_odd_shapes(v2_backend, shape):
    """Random configs and degenerate corners (all factors outer; one whole row of ``C`` as the micro-tile)
    build, run and pass the workload's check against the float64 reference. (The all-inner corner, a
    ``M``-times unrolled ``N``-wide vector, is correct too but takes a minute to build at 100 x 130.)"""
    task = gemm_task(*shape)
    space = TileSpace(task)
    rng = np.random.default_rng(1)
    m, k, n = shape
    corners = [((m, 1, 1), (k, 1), (n, 1, 1)), ((1, m, 1), (1, k), (1, 1, n)), ((1, m, 1), (k, 1), (1, 1, n))]
    configs = corners + [space.sample(rng) for _ in range(4)]
    results = v2_backend.measure(task, configs)
    for config, result in zip(configs, results):
        assert result.ok, (config, result.error)


@pytest.mark.tvm
def test_v2_through_the_environment(v2_backend):
    """gemm-cpu-v2 is usable from the environment with its task; a v1-split task is refused up front."""
    env = TilingEnv(gemm_task(48, 40, 64), backend=v2_backend)
    obs, info = env.reset(seed=0)
    action = int(np.flatnonzero(env.action_masks())[0])
    obs, reward, terminated, truncated, info = env.step(action)
    assert np.isfinite(reward) and info["latency_s"] > 0
    env.close()
    with pytest.raises(ValueError, match="needs GEMM splits 3/2/3"):
        TilingEnv(gemm(48, 40, 64), backend=v2_backend)
