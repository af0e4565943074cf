import pytest

from schedule_gym.tasks import PRESETS, LoopDim, Task, gemm, get_task


def test_gemm_task_is_plain_hashable_data():
    a, b = gemm(1024, 1024, 1024), gemm(1024, 1024, 1024)
    assert a == b and hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert a.extents == (1024, 1024, 1024) and a.splits == (4, 2, 4)
    assert a.flops == 2 * 1024**3
    assert a.dim("k").reduction and not a.dim("m").reduction


def test_loop_order_matches_the_cpu_template():
    order = " ".join(f"{d}{level}" for d, level in gemm(8, 8, 8).loop_order)
    assert order == "m0 n0 m1 n1 k0 m2 n2 k1 m3 n3"


@pytest.mark.parametrize("splits", [(1, 1, 1), (2, 2, 2), (3, 1, 2), (4, 3, 4), (1, 4, 1)])
def test_loop_order_lists_every_loop_once(splits):
    task = gemm(16, 16, 16, *splits)
    expected = {(d, level) for d, s in zip("mkn", splits) for level in range(s)}
    assert set(task.loop_order) == expected and len(task.loop_order) == len(expected)
    # each dimension's loops appear outermost (level 0) first
    for d in "mkn":
        levels = [level for name, level in task.loop_order if name == d]
        assert levels == sorted(levels)


@pytest.mark.parametrize("shape", [(1000, 768, 3072), (7, 1, 13), (1, 1, 1)])
def test_any_positive_shape_is_a_task(shape):
    assert gemm(*shape).extents == shape


def test_presets_include_paper_and_model_shapes():
    for name in ("gemm-512", "gemm-1024", "gemm-2048", "bert-base-qkv", "bert-base-ffn-up"):
        task = get_task(name)
        assert task.name == name and task.extents == PRESETS[name]


def test_loop_order_must_cover_every_loop():
    dims = (LoopDim("m", 4, 2), LoopDim("n", 4, 1))
    with pytest.raises(ValueError, match="loop_order"):
        Task("t", "gemm", dims, (), loop_order=(("m", 0), ("n", 0)))
