"""The CUDA templates of conv2d and batch matmul: they build for sm_90, nvcc compiles their kernels, configs
CUDA cannot launch are refused with precise errors, and (where a GPU is present) their kernels are correct."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import batch_matmul, conv2d
from schedule_gym.templates import get_template, template_for

pytestmark = pytest.mark.tvm
tvm = pytest.importorskip("tvm")

from schedule_gym.backends.tvm.backend import TVMBackend  # noqa: E402
from schedule_gym.backends.tvm.builder import compile_cuda_source  # noqa: E402

SM90 = {"kind": "cuda", "arch": "sm_90"}
#: static shared memory a block may use without opting in (nvcc refuses more: "too much shared data")
SHARED_BYTES = 48 * 1024

TASKS = [
    conv2d(1, 14, 14, 16, 32, 3, padding=1),
    conv2d(1, 15, 15, 8, 16, 3, stride=2, padding=2, dilation=2),
    conv2d(1, 14, 14, 16, 16, 3, padding=1, groups=16),  # depthwise
    conv2d(1, 14, 14, 16, 32, 3, padding=1, layout="NCHW"),
    batch_matmul(4, 64, 32, 48),
    batch_matmul(4, 64, 32, 48, transpose_b=True),
]


def _threads(task, config) -> int:
    return int(np.prod([f[2] for d, f in zip(task.dims, config) if not d.reduction]))


def _bmm_shared_bytes(task, config) -> int:
    """Shared memory of one k0 step of the batch matmul template: an A and a B tile."""
    f = dict(zip(task.dim_names, config))
    tile = {x: task.dim(x).extent // f[x][0] for x in ("b", "m", "n")}
    return 4 * tile["b"] * f["k"][1] * (tile["m"] + tile["n"])


def launchable_configs(task, n: int = 3, seed: int = 0) -> list:
    """``n`` seeded random configs of ``task`` that CUDA can launch (the conv2d tasks' whole inputs fit in
    shared memory, so only the batch matmuls need the shared-memory filter)."""
    space, rng, out = TileSpace(task), np.random.default_rng(seed), []
    while len(out) < n:
        config = space.sample(rng)
        if _threads(task, config) > 1024:
            continue
        if task.op == "batch_matmul" and _bmm_shared_bytes(task, config) > SHARED_BYTES:
            continue
        out.append(config)
    return out


def test_conv2d_and_batch_matmul_get_their_cuda_templates():
    assert template_for("conv2d", "cuda").version == "conv2d-cuda-v1"
    assert template_for("batch_matmul", "cuda").version == "batch_matmul-cuda-v1"
    backend = TVMBackend(target=SM90)  # no GPU needed to pick templates
    try:
        assert backend.template_of(TASKS[0]).name == "conv2d-cuda"
        assert backend.template_of(TASKS[-1]).name == "batch_matmul-cuda"
    finally:
        backend.close()


def _build(task, config):
    return tvm.compile(template_for(task.op, "cuda").schedule(task, config), target=SM90)


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_random_configs_build_for_sm90(task):
    for config in launchable_configs(task):
        source = _build(task, config).mod.imports[0].inspect_source("")
        assert "__global__" in source and "__shared__" in source, config
        if task.op == "conv2d" and any(task.param("padding")):  # the padded input tile is staged in shared memory
            assert "pad_shared" in source, config


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
def test_nvcc_compiles_the_kernels_of_random_configs(task):
    with tvm.target.Target(SM90):  # compile_cuda_source reads the arch of the current target (as the backend calls it)
        for config in launchable_configs(task, n=2):  # nvcc takes about 2 s a kernel here
            assert len(compile_cuda_source(_build(task, config), SM90)) > 0, config


@pytest.mark.parametrize(
    "task, config, text",
    [
        (TASKS[0], ((1, 1, 1, 1), (1, 1, 14, 1), (1, 1, 14, 1), (4, 1, 8, 1), (3, 1), (3, 1), (4, 4)),
         "needs 1568 threads a block (n2 x h2 x w2 x co2 = 1 x 14 x 14 x 8); CUDA allows 1024"),
        (TASKS[3], ((1, 1, 1, 1), (1, 1, 32, 1), (1, 1, 7, 2), (1, 1, 14, 1), (4, 4), (3, 1), (3, 1)),
         "needs 3136 threads a block (n2 x co2 x h2 x w2 = 1 x 32 x 7 x 14); CUDA allows 1024"),
        (TASKS[4], ((1, 1, 4, 1), (1, 1, 16, 4), (4, 8), (1, 1, 24, 2)),
         "needs 1536 threads a block (b2 x m2 x n2 = 4 x 16 x 24); CUDA allows 1024"),
        (batch_matmul(128, 4, 4, 4), ((1, 1, 128, 1), (4, 1, 1, 1), (4, 1), (4, 1, 1, 1)),
         "needs 128 threads on threadIdx.z (b2 = 128); CUDA allows 64"),
        (batch_matmul(1, 65536, 1, 1), ((1, 1, 1, 1), (65536, 1, 1, 1), (1, 1), (1, 1, 1, 1)),
         "needs 65536 blocks on blockIdx.y (m0 = 65536); CUDA allows 65535"),
    ],
    ids=["conv2d-nhwc", "conv2d-nchw", "bmm", "bmm-threadIdx.z", "bmm-blockIdx.y"],
)
def test_configs_cuda_cannot_launch_are_refused_at_build_time(task, config, text):
    with pytest.raises(ValueError) as info:
        template_for(task.op, "cuda").schedule(task, config)
    assert str(info.value) == f"config {config} {text}"


def test_other_splits_are_refused():
    task = conv2d(1, 14, 14, 16, 32, 3, padding=1, splits=(4, 4, 4, 4, 2, 2, 1))
    config = TileSpace(task).initial_config()
    with pytest.raises(ValueError, match=r"needs splits \(4, 4, 4, 4, 2, 2, 2\) \(4 loops per spatial dimension, 2 per "
                                         r"reduction\), got \(4, 4, 4, 4, 2, 2, 1\)"):
        get_template("conv2d-cuda").schedule(task, config)


@pytest.mark.skipif(not tvm.cuda(0).exist, reason="no CUDA GPU here (the lent GPU machines run this)")
def test_kernels_are_correct_where_a_gpu_is_present():
    cuda = TVMBackend(target="cuda")
    try:
        for task in TASKS:
            for result in cuda.measure(task, launchable_configs(task, n=2)):
                assert result.ok and result.latency_s > 0, (task.name, result)
    finally:
        cuda.close()
