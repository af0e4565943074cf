"""The disk cache of whole mock latency tables (backends/mock/table_cache.py): what is kept, that a loaded table
equals a scored one to the bit, what invalidates it, and how the vector environment's tables use it."""

from __future__ import annotations

import numpy as np
import pytest

from schedule_gym import MockBackend, gemm
from schedule_gym.backends.mock import table_cache
from schedule_gym.backends.mock.model import MOCK_MODEL_VERSION
from schedule_gym.benchmark.oracle import all_latencies
from schedule_gym.cache import CACHE_ENV

TASK = gemm(64, 64, 64, d_m=3, d_k=2, d_n=3)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of the test's own, keeping tables from one config up (the task's space is small)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(table_cache, "MIN_CONFIGS", 1)
    return tmp_path / "cache" / "mock-tables"


def test_a_table_is_scored_once_then_loaded_equal_to_the_bit(cache, monkeypatch):
    backend = MockBackend()
    scored = backend.score_space(TASK)
    first = backend.whole_table(TASK)
    assert np.array_equal(first, scored) and first.dtype == np.float64
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".npy"  # no partial file left behind

    def refuse(_task):
        raise AssertionError("scored again")

    fresh = MockBackend()
    monkeypatch.setattr(fresh, "score_space", refuse)
    assert np.array_equal(fresh.whole_table(TASK), scored)


def test_small_tables_are_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    assert MockBackend().space(TASK).size < table_cache.MIN_CONFIGS
    MockBackend().whole_table(TASK)
    assert not (tmp_path / "cache").exists()


def test_the_key_changes_with_everything_the_latencies_depend_on():
    default = MockBackend().profile  # the machine's own profile: another one must differ from it on every CPU
    numbers = default.digest()
    key = table_cache.table_key(MOCK_MODEL_VERSION, numbers, TASK.key, 100)
    other = "znver5-2core-fitted" if default.name == "znver3-2core-fitted" else "znver3-2core-fitted"
    other_profile = MockBackend(other).profile.digest()
    assert len({key, table_cache.table_key("mock-cpu-v9", numbers, TASK.key, 100),
                table_cache.table_key(MOCK_MODEL_VERSION, other_profile, TASK.key, 100),
                table_cache.table_key(MOCK_MODEL_VERSION, numbers, gemm(64, 64, 32).key, 100),
                table_cache.table_key(MOCK_MODEL_VERSION, numbers, TASK.key, 101)}) == 5
    assert table_cache.table_key(MOCK_MODEL_VERSION, str(numbers), TASK.key, 100) == key


def test_profiles_share_no_table(cache):
    a = MockBackend("znver5-2core-fitted").whole_table(TASK)
    b = MockBackend("znver3-2core-fitted").whole_table(TASK)
    assert len(list(cache.iterdir())) == 2 and not np.array_equal(a, b)


def test_a_damaged_file_is_scored_again_and_replaced(cache):
    backend = MockBackend()
    want = backend.whole_table(TASK)
    (path,) = cache.iterdir()
    np.save(path, np.zeros(3))  # a table of another size
    assert np.array_equal(MockBackend().whole_table(TASK), want)
    assert np.array_equal(np.load(path), want)
    path.write_bytes(b"not a numpy file")
    assert np.array_equal(MockBackend().whole_table(TASK), want)


def test_the_vector_tables_whole_is_read_only_and_all_latencies_uses_it(cache):
    backend = MockBackend()
    space = backend.space(TASK)
    table = backend.latency_table(TASK, space)
    some = np.array([0, 5, space.size - 1])
    before = table(some).copy()  # partly scored first, then whole
    whole = all_latencies(table, space.size)
    assert np.array_equal(whole, backend.score_space(TASK)) and np.array_equal(whole[some], before)
    with pytest.raises(ValueError, match="read-only"):
        whole[0] = 1.0
    assert np.array_equal(table(np.arange(space.size)), whole)  # the table serves the same array
    with pytest.raises(ValueError, match=rf"the table holds {space.size} configs, not 7"):
        all_latencies(table, 7)
