import itertools
import math
from collections import Counter, deque

import numpy as np
import pytest

from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import gemm


@pytest.mark.parametrize(
    "n, expected", [(512, 484_000), (1024, 899_756), (2048, 1_589_952)]
)
def test_paper_space_sizes(n, expected):
    """Zhang et al., Section 5: the sizes of the 4/2/4 spaces of the three square GEMMs."""
    assert TileSpace(gemm(n, n, n)).size == expected


def brute_force_factorisations(extent, parts):
    return [c for c in itertools.product(range(1, extent + 1), repeat=parts) if math.prod(c) == extent]


@pytest.mark.parametrize("extent, parts", [(1, 3), (12, 3), (30, 4), (64, 2), (36, 3), (97, 2), (360, 2)])
def test_dimension_table_is_every_ordered_factorisation(extent, parts):
    space = TileSpace(gemm(extent, 1, 1, d_m=parts, d_k=1, d_n=1))
    table = {tuple(r) for r in space.dims[0].table.tolist()}
    expected = set(brute_force_factorisations(extent, parts))
    assert table == expected and space.dims[0].size == len(expected)


def test_size_is_exact_without_enumeration_for_huge_spaces():
    space = TileSpace(gemm(2**30, 2**30, 2**30, 8, 8, 8))
    assert space.size == math.comb(37, 7) ** 3  # C(30+8-1, 8-1) per dimension
    assert space.size > 2**63  # a Python int: no overflow


def test_index_round_trip_and_lazy_iteration():
    space = TileSpace(gemm(12, 8, 18, 3, 2, 3))
    configs = list(space)
    assert len(configs) == space.size == len(set(configs))
    for i, config in enumerate(configs):
        assert space.index(config) == i
        assert space.config(i) == config
    rng = np.random.default_rng(0)
    for i in rng.integers(0, space.size, 20):
        assert space.config(int(i)) in space


def test_initial_config_is_paper_s0():
    space = TileSpace(gemm(1024, 1024, 1024))
    assert space.initial_config() == ((1024, 1, 1, 1), (1024, 1), (1024, 1, 1, 1))


def test_paper_action_set_has_26_named_moves():
    space = TileSpace(gemm(1024, 1024, 1024))
    assert space.n_actions == 26
    names = [a.name for a in space.actions]
    assert len(set(names)) == 26 and "m: 2x[0] /2[3]" in names and "k: 2x[1] /2[0]" in names
    for i, name in enumerate(names):
        assert space.parse_action(name) == i
        assert space.parse_action(name.replace(" ", "")) == i


def test_move_doubles_one_factor_and_halves_another():
    space = TileSpace(gemm(1024, 1024, 1024))
    s0 = space.initial_config()
    a = space.parse_action("n: 2x[3] /2[0]")
    assert space.apply(s0, a) == ((1024, 1, 1, 1), (1024, 1), (512, 1, 1, 2))
    # halving a factor of 1 is illegal: the move does not exist there
    assert space.apply(s0, space.parse_action("n: 2x[0] /2[3]")) is None
    mask = space.action_mask(s0)
    assert mask.sum() == 3 + 1 + 3  # only factor 0 of each dimension can give up a 2
    assert [a for a, _ in space.neighbours(s0)] == list(np.flatnonzero(mask))


def test_non_power_of_two_moves_use_each_prime():
    space = TileSpace(gemm(12, 1, 1, 2, 1, 1))  # 12 = 2^2 * 3
    assert [a.name for a in space.actions] == ["m: 2x[0] /2[1]", "m: 2x[1] /2[0]", "m: 3x[0] /3[1]", "m: 3x[1] /3[0]"]
    assert space.apply(((12, 1), (1,), (1,)), space.parse_action("m: 3x[1] /3[0]")) == ((4, 3), (1,), (1,))


@pytest.mark.parametrize("shape", [(12, 6, 10), (8, 4, 16), (30, 9, 7), (18, 1, 45)])
def test_every_config_is_reachable_from_s0(shape):
    space = TileSpace(gemm(*shape))
    start = space.index(space.initial_config())
    seen = {start}
    queue = deque([space.rows_of_index(start)])
    while queue:
        rows = queue.popleft()
        for a in range(space.n_actions):
            nxt = space.step_rows(rows, a)
            if nxt is not None:
                idx = space.index_of_rows(nxt)
                if idx not in seen:
                    seen.add(idx)
                    queue.append(nxt)
    assert len(seen) == space.size


def test_moves_are_reversible_and_mask_matches_apply():
    space = TileSpace(gemm(24, 8, 20))
    rng = np.random.default_rng(1)
    for i in rng.integers(0, space.size, 50):
        config = space.config(int(i))
        mask = space.action_mask(config)
        for a, action in enumerate(space.actions):
            nxt = space.apply(config, a)
            assert (nxt is not None) == bool(mask[a])
            if nxt is not None:
                back = space.parse_action(f"{action.dim}: {action.prime}x[{action.shrink}] /{action.prime}[{action.grow}]")
                assert space.apply(nxt, back) == config


