"""Property-based tests (Hypothesis) of the public surface against the error contract.

Property: every input either works or raises one of the documented exception types
(:data:`schedule_gym.errors.PUBLIC_ERRORS`), raised by schedule-gym's own code (not from deep inside
NumPy or Gymnasium), with a message that names the bad value. Settings (no example database, bounded
examples and deadline) are the ``schedule-gym`` profile in ``tests/conftest.py``.
"""

from __future__ import annotations

import gzip
import json
import math
import traceback

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from schedule_gym import MockBackend, TileSpace, TilingEnv, gemm  # noqa: E402
from schedule_gym.backends import ReplayBackend  # noqa: E402
from schedule_gym.errors import PUBLIC_ERRORS, RecordFileError  # noqa: E402
from schedule_gym.records import RecordStore  # noqa: E402

TASK = gemm(16, 8, 16, 2, 2, 2)
SPACE = TileSpace(TASK)

# values of every kind: right and wrong types, edge numbers, containers
ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-4, 64), max_size=4),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


def parts(value: object) -> list[object]:
    """``value`` and everything nested in it (a message may name the one bad element)."""
    out = [value]
    if isinstance(value, (list, tuple)):
        for v in value:
            out.extend(parts(v))
    return out


def _tuples(value: object) -> object:
    return tuple(_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def names(exc: BaseException, *values: object) -> bool:
    """Whether the message names one of ``values`` (its repr or str, lists also as tuples, or the
    argument's name)."""
    text = str(exc)
    for value in values:
        if isinstance(value, str) and value in text:
            return True
        for form in (repr(value), str(value), repr(_tuples(value))):
            if form and form in text:
                return True
    return False


def assert_contract(exc: BaseException, *values: object) -> None:
    assert isinstance(exc, PUBLIC_ERRORS), f"{type(exc).__name__}: {exc}"
    origin = traceback.extract_tb(exc.__traceback__)[-1].filename
    assert "schedule_gym" in origin, f"raised from {origin}: {type(exc).__name__}: {exc}"
    assert names(exc, *values), f"message does not name {values!r}: {exc}"


# ------------------------------------------------------------------------------------ tasks
@given(
    st.lists(st.one_of(st.integers(-3, 40), ANY_VALUE), min_size=6, max_size=6),
)
def test_task_shapes_and_split_counts(args):
    m, k, n, d_m, d_k, d_n = args
    try:
        task = gemm(m, k, n, d_m, d_k, d_n)
    except Exception as exc:  # noqa: BLE001 - the property checks it
        assert_contract(exc, *args)
        return
    assert [d.extent for d in task.dims] == [m, k, n]


# ------------------------------------------------------------------------- env constructor
ENV_KWARGS = {
    "reward": st.sampled_from(["inverse", "log_speedup_prev", "log_speedup_s0"]),
    "observation": st.sampled_from(["fraction", "log2"]),
    "include_shape": st.booleans(),
    "start": st.sampled_from(["s0", "random"]),
    "illegal_action_penalty": st.floats(-10, 10),
    "failure_penalty": st.floats(-10, 10),
    "budget_measurements": st.one_of(st.none(), st.integers(1, 50)),
    "budget_fraction": st.one_of(st.none(), st.floats(0.01, 1.0)),
    "budget_seconds": st.one_of(st.none(), st.floats(0.1, 100)),
    "reward_ref_latency_s": st.one_of(st.none(), st.floats(1e-6, 1.0)),
    "render_mode": st.sampled_from([None, "ansi", "rgb_array"]),
}


@st.composite
def env_kwargs(draw):
    """Valid kwargs, with some replaced by values of any kind."""
    kwargs = {name: draw(strategy) for name, strategy in ENV_KWARGS.items() if draw(st.booleans())}
    wrong = draw(st.lists(st.sampled_from(sorted(ENV_KWARGS)), max_size=2, unique=True))
    for name in wrong:
        kwargs[name] = draw(ANY_VALUE)
    return kwargs, wrong


@given(env_kwargs())
def test_env_constructor_kwargs(drawn):
    kwargs, wrong = drawn
    try:
        env = TilingEnv(TASK, **kwargs)
    except Exception as exc:  # noqa: BLE001
        assert wrong, f"valid kwargs {kwargs} were refused: {exc}"
        assert_contract(exc, *wrong, *(kwargs[w] for w in wrong))
        return
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    env.close()


@given(st.dictionaries(st.sampled_from(["noise", "seed", "repeats", "profile", "nosie"]), ANY_VALUE, max_size=3))
def test_backend_options(options):
    try:
        env = TilingEnv(TASK, backend="mock", backend_options=options)
    except Exception as exc:  # noqa: BLE001
        assert_contract(exc, *options.keys(), *options.values())
        return
    env.reset(seed=1)
    env.close()


# ------------------------------------------------------------------------- reset and step
RESET_OPTIONS = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["config", "start", "state", "seed"]),
        st.one_of(ANY_VALUE, st.integers(-2, SPACE.size + 2), st.sampled_from(["s0", "random"]),
                  st.sampled_from([SPACE.config(i) for i in range(0, SPACE.size, max(1, SPACE.size // 8))])),
        max_size=2,
    ),
)


@given(RESET_OPTIONS, st.lists(st.one_of(st.integers(-3, SPACE.n_actions + 3), ANY_VALUE), max_size=8))
def test_reset_options_and_actions(options, actions):
    env = TilingEnv(TASK, budget_measurements=5)
    try:
        try:
            obs, info = env.reset(seed=0, options=options)
        except Exception as exc:  # noqa: BLE001
            assert_contract(exc, *(options or {}).keys(), *(options or {}).values())
            return
        assert env.observation_space.contains(obs)
        for action in actions:
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except Exception as exc:  # noqa: BLE001
                assert_contract(exc, action)
                continue
            assert env.observation_space.contains(obs) and math.isfinite(reward)
            assert info["num_measurements"] <= 5  # the budget holds
            assert not terminated
    finally:
        env.close()


# --------------------------------------------------------------------------------- configs
CONFIGS = st.one_of(
    ANY_VALUE,
    st.lists(st.lists(st.one_of(st.integers(-2, 20), st.floats(0, 20), st.booleans()), max_size=3), max_size=4),
    st.sampled_from([SPACE.config(i) for i in range(SPACE.size)]),
)


@given(CONFIGS)
def test_configs(config):
    try:
        valid = SPACE.validate(config)
    except Exception as exc:  # noqa: BLE001
        assert_contract(exc, *parts(config))
        return
    assert SPACE.config(SPACE.index_of_rows(SPACE.rows(valid))) == valid


# ----------------------------------------------------------------------------- record files
def _good_lines(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("fuzz") / "good.jsonl"
    backend = ReplayBackend(path, delegate=MockBackend())
    backend.measure(TASK, [SPACE.config(i) for i in range(3)])
    backend.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> bytes:
    return _good_lines(tmp_path_factory)


def load(tmp_path_factory, name: str, data: bytes):
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_bytes(data)
    try:
        return RecordStore(path), path
    except Exception as exc:  # noqa: BLE001
        assert isinstance(exc, RecordFileError), f"{type(exc).__name__}: {exc}"
        assert_contract(exc, str(path))
        return None, path


@given(st.binary(max_size=300))
def test_arbitrary_bytes_as_a_record_file(tmp_path_factory, data):
    load(tmp_path_factory, "junk.jsonl", data)
    load(tmp_path_factory, "junk.jsonl.gz", data)


@given(st.data())
def test_truncated_gzip_record_files(tmp_path_factory, good, data):
    packed = gzip.compress(good)
    cut = data.draw(st.integers(0, len(packed)))
    store, _ = load(tmp_path_factory, "cut.jsonl.gz", packed[:cut])
    assert store is None or cut in (0, len(packed))  # an empty file is an empty table


FIELDS = ["schema", "task", "task_def", "backend", "target", "template", "config", "latency_s", "costs_s", "error",
          "error_kind", "build_s", "run_s", "coarse", "protocol", "time", "host"]


@given(st.data())
def test_valid_json_with_wrong_fields(tmp_path_factory, good, data):
    lines = good.decode().splitlines()
    record = json.loads(lines[-1])
    for _ in range(data.draw(st.integers(1, 3))):
        field = data.draw(st.sampled_from(FIELDS))
        if data.draw(st.booleans()):
            record.pop(field, None)
        else:
            record[field] = data.draw(st.one_of(ANY_VALUE, st.recursive(st.integers(-3, 70), st.lists, max_leaves=6)))
    text = "\n".join([*lines[:-1], json.dumps(record)]) + "\n"
    store, path = load(tmp_path_factory, "wrong.jsonl", text.encode())
    if store is not None:  # accepted: then it is a well-formed record of its task
        for r in store:
            TileSpace(r.task).validate(r.result.config)
            assert r.result.latency_s is None or (math.isfinite(r.result.latency_s) and r.result.latency_s > 0)


def test_the_profile_keeps_the_database_out_of_the_repository():
    assert hypothesis.settings().database is None
    assert np.isfinite(hypothesis.settings().deadline.total_seconds())