def test_sampling_is_uniform_and_without_replacement():
    space = TileSpace(gemm(8, 4, 4, 2, 2, 2))  # 4 * 3 * 3 = 36 configs
    rng = np.random.default_rng(0)
    idx = space.sample_indices(rng, space.size)
    assert sorted(idx.tolist()) == list(range(space.size))
    counts = Counter(space.index(space.sample(rng)) for _ in range(36_000))
    assert len(counts) == 36 and min(counts.values()) > 800 and max(counts.values()) < 1200
    with pytest.raises(ValueError, match="cannot draw 37 distinct configs"):
        space.sample_indices(rng, 37)


def test_factor_arrays_match_configs():
    space = TileSpace(gemm(64, 32, 128))
    idx = np.arange(0, space.size, 97)
    arrays = space.factors_of_indices(idx)
    for row, i in enumerate(idx):
        assert tuple(tuple(a[row].tolist()) for a in arrays) == space.config(int(i))


def test_random_moves_are_legal_neighbour_moves_and_reproducible() -> None:
    space = TileSpace(gemm(96, 64, 1, d_m=3, d_k=2, d_n=2))  # non-power-of-two m, an extent of 1
    rng = np.random.default_rng(0)
    start = space.sample_indices(rng, 500, replace=True)
    moved = space.random_moves(start, np.random.default_rng(1))
    for a, b in zip(start, moved):
        assert space.config(int(b)) in [c for _, c in space.neighbours(space.config(int(a)))]
    assert np.array_equal(moved, space.random_moves(start, np.random.default_rng(1)))
    # every legal move of a config is drawn sometimes
    one = np.full(2000, start[0])
    reached = {int(i) for i in space.random_moves(one, rng)}
    assert reached == {space.index(c) for _, c in space.neighbours(space.config(int(start[0])))}


# ------------------------------------------------------------------------- cost of the tables
def _no_tables_built(space):
    return not any(name in d.__dict__ for d in space.dims for name in ("table", "next_row", "next_row_lists"))


def test_table_cost_is_estimated_from_exact_row_counts_without_building():
    from schedule_gym.spaces import tile_space as ts

    space = TileSpace(gemm(2**30, 720720, 64, 6, 5, 2))
    m, k, _ = space.dims
    assert (m.size, len(m.actions)) == (324_632, 30)
    assert (k.size, len(k.actions)) == (656_250, 120)
    assert m.table_build_s == pytest.approx(324_632 * (ts.TABLE_ROW_S + 30 * ts.TABLE_ENTRY_S))
    assert space.table_build_s == pytest.approx(sum(d.table_build_s for d in space.dims))
    assert _no_tables_built(space)


@pytest.mark.parametrize(
    "task, dim, rows, limit",
    [
        (gemm(64, 2**6 * 3**5 * 5**4, 64, 4, 5, 4), "k", "1,852,200 rows x 60 moves, about 189 s", "MAX_TABLES_S=120 s"),
        (gemm(64, 64, 720720, 4, 2, 6), "n", "3,429,216 rows x 180 moves", "MAX_DIM_TABLE_ROWS=2,000,000 rows"),
    ],
)
def test_environments_refuse_tasks_whose_tables_would_take_minutes(task, dim, rows, limit):
    import time

    from schedule_gym import TilingEnv
    from schedule_gym.envs.vector_env import TilingVectorEnv
    from schedule_gym.errors import TaskError

    for make in (lambda: TilingEnv(task), lambda: TilingVectorEnv(2, task)):
        t0 = time.monotonic()
        with pytest.raises(TaskError) as info:
            make()
        assert time.monotonic() - t0 < 5  # refused up front, nothing tabulated
        message = str(info.value)
        assert f"dimension {dim!r} (extent {task.dims[['m', 'k', 'n'].index(dim)].extent} in" in message
        assert rows in message and limit in message and "estimated to take" in message
        assert task.name in message


def test_environments_warn_about_tables_that_are_slow_but_finish(monkeypatch):
    import warnings

    from schedule_gym import TilingEnv
    from schedule_gym.spaces import tile_space as ts

    space = TileSpace(gemm(2**30, 64, 64, 6, 2, 4))  # m: 324,632 rows x 30 moves, about 21 s
    assert ts.SLOW_TABLES_S < space.table_build_s < ts.MAX_TABLES_S
    with pytest.warns(UserWarning, match=r"dimension 'm' \(extent 1073741824 in 6 loops\): 324,632 rows x 30 moves, about 21\.4 s.*SLOW_TABLES_S=10 s"):
        space.check_table_cost()
    assert _no_tables_built(space)
    # the environment warns at construction, then builds: shown on a small task under a lowered threshold
    monkeypatch.setattr(ts, "SLOW_TABLES_S", 1e-4)
    with pytest.warns(UserWarning, match=r"task 'gemm-64x64x64' has factor tables estimated to take .* SLOW_TABLES_S=0\.0001 s"):
        env = TilingEnv(gemm(64, 64, 64))
    env.close()


def test_no_shipped_task_has_slow_tables():
    from schedule_gym.spaces import tile_space as ts
    from schedule_gym.tasks import get_task, task_names

    assert max(TileSpace(get_task(name)).table_build_s for name in task_names()) < ts.SLOW_TABLES_S
